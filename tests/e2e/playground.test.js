// The playground page (GET /) in a real browser: Debian's headless chromium driven by
// puppeteer-core. Types code into the page key by key, waits for the ghost-text suggestion,
// accepts it with Tab, and checks on /metrics that the keystrokes were EFIM hits.
// usage: node playground.test.js BASE_URL CHROMIUM [SCREENSHOT.png]
"use strict";
const path = require("path");
const puppeteer = require(path.join(__dirname, "../../.deps/npm/node_modules/puppeteer-core"));

const [base, chromium, screenshot] = process.argv.slice(2);
let failed = 0;
function check(cond, what) {
  console.log((cond ? "ok   " : "FAIL ") + what);
  if (!cond) failed++;
}

async function metric(name, labels) {
  const text = await (await fetch(base + "/metrics")).text();
  const line = text.split("\n").find(l => l.startsWith(name + "{") && labels.every(x => l.includes(x)));
  return line ? Number(line.split(" ").pop()) : 0;
}

(async () => {
  const browser = await puppeteer.launch({
    executablePath: chromium, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 800 });
    const errors = [];
    page.on("pageerror", e => errors.push(String(e)));
    await page.goto(base + "/", { waitUntil: "networkidle0" });
    check((await page.title()) === "efim playground", "the page is served at /");
    const hits0 = await metric("efim_infill_requests_total", ['layout="efim"', 'reason="hit"']);

    // A user types a function body at the end of the buffer, one key at a time.
    await page.focus("#code");
    await page.evaluate(() => {
      const c = document.getElementById("code");
      c.setSelectionRange(c.value.length, c.value.length);
    });
    for (const key of "if n < 2:\n        return n\n    return fib") {
      await page.keyboard.type(key);
      await new Promise(r => setTimeout(r, 60));
    }
    await page.waitForFunction(
      () => document.getElementById("ghost").textContent.trim().length > 0 &&
            Number(document.body.dataset.requests || 0) > 0,
      { timeout: 30000 });
    const ghost = await page.$eval("#ghost", el => el.textContent);
    const layout = await page.$eval("#s-layout", el => el.textContent);
    check(ghost.trim().length > 0, `a suggestion appears as ghost text: ${JSON.stringify(ghost.slice(0, 60))}`);
    check(/EFIM/.test(layout), `the panel shows the layout of the last request: ${layout}`);
    const cached = await page.$eval("#s-cache", el => Number(el.textContent));
    check(cached > 0, `the panel shows tokens reused from the cache: ${cached}`);
    if (screenshot) await page.screenshot({ path: screenshot });

    // Tab inserts the suggestion at the cursor.
    const before = await page.$eval("#code", el => el.value);
    await page.keyboard.press("Tab");
    const after = await page.$eval("#code", el => el.value);
    check(after === before + ghost, "Tab inserts the suggestion at the cursor");

    const hits = await metric("efim_infill_requests_total", ['layout="efim"', 'reason="hit"']);
    check(hits > hits0, `/metrics counts EFIM hits for the keystrokes (${hits0} -> ${hits})`);
    const n = await page.evaluate(() => Number(document.body.dataset.requests || 0));
    check(n >= 1, `the chart has requests (${n})`);
    check(errors.length === 0, `no script errors (${errors.join("; ")})`);
  } finally {
    await browser.close();
  }
  if (failed) {
    console.log(`${failed} check(s) failed`);
    process.exit(1);
  }
  console.log("playground e2e: ok");
})().catch(e => {
  console.error(e);
  process.exit(1);
});
