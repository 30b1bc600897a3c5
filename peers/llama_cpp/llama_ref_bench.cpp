// `llama_ref bench`: prefill and single-sequence decode throughput of llama.cpp, measured the way
// tools/llama-bench does it: random token ids (BOS first when the model adds one), an attached
// CPU threadpool, one warm-up run, the KV cache cleared before every repetition, and
// llama_synchronize after every decode step. Differences: one context serves both tests and
// the summary is the median over repetitions (llama-bench prints mean and stddev).
#include "llama_ref_common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

namespace llama_ref {
namespace {

struct BenchOptions {
    int prompt_len = 256;  // tokens in the prefill test (0: skip it)
    int gen = 64;          // tokens in the decode test (0: skip it)
    int depth = 0;         // tokens already in the KV cache before each timed run
    int threads = 2;
    int reps = 3;
    bool warmup = true;
    llama_flash_attn_type flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;  // llama-bench default
    ggml_type kv_type = GGML_TYPE_F16;                              // llama-bench default
    unsigned seed = 1234;
};

// Random token ids as llama-bench draws them, from a seeded generator so runs repeat.
class TokenSource {
public:
    TokenSource(const llama_vocab * vocab, unsigned seed)
        : vocab_(vocab), n_vocab_(llama_vocab_n_tokens(vocab)), rng_(seed) {}
    llama_token random() { return static_cast<llama_token>(rng_() % static_cast<unsigned>(n_vocab_)); }
    llama_token first() { return llama_vocab_get_add_bos(vocab_) ? llama_vocab_bos(vocab_) : random(); }

private:
    const llama_vocab * vocab_;
    int n_vocab_;
    std::mt19937 rng_;
};

struct Bench {
    llama_context * ctx;
    TokenSource tokens;

    // One batch of n tokens at positions [pos0, pos0 + n).
    void prompt(int n, int pos0) {
        std::vector<llama_token> t(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) t[i] = (i == 0 && pos0 == 0) ? tokens.first() : tokens.random();
        decode_tokens(ctx, t, pos0, false);
        llama_synchronize(ctx);
    }
    // n single-token decode steps starting at pos0.
    void gen(int n, int pos0) {
        llama_token t = pos0 == 0 ? tokens.first() : tokens.random();
        for (int i = 0; i < n; ++i) {
            decode_tokens(ctx, {t}, pos0 + i, false);
            llama_synchronize(ctx);
            t = tokens.random();
        }
    }
    void clear() { llama_memory_clear(llama_get_memory(ctx), false); }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Tokens per second of each repetition; `run(pos0)` processes `n` tokens after a cache of
// `depth` tokens, `warm()` is the untimed warm-up.
template <typename Run, typename Warm>
std::vector<double> measure(Bench & b, const BenchOptions & o, int n, Run run, Warm warm) {
    std::vector<double> tps;
    b.clear();
    if (o.warmup) warm();
    for (int r = 0; r < o.reps; ++r) {
        b.clear();
        if (o.depth > 0) b.prompt(o.depth, 0);
        const auto t0 = std::chrono::steady_clock::now();
        run(o.depth);
        tps.push_back(n / seconds_since(t0));
    }
    return tps;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string json_series(const std::vector<double> & v) {
    if (v.empty()) return "null";
    std::string s = "[";
    char buf[32];
    for (size_t i = 0; i < v.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s%.3f", i ? "," : "", v[i]);
        s += buf;
    }
    return s + "]";
}

std::string json_median(const std::vector<double> & v) {
    if (v.empty()) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", median(v));
    return buf;
}

BenchOptions parse_bench_options(const Args & a) {
    BenchOptions o;
    o.prompt_len = static_cast<int>(a.integer("--prompt-len", o.prompt_len, 0, 1 << 20));
    o.gen = static_cast<int>(a.integer("--gen", o.gen, 0, 1 << 20));
    o.depth = static_cast<int>(a.integer("--depth", o.depth, 0, 1 << 20));
    o.threads = static_cast<int>(a.integer("--threads", o.threads, 1, 512));
    o.reps = static_cast<int>(a.integer("--reps", o.reps, 1, 1000));
    o.seed = static_cast<unsigned>(a.integer("--seed", o.seed, 0, UINT32_MAX));
    o.warmup = !a.has("--no-warmup");
    const std::string fa = a.str("--flash-attn", "auto");
    if (fa == "auto") o.flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
    else if (fa == "on") o.flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    else if (fa == "off") o.flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    else fail("--flash-attn must be auto, on or off, not '", fa, "'");
    const std::string kv = a.str("--kv-type", "f16");
    if (kv == "f16") o.kv_type = GGML_TYPE_F16;
    else if (kv == "f32") o.kv_type = GGML_TYPE_F32;
    else if (kv == "q8_0") o.kv_type = GGML_TYPE_Q8_0;
    else fail("--kv-type must be f16, q8_0 or f32, not '", kv, "'");
    if (o.prompt_len == 0 && o.gen == 0) fail("nothing to measure: --prompt-len and --gen are both 0");
    return o;
}

}  // namespace

int cmd_bench(int argc, char ** argv, int first) {
    const Args a = Args::parse(argc, argv, first,
                               {"--prompt-len", "--gen", "--depth", "--threads", "--reps", "--seed",
                                "--flash-attn", "--kv-type"},
                               {"--no-warmup", "--verbose"});
    const BenchOptions o = parse_bench_options(a);
    init_compute_backends(a.has("--verbose"));
    const std::string & path = a.pos(0, "MODEL.gguf");
    const ModelHandle m = load_model(path, false);
    ContextOptions co;
    co.n_ctx = static_cast<uint32_t>(std::max(o.prompt_len, o.gen) + o.depth);
    co.n_batch = static_cast<uint32_t>(std::max({o.prompt_len, o.depth, 1}));
    co.n_threads = o.threads;
    co.flash_attn_type = o.flash_attn;
    co.kv_type = o.kv_type;
    const ContextHandle c = make_context(m.model, co);
    const AttachedThreadpool pool(c.ctx, o.threads);
    Bench b{c.ctx, TokenSource(llama_model_get_vocab(m.model), o.seed)};

    std::vector<double> pp, tg;
    if (o.prompt_len > 0) {
        pp = measure(b, o, o.prompt_len, [&](int pos0) { b.prompt(o.prompt_len, pos0); },
                     [&] { b.prompt(o.prompt_len, 0); });
    }
    if (o.gen > 0) {
        tg = measure(b, o, o.gen, [&](int pos0) { b.gen(o.gen, pos0); }, [&] { b.gen(1, 0); });
    }
    const std::string cpu = loaded_cpu_backend_path();
    std::printf("{\"prefill_tps\":%s,\"decode_tps\":%s,\"prefill_tps_samples\":%s,\"decode_tps_samples\":%s,"
                "\"prompt_len\":%d,\"gen\":%d,\"depth\":%d,\"threads\":%d,\"reps\":%d,\"flash_attn\":%s,"
                "\"kv_type\":%s,\"cpu_backend\":%s,\"model\":%s}\n",
                json_median(pp).c_str(), json_median(tg).c_str(), json_series(pp).c_str(),
                json_series(tg).c_str(), o.prompt_len, o.gen, o.depth, o.threads, o.reps,
                json_str(a.str("--flash-attn", "auto")).c_str(), json_str(a.str("--kv-type", "f16")).c_str(),
                json_str(cpu).c_str(), json_str(path).c_str());
    return 0;
}

}  // namespace llama_ref
