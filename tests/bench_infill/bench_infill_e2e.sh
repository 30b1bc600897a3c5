#!/bin/bash
# `efim bench infill` end to end on the bundled model: 2 users x 2 rounds x 4 output tokens of
# short stdlib files, all five schemes, each against its own `efim serve` child. Checks the
# JSON (every scheme, positive timings and counts), the Markdown and SVG files, and that the
# EFIM schemes reuse more of the prefix cache than PSM does (the experiment's point).
set -euo pipefail
EFIM="$1"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
MODEL="$SRC/models/efim-tiny-q8_0.gguf"
[ -f "$MODEL" ] || { echo "bundled model $MODEL missing"; exit 1; }
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
"$EFIM" bench infill "$MODEL" --users 2 --rounds 2 --output-tokens 4 \
  --min-doc-tokens 300 --max-doc-tokens 600 -t 2 --kv-cache-mb 64 --no-progress \
  --out "$DIR/out" >"$DIR/stdout" 2>"$DIR/stderr" || {
  echo "efim bench infill failed:"; cat "$DIR/stderr"; tail -n 30 "$DIR"/out/serve-*.log; exit 1; }
cat "$DIR/stdout"
/usr/bin/python3 - "$DIR/out" "$DIR/stdout" <<'PY'
import json, sys, xml.etree.ElementTree as ET
out, stdout = sys.argv[1], open(sys.argv[2]).read()
names = ["nocache-psm", "cache-psm", "cache-spm", "cache-efim", "cache-auto"]
j = json.load(open(out + "/bench_infill.json"))
assert [s["scheme"] for s in j["schemes"]] == names, [s["scheme"] for s in j["schemes"]]
assert j["config"]["users"] == 2 and j["config"]["rounds"] == 2, j["config"]
assert len(j["config"]["user_files"]) == 2
by = {s["scheme"]: s for s in j["schemes"]}
for name, s in by.items():
    assert s["requests"] == 4, (name, s["requests"])
    for key in ("wall_s", "request_throughput", "output_token_throughput", "prompt_tokens",
                "output_tokens"):
        assert s[key] > 0, (name, key, s[key])
    for group, keys in (("ttft_ms", ("mean", "median", "p90")), ("tpot_ms", ("mean", "median")),
                        ("latency_s", ("mean", "median"))):
        for k in keys:
            assert s[group][k] > 0, (name, group, k, s[group][k])
    assert s["latency_s"]["mean"] * 1000 > s["ttft_ms"]["mean"], name
    assert len(s["per_request"]) == 4
    for r in s["per_request"]:
        assert r["prompt_tokens"] > 0 and r["latency_s"] >= r["ttft_s"] > 0, (name, r)
    # ignore_eos: every request gets its 4 tokens, or latencies are not comparable.
    assert s["output_tokens"] == 16 and s["short_requests"] == 0, \
        (name, "completion tokens per request:", [r["completion_tokens"] for r in s["per_request"]])
    assert s["reuse_rate"] is not None, (name, "no /metrics prefix-cache counters")
    assert s["latency_ratio_vs_cache_psm"] > 0 and s["throughput_ratio_vs_cache_psm"] > 0
assert by["nocache-psm"]["reuse_rate"] == 0, by["nocache-psm"]["reuse_rate"]
assert by["nocache-psm"]["cached_tokens"] == 0
assert abs(by["cache-psm"]["latency_ratio_vs_cache_psm"] - 1) < 1e-9
psm = by["cache-psm"]["reuse_rate"]
for name in ("cache-efim", "cache-auto"):
    assert by[name]["reuse_rate"] > psm, (name, by[name]["reuse_rate"], "vs cache-psm", psm)
# Client-built prompts are the same token counts in both PSM schemes.
assert by["nocache-psm"]["prompt_tokens"] == by["cache-psm"]["prompt_tokens"]
md = open(out + "/bench_infill.md").read()
assert md == stdout, "stdout is the Markdown table"
for name in names:
    assert "| %s |" % name in md, name
root = ET.parse(out + "/bench_infill.svg").getroot()
texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
for name in names:
    assert texts.count(name) == 2, (name, texts)  # one label per panel
print("bench infill e2e: reuse", {n: round(by[n]["reuse_rate"], 3) for n in names})
PY
# A second run into the same --out: the old server logs (with old ports) must not be read.
"$EFIM" bench infill "$MODEL" --schemes cache-psm --users 1 --rounds 1 --output-tokens 2 \
  --min-doc-tokens 300 --max-doc-tokens 600 -t 2 --kv-cache-mb 64 --no-progress \
  --out "$DIR/out" >"$DIR/stdout2" 2>"$DIR/stderr2" || {
  echo "second efim bench infill into the same --out failed:"; cat "$DIR/stderr2"; exit 1; }
grep -q "| cache-psm |" "$DIR/stdout2"
