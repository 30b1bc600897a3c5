"""llama.vim's /infill traffic against one `efim serve`, checked for prefix-cache reuse.

Usage: llama_vim_client.py PORT MODE EFIM_BINARY MODEL HEAL
  (MODE: auto, efim or psm; HEAL: heal = the server token-heals the text after the middle
   sentinel, noheal = it does not)

The request bodies have the shape ggml-org/llama.vim (autoload/llama.vim) sends with curl:
  * the ring-buffer warm-up: empty prefix/suffix/prompt, input_extra = the chunks,
    n_predict 0, samplers [], t_max_prompt_ms/t_max_predict_ms 1, response_fields [""]
    (llama.cpp then answers {}: efim must too);
  * the FIM request: input_prefix = the lines above the cursor (each ending in "\\n"),
    prompt = the current line up to the cursor, input_suffix = the rest of the line + "\\n" +
    the lines below + "\\n", input_extra = [{text, time, filename}], n_predict, n_indent,
    top_k 40, top_p 0.99, samplers ["top_k", "top_p", "infill"], cache_prompt true,
    t_max_prompt_ms, t_max_predict_ms and response_fields.
A typing sequence of 3 FIM requests: the user finishes the current line and starts the next,
so input_prefix grows by a line each round while the suffix stays.

Prompt layouts (src/infill/layout.h; [B] bos, X extra, P/S/M sentinels, q = `prompt`):
  PSM  [B] X P p S s M q          EFIM  [B] X P p0 S s M inc q   (p0 = the anchor's prefix)
Expected reuse of round k+1 (timings/cache_n), with N_k = round k's prompt length:
  efim/auto: >= N_k - n(q_k): round k's whole prompt but its `prompt` tail, suffix included;
             and N_{k+1} = N_k - n(q_k) + n(inc) + n(q_{k+1}) exactly (the anchor is extended);
  psm:       <= N_k - n(q_k) - n(s) - 2: the match ends inside [B] X P p, before the suffix.
Token counts n(.) come from `efim tokenize` (each piece of user text is tokenized on its own).
Token healing (src/infill/healing.h) removes h_k <= 4 tokens from the end of round k's prompt
(after M; efim's answer says how many in token_healing/tokens_removed, which the test adds to
llama.vim's response_fields), so tokens_evaluated = N_k - h_k, and round k+1 may miss at most
those h_k tokens of round k's prompt: cache_n >= N_k - h_k - n(q_k). With HEAL=heal every round is healed
(efim_token_healing_total counts 3 requests) and a plain completion ending inside a word answers
from the cursor on; with noheal h_k = 0 and the counter stays 0.
"""
import json
import os
import subprocess
import sys
import tempfile

import re

PORT, MODE, EFIM, MODEL, HEAL = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
assert MODE in ("auto", "efim", "psm"), MODE
assert HEAL in ("heal", "noheal"), HEAL
URL = f"http://127.0.0.1:{PORT}/infill"
N_PREDICT = 16
failures = []


def check(cond, message, quiet=False):
    """Records a failed check; prints failures always and passes unless quiet."""
    if cond and not quiet:
        print("ok   " + message)
    if not cond:
        print("FAIL " + message)
        failures.append(message)


def post(body, url=URL):
    """POSTs like llama.vim: curl --data @- ; returns (status, parsed JSON)."""
    r = subprocess.run(
        ["curl", "--silent", "--show-error", "--no-buffer", "--request", "POST", "--url", url,
         "--header", "Content-Type: application/json", "--data", "@-",
         "--write-out", "\n%{http_code}", "--max-time", "120"],
        input=json.dumps(body).encode(), capture_output=True, check=True)
    text, _, status = r.stdout.decode().rpartition("\n")
    return int(status), json.loads(text)


def healing_total():
    """efim_token_healing_total from /metrics."""
    r = subprocess.run(["curl", "--silent", "--show-error", f"http://127.0.0.1:{PORT}/metrics"],
                       capture_output=True, check=True, text=True)
    m = re.search(r"^efim_token_healing_total\{[^}]*\} (\d+)$", r.stdout, re.M)
    check(m is not None, "/metrics has efim_token_healing_total", quiet=True)
    return int(m.group(1)) if m else -1


_counts = {}


def n_tokens(text):
    """Tokens of a piece of user text (no bos, specials not parsed), as the layout encodes it."""
    if text == "":
        return 0
    if text not in _counts:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        try:
            r = subprocess.run([EFIM, "tokenize", MODEL, "--text-file", f.name],
                               capture_output=True, check=True, text=True)
        finally:
            os.unlink(f.name)
        _counts[text] = len(r.stdout.split())
    return _counts[text]


RESPONSE_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms",
                   "timings/prompt_per_token_ms", "timings/prompt_per_second",
                   "timings/predicted_n", "timings/predicted_ms",
                   "timings/predicted_per_token_ms", "timings/predicted_per_second",
                   "truncated", "tokens_cached", "timings/cache_n",
                   "token_healing/tokens_removed"]

EXTRA = [
    {"text": "def square(x):\n    return x * x\n\n\ndef cube(x):\n    return x * x * x\n",
     "time": [1764460800, 125000], "filename": "geometry/powers.py"},
    {"text": "TAU = 6.283185307179586\nUNIT = 'cm'\n",
     "time": [1764460801, 5000], "filename": "geometry/constants.py"},
]


def warmup_body():
    return {"input_prefix": "", "input_suffix": "", "input_extra": EXTRA, "prompt": "",
            "n_predict": 0, "temperature": 0.0, "stream": False, "samplers": [],
            "cache_prompt": True, "t_max_prompt_ms": 1, "t_max_predict_ms": 1,
            "response_fields": [""]}


def fim_body(prefix, middle, suffix):
    indent = len(middle) - len(middle.lstrip(" \t"))
    return {"input_prefix": prefix, "input_suffix": suffix, "input_extra": EXTRA,
            "prompt": middle, "n_predict": N_PREDICT, "n_indent": indent, "top_k": 40,
            "top_p": 0.99, "stream": False, "samplers": ["top_k", "top_p", "infill"],
            "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 5000,
            "response_fields": RESPONSE_FIELDS}


def unflatten(r):
    """llama.cpp's response_fields answer: flat "timings/prompt_n" keys -> nested dicts."""
    out = {}
    for key, value in r.items():
        *parents, leaf = key.split("/")
        d = out
        for p in parents:
            d = d.setdefault(p, {})
        d[leaf] = value
    return out


def check_response(status, flat, what):
    """Exactly the response_fields llama.vim asked for (flat keys, as llama.cpp answers), present
    and consistent; returns them nested, with tokens_evaluated = prompt_n + cache_n (cache_n: the
    prompt tokens reused from the cache; tokens_cached is llama.cpp's n_past, the prompt and the
    generated tokens fed back). A bad response ends the test."""
    check(status == 200, f"{what}: HTTP 200 (got {status}: {flat})", quiet=True)
    check(sorted(flat) == sorted(RESPONSE_FIELDS),
          f"{what}: answers exactly the response_fields (got {sorted(flat)})", quiet=True)
    r = unflatten(flat)
    check(isinstance(r.get("content"), str), f"{what}: content is a string", quiet=True)
    for k in ("tokens_cached",):
        check(isinstance(r.get(k), int) and r[k] >= 0, f"{what}: {k} is a count", quiet=True)
    prompt_n = r.get("timings", {}).get("prompt_n")
    check(isinstance(prompt_n, int) and prompt_n >= 0, f"{what}: timings/prompt_n is a count",
          quiet=True)
    check(r.get("truncated") is False, f"{what}: not truncated", quiet=True)
    if failures:
        sys.exit(f"{what}: malformed response {flat}")
    r["tokens_evaluated"] = prompt_n + r["timings"]["cache_n"]
    n_gen = r["timings"]["predicted_n"]
    check(r["tokens_evaluated"] + n_gen - 1 <= r["tokens_cached"] <= r["tokens_evaluated"] + n_gen,
          f"{what}: tokens_cached {r['tokens_cached']} is llama.cpp's n_past (prompt "
          f"{r['tokens_evaluated']} + {n_gen} generated, the last perhaps not fed)", quiet=True)
    r["reused"] = r["timings"]["cache_n"]
    return r


# The file being edited; the cursor moves down one line per round.
ABOVE = "import math\n\n\ndef area(r):\n    return math.pi * r * r\n\n\ndef circumference(r):\n"
SUFFIX = "\n\nprint(area(2.0), circumference(2.0))\n"  # "" after the cursor + "\n" + lines + "\n"
ROUNDS = [  # (lines above the cursor, current line up to the cursor)
    (ABOVE, "    c = 2 * ma"),
    (ABOVE + "    c = 2 * math.pi * r\n", "    ret"),
    (ABOVE + "    c = 2 * math.pi * r\n    result = c\n", "    return res"),
]


def main():
    # 1. Warm-up: fills the cache with the extra context and answers no text. llama.vim asks
    # for response_fields [""]: a path that names nothing, so llama.cpp answers {}.
    status, w = post(warmup_body())
    check(status == 200 and w == {}, f"warm-up: HTTP 200 with {{}} (got {status}: {w})")
    # The same body without response_fields shows the whole answer (and hits the cache).
    body = warmup_body()
    del body["response_fields"]
    status, w = post(body)
    check(status == 200 and w.get("content") == "",
          f"warm-up (n_predict 0): empty content, got {status}: {w}")
    if failures:
        sys.exit(f"warm-up failed: {w}")
    n_warm = w["tokens_evaluated"]  # [B] X P S M with empty p, s, q

    results = []
    for k, (prefix, middle) in enumerate(ROUNDS):
        status, flat = post(fim_body(prefix, middle, SUFFIX))
        r = check_response(status, flat, f"round {k + 1}")
        check(0 <= r["timings"]["predicted_n"] <= N_PREDICT,
              f"round {k + 1}: predicted_n {r['timings']['predicted_n']} <= n_predict", quiet=True)
        print(f"     round {k + 1}: tokens_evaluated {r['tokens_evaluated']} cache_n "
              f"{r['reused']} tokens_cached {r['tokens_cached']} content {r['content']!r}")
        results.append(r)

    # 2. The first FIM request reuses the warm-up's [B] X P.
    check(results[0]["reused"] >= n_warm - 2,
          f"round 1 hits the warm-up cache: cache_n {results[0]['reused']} >= "
          f"{n_warm - 2} (warm-up prompt {n_warm} minus its S, M sentinels)")

    # 3. Rounds 2 and 3 against the round before. full_k = N_k: round k's prompt before
    # healing removed h_k tokens from its end.
    n_s = n_tokens(SUFFIX)
    h = [r["token_healing"]["tokens_removed"] for r in results]
    full = [r["tokens_evaluated"] + hk for r, hk in zip(results, h)]
    for k, hk in enumerate(h):
        check(1 <= hk <= 4 if HEAL == "heal" else hk == 0,
              f"round {k + 1}: {hk} tokens healed ({HEAL})")
    for k in (1, 2):
        prev, cur = results[k - 1], results[k]
        (p_prev, q_prev), (p_cur, q_cur) = ROUNDS[k - 1], ROUNDS[k]
        kept = full[k - 1] - n_tokens(q_prev)  # round k's prompt without q
        cached = cur["reused"]
        if MODE in ("auto", "efim"):
            check(cached >= kept - h[k - 1],
                  f"{MODE} round {k + 1}: cache_n {cached} >= {kept - h[k - 1]} (round {k}'s "
                  f"prompt {full[k - 1]} minus its prompt tail {n_tokens(q_prev)} and its "
                  f"{h[k - 1]} healed tokens; the suffix of {n_s} tokens stays cached)")
            expect = kept + n_tokens(p_cur[len(p_prev):]) + n_tokens(q_cur)
            check(full[k] == expect,
                  f"{MODE} round {k + 1}: EFIM prompt of {full[k]} tokens == {expect} (round {k} "
                  f"without its tail + typed lines + prompt), {h[k]} of them healed")
        else:
            limit = kept - n_s - 2
            check(0 < cached <= limit,
                  f"psm round {k + 1}: 0 < cache_n {cached} <= {limit}: the match stops "
                  f"in the prefix, the {n_s}-token suffix after it is recomputed")
            expect = kept - n_tokens(p_prev) + n_tokens(p_cur) + n_tokens(q_cur)
            check(full[k] == expect,
                  f"psm round {k + 1}: PSM prompt of {full[k]} tokens == {expect}")

    # 4. Token healing: counted per request; a plain completion that ends inside a word is
    # answered from the cursor on (the regenerated "ret" is not sent back).
    total = healing_total()
    check(total == (3 if HEAL == "heal" else 0),
          f"efim_token_healing_total {total} == {3 if HEAL == 'heal' else 0} ({HEAL})")
    status, c = post({"prompt": "def add(a, b):\n    ret", "max_tokens": 6, "temperature": 0},
                     url=f"http://127.0.0.1:{PORT}/v1/completions")
    text = c["choices"][0]["text"] if status == 200 else ""
    healing = c.get("token_healing")
    if HEAL == "heal":
        check(isinstance(healing, dict) and healing.get("bytes_removed", 0) >= 3
              and text.startswith("urn"),
              f"plain completion of '    ret' healed ({healing}) and answered from the cursor: "
              f"{text!r} starts with 'urn'")
    else:
        check(healing is None and status == 200,
              f"plain completion not healed for a fragment-trained model: {text!r}")

    if failures:
        print(f"{len(failures)} check(s) failed in mode {MODE}")
        sys.exit(1)
    print(f"llama.vim /infill, mode {MODE}: all checks passed")


main()
