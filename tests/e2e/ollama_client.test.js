// The official `ollama` npm client (0.6.3) against `efim serve --alias efim-tiny`, plus the
// raw request bodies Continue's and twinny's Ollama providers send.
// usage: node ollama_client.test.js BASE_URL
"use strict";
const path = require("path");
const { Ollama } = require(path.join(__dirname, "../../.deps/npm/node_modules/ollama"));

const base = process.argv[2];
const ollama = new Ollama({ host: base });
let failed = 0;
function check(cond, what) {
  console.log((cond ? "ok   " : "FAIL ") + what);
  if (!cond) failed++;
}

const prefix = "import os\n\ndef read_file(path):\n    ";
const suffix = "\n\nprint(fibonacci(10))\n";
const greedy = { temperature: 0, num_predict: 24 };

async function ndjson(body, headers = {}) {
  const r = await fetch(base + "/api/generate", {
    method: "POST", headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, type: r.headers.get("content-type"), text };
}

(async () => {
  const tags = await ollama.list();
  check(tags.models.length === 1 && tags.models[0].name === "efim-tiny:latest",
        `list: the served model under its Ollama name (${tags.models.map(m => m.name)})`);
  check(tags.models[0].details.format === "gguf" && tags.models[0].details.quantization_level === "Q8_0",
        `list: details ${JSON.stringify(tags.models[0].details)}`);

  const show = await ollama.show({ model: "efim-tiny" });
  check(show.template.includes(".Suffix"), "show: the template mentions .Suffix (Continue then sends suffix)");
  check(show.capabilities.includes("insert"), `show: capabilities ${show.capabilities}`);
  check(/num_ctx\s+\d+/.test(show.parameters), `show: parameters give num_ctx (${JSON.stringify(show.parameters)})`);

  const once = await ollama.generate({ model: "efim-tiny", prompt: prefix, suffix, options: greedy, stream: false });
  check(typeof once.response === "string" && once.response.length > 0,
        `generate with suffix: ${JSON.stringify(once.response)}`);
  check(once.done === true && ["stop", "length"].includes(once.done_reason), `done_reason ${once.done_reason}`);
  check(once.prompt_eval_count > 0 && once.eval_count >= 3 && once.total_duration > 0,
        `counts and durations (${once.prompt_eval_count}, ${once.eval_count}, ${once.total_duration} ns)`);

  let streamed = "", last = null, chunks = 0;
  for await (const part of await ollama.generate({ model: "efim-tiny", prompt: prefix, suffix, options: greedy, stream: true })) {
    if (!part.done) streamed += part.response;
    last = part;
    chunks++;
  }
  check(streamed === once.response, `streamed text equals the single answer (greedy; ${chunks} chunks)`);
  check(last && last.done === true && last.done_reason === once.done_reason, "the last chunk is done");

  // Errors as Ollama's: status and {"error"}.
  try {
    await ollama.generate({ model: "nope", prompt: "x", stream: false });
    check(false, "an unknown model is an error");
  } catch (e) {
    check(e.status_code === 404 && /model 'nope' not found/.test(e.error), `unknown model: ${e.status_code} ${e.error}`);
  }
  try {
    await ollama.show({ model: "nope" });
    check(false, "show of an unknown model is an error");
  } catch (e) {
    check(e.status_code === 404 && /model 'nope:latest' not found/.test(e.error), `show unknown: ${e.status_code} ${e.error}`);
  }
  const bad = await ndjson({ model: "efim-tiny", prompt: "x", options: { temperature: "hot" }, stream: false });
  check(bad.status === 400 && JSON.parse(bad.text).error === 'option "temperature" must be of type float32, got string "hot"',
        `a bad option: ${bad.status} ${bad.text}`);
  const loaded = await ollama.generate({ model: "efim-tiny", prompt: "" });
  check(loaded.done && loaded.done_reason === "load", "an empty prompt loads the model");
  const version = await ollama.version();
  check(typeof version.version === "string", `version ${version.version}`);
  const ps = await ollama.ps();
  check(ps.models.length === 1 && ps.models[0].context_length > 0, "ps lists the running model");

  // Continue's autocomplete body (core/llm/llms/Ollama.ts): no `stream` (Ollama streams), the
  // options it sets, keep_alive 1800; every NDJSON line ends in "\n".
  const cont = await ndjson({
    model: "efim-tiny", prompt: prefix, suffix,
    options: { temperature: 0.01, num_predict: 24, num_ctx: 8192, stop: ["/src/", "#- coding: utf-8", "```"] },
    keep_alive: 1800,
  });
  check(cont.status === 200 && cont.type.startsWith("application/x-ndjson"), `Continue: NDJSON (${cont.type})`);
  check(cont.text.endsWith("\n") && cont.text.trim().split("\n").every(l => JSON.parse(l)),
        "Continue: every line is JSON and ends in a newline");
  const lines = cont.text.trim().split("\n").map(l => JSON.parse(l));
  check(lines[lines.length - 1].done === true, "Continue: the last line is done");

  // twinny's body (providers/completion.ts): its own FIM prompt, no suffix, an empty
  // Authorization header, keep_alive "5m".
  const tw = await ndjson({
    model: "efim-tiny", prompt: "<fim_prefix>" + prefix + "<fim_suffix>" + suffix + "<fim_middle>",
    stream: true, keep_alive: "5m", options: { temperature: 0.2, num_predict: 24 },
  }, { Authorization: "" });
  const twl = tw.text.trim().split("\n").map(l => JSON.parse(l));
  check(tw.status === 200 && twl[twl.length - 1].done, "twinny: streamed to done");
  const raw = await ollama.generate({
    model: "efim-tiny", raw: true, stream: false, options: greedy,
    prompt: "<fim_prefix>" + prefix + "<fim_suffix>" + suffix + "<fim_middle>",
  });
  check(raw.response === once.response,
        `raw FIM prompt (Continue's first request) equals the suffix request's answer: ${JSON.stringify(raw.response)}`);
  check(raw.context === undefined, "raw: no context, as Ollama");
  // twinny's prompt spells the PSM sentinels: parsed as tokens, it is the prompt the server laid
  // out for the suffix request (psm mode).
  const n = once.context.length - once.eval_count, twc = twl[twl.length - 1].context;
  check(n > 0 && JSON.stringify(twc.slice(0, n)) === JSON.stringify(once.context.slice(0, n)),
        `twinny: its sentinels were parsed as tokens (the ${n} prompt tokens of the suffix request)`);
  if (failed) {
    console.log(`${failed} check(s) failed`);
    process.exit(1);
  }
  console.log("ollama client e2e: ok");
})().catch(e => {
  console.error(e);
  process.exit(1);
});
