// efim's /v1/completions driven by the official `openai` npm package (.deps/node_modules/openai,
// installed by scripts/deps.sh): what an OpenAI client library actually sends and parses.
// Usage: node openai_client.test.js BASE_URL API_KEY MODEL_ID   (BASE_URL ends in /v1)
// Exits non-zero on the first failed check; the missing package is a failure, not a skip.
'use strict';
const assert = require('node:assert/strict');
const path = require('node:path');

const OPENAI_DIR = path.resolve(__dirname, '..', '..', '.deps', 'node_modules', 'openai');
const { OpenAI } = require(OPENAI_DIR);  // throws (exit 1) when deps.sh has not run

const [baseURL, apiKey, modelId] = process.argv.slice(2);
assert.ok(baseURL && apiKey && modelId, 'usage: openai_client.test.js BASE_URL API_KEY MODEL_ID');

// maxRetries 0: a retried 5xx would hide a server bug behind a later success.
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });

const PREFIX = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n';
const SUFFIX = '\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\nprint(fibonacci(10))\n';
const MAX_TOKENS = 12;

function checkUsage(usage, maxTokens, what) {
  assert.ok(usage, `${what}: usage is present`);
  const { prompt_tokens: p, completion_tokens: c, total_tokens: t } = usage;
  for (const [k, v] of Object.entries({ p, c, t }))
    assert.ok(Number.isInteger(v) && v >= 0, `${what}: usage ${k} = ${v} is a count`);
  assert.ok(p > 0, `${what}: prompt_tokens ${p} > 0`);
  assert.equal(t, p + c, `${what}: total_tokens = prompt_tokens + completion_tokens`);
  assert.ok(c <= maxTokens, `${what}: completion_tokens ${c} <= max_tokens ${maxTokens}`);
  const cached = usage.prompt_tokens_details?.cached_tokens;
  assert.ok(Number.isInteger(cached), `${what}: prompt_tokens_details.cached_tokens is a count`);
  assert.ok(cached >= 0 && cached < p,
            `${what}: 0 <= cached_tokens ${cached} < prompt_tokens ${p}`);
}

function checkChoice(choice, maxTokens, usage, what) {
  assert.equal(typeof choice.text, 'string', `${what}: text is a string`);
  assert.equal(choice.index, 0, `${what}: index`);
  assert.ok(['stop', 'length'].includes(choice.finish_reason),
            `${what}: finish_reason '${choice.finish_reason}'`);
  if (choice.finish_reason === 'length')
    assert.equal(usage.completion_tokens, maxTokens, `${what}: 'length' means max_tokens used`);
}

async function models() {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.deepEqual(ids, [modelId], 'models.list() names the served model');
}

// Greedy infill, answered at once, then the same request streamed: the same text.
async function infillOnceAndStreamed() {
  const body = { model: modelId, prompt: PREFIX, suffix: SUFFIX, max_tokens: MAX_TOKENS,
                 temperature: 0, seed: 7 };
  const once = await client.completions.create(body);
  assert.equal(once.object, 'text_completion');
  assert.equal(once.model, modelId);
  assert.equal(once.choices.length, 1);
  checkUsage(once.usage, MAX_TOKENS, 'infill');
  checkChoice(once.choices[0], MAX_TOKENS, once.usage, 'infill');

  const stream = await client.completions.create({ ...body, stream: true });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    assert.equal(chunk.object, 'text_completion');
    assert.equal(chunk.choices.length, 1);
    assert.equal(typeof chunk.choices[0].text, 'string');
    assert.equal(finish, null, 'no chunk after the one with finish_reason');
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(chunks >= 1, 'the stream yielded chunks');
  assert.equal(text, once.choices[0].text, 'streamed text equals the non-streamed greedy text');
  assert.equal(finish, once.choices[0].finish_reason, 'same finish_reason streamed');
  checkUsage(usage, MAX_TOKENS, 'streamed infill');
  assert.equal(usage.prompt_tokens, once.usage.prompt_tokens, 'same prompt streamed');
  assert.equal(usage.completion_tokens, once.usage.completion_tokens, 'same completion length');
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0,
            'the repeated prompt hits the prefix cache');
  return once.choices[0].text;
}

// The raw SSE body ends with the [DONE] sentinel (the library stops at it silently).
async function rawStreamEndsWithDone() {
  const res = await fetch(`${baseURL}/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model: modelId, prompt: PREFIX, suffix: SUFFIX, max_tokens: 4,
                           temperature: 0, stream: true }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  const raw = await res.text();
  const events = raw.split('\n\n').filter((e) => e.length > 0);
  assert.ok(events.length >= 2, `at least one chunk and [DONE]: ${raw}`);
  for (const e of events) assert.ok(e.startsWith('data: '), `an SSE data line: ${e}`);
  assert.equal(events[events.length - 1], 'data: [DONE]');
  for (const e of events.slice(0, -1)) JSON.parse(e.slice(6));
}

async function plainCompletion() {
  const r = await client.completions.create({ model: modelId, prompt: 'def add(a, b):\n    return',
                                              max_tokens: 8, temperature: 0 });
  assert.equal(r.choices.length, 1);
  checkUsage(r.usage, 8, 'plain');
  checkChoice(r.choices[0], 8, r.usage, 'plain');
  assert.ok(r.usage.completion_tokens > 0, 'a plain completion generates tokens');
  assert.ok(r.choices[0].text.length > 0, 'a plain completion has text');
}

async function expectError(promise, ctor, status, what) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, `${what}: an APIError, got ${err}`);
    assert.ok(err instanceof ctor, `${what}: a ${ctor.name}, got ${err.constructor.name}`);
    assert.equal(err.status, status, `${what}: HTTP status`);
    return err;
  }
  assert.fail(`${what}: the request succeeded`);
}

async function badRequest() {
  const err = await expectError(
      client.completions.create({ model: modelId, prompt: 'x = ', max_tokens: -1 }),
      OpenAI.BadRequestError, 400, 'max_tokens -1');
  assert.match(err.message, /max_tokens/, 'the message names the field');
  assert.equal(err.type, 'invalid_request_error');
}

async function wrongKey() {
  const bad = new OpenAI({ baseURL, apiKey: apiKey + '-wrong', maxRetries: 0 });
  await expectError(bad.completions.create({ model: modelId, prompt: 'x', max_tokens: 1 }),
                    OpenAI.AuthenticationError, 401, 'wrong API key');
  await expectError(bad.models.list(), OpenAI.AuthenticationError, 401, 'wrong key, models');
}

async function main() {
  const checks = [models, infillOnceAndStreamed, rawStreamEndsWithDone, plainCompletion,
                  badRequest, wrongKey];
  for (const check of checks) {
    const t0 = Date.now();
    await check();
    console.log(`ok ${check.name} (${Date.now() - t0} ms)`);
  }
  console.log(`openai client: ${checks.length} checks passed`);
}

main().catch((err) => {
  console.error('FAIL:', err);
  process.exit(1);
});
