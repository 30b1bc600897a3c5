// llama_ref subcommands: tokenize, detokenize, logits, greedy, info (bench: llama_ref_bench.cpp;
// quantize, quant-rows, dequant: llama_ref_quant.cpp).
// Output formats are documented in peers/llama_cpp/README.md.
#include "llama_ref_common.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

namespace llama_ref {
namespace {

const char * kUsage =
    "usage: llama_ref <command> ...\n"
    "  tokenize   MODEL.gguf FILE [--special] [--list]     token ids of FILE's text (one line);\n"
    "                                                       --list: FILE lists text files, one line each\n"
    "  detokenize MODEL.gguf --tokens \"1 2 3\" [--special]   text of the ids, raw bytes on stdout\n"
    "  logits     MODEL.gguf (--tokens \"1 2\" | --tokens-file F) --out FILE [--all] [--threads N]\n"
    "  greedy     MODEL.gguf (--tokens \"1 2\" | --tokens-file F) --n N [--stop-eos] [--threads N]\n"
    "  bench      MODEL.gguf [--prompt-len 256] [--gen 64] [--threads 2] [--reps 3] [--depth 0]\n"
    "             [--flash-attn auto|on|off] [--kv-type f16|f32] [--no-warmup] [--seed S]\n"
    "  info                                                 version, CPU backend variant (JSON)\n"
    "  quantize   IN.gguf OUT.gguf FTYPE [--threads N] [--pure] [--allow-requantize]\n"
    "             [--imatrix IMATRIX.gguf]\n"
    "                                                       llama_model_quantize (Q4_K_M, IQ4_XS, ...)\n"
    "  quant-rows TYPE IN.f32 OUT.bin --cols K              ggml_quantize_chunk of f32 rows (q4_K, iq4_nl, ...)\n"
    "  dequant    TYPE IN.bin OUT.f32                       the type's to_float\n"
    "common: --verbose (llama.cpp logs on stderr)\n";

std::vector<llama_token> tokenize_text(const llama_vocab * vocab, const std::string & text, bool special) {
    if (text.size() > static_cast<size_t>(INT32_MAX)) fail("text of ", text.size(), " bytes is too long");
    const int32_t len = static_cast<int32_t>(text.size());
    // First call sizes the result: it returns minus the number of tokens needed.
    int32_t n = llama_tokenize(vocab, text.data(), len, nullptr, 0, /*add_special=*/false, special);
    if (n == INT32_MIN) fail("tokenization of ", len, " bytes overflows int32");
    std::vector<llama_token> out(static_cast<size_t>(n < 0 ? -n : n));
    if (out.empty()) return out;
    n = llama_tokenize(vocab, text.data(), len, out.data(), static_cast<int32_t>(out.size()), false, special);
    if (n < 0 || static_cast<size_t>(n) != out.size()) fail("llama_tokenize returned ", n, ", expected ", out.size());
    return out;
}

int cmd_tokenize(int argc, char ** argv) {
    const Args a = Args::parse(argc, argv, 2, {}, {"--special", "--list", "--verbose"});
    install_log_filter(a.has("--verbose"));
    const std::string & model_path = a.pos(0, "MODEL.gguf");
    const std::string & file = a.pos(1, "FILE");
    std::vector<std::string> files;
    if (a.has("--list")) {
        std::ifstream list(file);
        if (!list) fail("cannot open list file '", file, "'");
        for (std::string line; std::getline(list, line);) {
            if (!line.empty()) files.push_back(line);
        }
    } else {
        files.push_back(file);
    }
    // Read every input before the (slower) vocab load so a bad path fails fast.
    std::vector<std::string> texts;
    for (const auto & f : files) texts.push_back(read_text_file(f));
    const ModelHandle m = load_model(model_path, /*vocab_only=*/true);
    const llama_vocab * vocab = llama_model_get_vocab(m.model);
    std::string out;
    for (const auto & t : texts) out += join_tokens(tokenize_text(vocab, t, a.has("--special"))) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

int cmd_detokenize(int argc, char ** argv) {
    const Args a = Args::parse(argc, argv, 2, {"--tokens"}, {"--special", "--verbose"});
    install_log_filter(a.has("--verbose"));
    const ModelHandle m = load_model(a.pos(0, "MODEL.gguf"), /*vocab_only=*/true);
    const std::vector<llama_token> tokens = parse_token_list(a.required("--tokens"), "--tokens");
    check_token_ids(m.model, tokens);
    const llama_vocab * vocab = llama_model_get_vocab(m.model);
    const int32_t n = static_cast<int32_t>(tokens.size());
    std::string text(16 + tokens.size() * 8, '\0');
    int32_t len = llama_detokenize(vocab, tokens.data(), n, text.data(), static_cast<int32_t>(text.size()),
                                   /*remove_special=*/false, /*unparse_special=*/a.has("--special"));
    if (len < 0) {
        text.resize(static_cast<size_t>(-len));
        len = llama_detokenize(vocab, tokens.data(), n, text.data(), -len, false, a.has("--special"));
    }
    if (len < 0) fail("llama_detokenize failed (", len, ")");
    std::fwrite(text.data(), 1, static_cast<size_t>(len), stdout);
    return 0;
}

// The prompt of logits/greedy: --tokens "1 2 3" or --tokens-file F.
std::vector<llama_token> prompt_tokens(const Args & a) {
    std::vector<llama_token> t;
    if (a.options.count("--tokens")) {
        t = parse_token_list(a.options.at("--tokens"), "--tokens");
    } else if (a.options.count("--tokens-file")) {
        t = parse_token_list(read_text_file(a.options.at("--tokens-file")), "--tokens-file");
    } else {
        fail("give the prompt with --tokens \"ids\" or --tokens-file FILE");
    }
    if (t.empty()) fail("the prompt has no tokens");
    return t;
}

// Model + reference context (flash attention off, F32 KV) sized for `n_ctx` tokens and a
// prompt of `n_prompt` tokens decoded as one batch.
struct RefSession {
    ModelHandle model;
    ContextHandle ctx;
    AttachedThreadpool pool;
    RefSession(const std::string & path, uint32_t n_ctx, uint32_t n_prompt, int n_threads)
        : model(load_model(path, false)),
          ctx(make_context(model.model, ContextOptions{n_ctx, n_prompt, n_threads,
                                                       LLAMA_FLASH_ATTN_TYPE_DISABLED, GGML_TYPE_F32})),
          pool(ctx.ctx, n_threads) {}
    int n_vocab() const { return llama_vocab_n_tokens(llama_model_get_vocab(model.model)); }
};

int cmd_logits(int argc, char ** argv) {
    const Args a = Args::parse(argc, argv, 2, {"--tokens", "--tokens-file", "--out", "--threads"},
                               {"--all", "--verbose"});
    init_compute_backends(a.has("--verbose"));
    const std::vector<llama_token> tokens = prompt_tokens(a);
    const std::string out_path = a.required("--out");
    const int n_threads = static_cast<int>(a.integer("--threads", 2, 1, 512));
    const uint32_t n = static_cast<uint32_t>(tokens.size());
    RefSession s(a.pos(0, "MODEL.gguf"), n, n, n_threads);
    check_token_ids(s.model.model, tokens);
    const bool all = a.has("--all");
    decode_tokens(s.ctx.ctx, tokens, 0, all);

    const int n_vocab = s.n_vocab();
    const int rows = all ? static_cast<int>(n) : 1;
    FILE * f = std::fopen(out_path.c_str(), "wb");
    if (!f) fail("cannot create '", out_path, "': ", std::strerror(errno));
    size_t nonfinite = 0;
    for (int r = 0; r < rows; ++r) {
        // logits: [rows, n_vocab] float32, row r = prompt position (all ? r : n - 1)
        const float * l = llama_get_logits_ith(s.ctx.ctx, all ? r : -1);
        if (!l) { std::fclose(f); fail("llama_get_logits_ith returned null for row ", r); }
        for (int v = 0; v < n_vocab; ++v) nonfinite += !std::isfinite(l[v]);
        if (std::fwrite(l, sizeof(float), static_cast<size_t>(n_vocab), f) != static_cast<size_t>(n_vocab)) {
            std::fclose(f);
            fail("short write to '", out_path, "'");
        }
    }
    if (std::fclose(f) != 0) fail("cannot close '", out_path, "': ", std::strerror(errno));
    std::printf("{\"n_tokens\":%u,\"rows\":%d,\"n_vocab\":%d,\"nonfinite\":%zu,\"out\":%s}\n", n, rows, n_vocab,
                nonfinite, json_str(out_path).c_str());
    return 0;
}

int cmd_greedy(int argc, char ** argv) {
    const Args a = Args::parse(argc, argv, 2, {"--tokens", "--tokens-file", "--n", "--threads"},
                               {"--stop-eos", "--verbose"});
    init_compute_backends(a.has("--verbose"));
    const std::vector<llama_token> prompt = prompt_tokens(a);
    const int n_gen = static_cast<int>(a.integer("--n", 64, 0, 1 << 20));
    const int n_threads = static_cast<int>(a.integer("--threads", 2, 1, 512));
    const uint32_t n_prompt = static_cast<uint32_t>(prompt.size());
    RefSession s(a.pos(0, "MODEL.gguf"), n_prompt + static_cast<uint32_t>(n_gen), n_prompt, n_threads);
    check_token_ids(s.model.model, prompt);
    const llama_vocab * vocab = llama_model_get_vocab(s.model.model);

    std::vector<llama_token> generated;
    if (n_gen > 0) decode_tokens(s.ctx.ctx, prompt, 0, false);
    for (int step = 0; step < n_gen; ++step) {
        const llama_token next = argmax(llama_get_logits_ith(s.ctx.ctx, -1), s.n_vocab());
        generated.push_back(next);
        if (a.has("--stop-eos") && llama_vocab_is_eog(vocab, next)) break;
        if (step + 1 == n_gen) break;  // the last token's logits are never needed
        decode_tokens(s.ctx.ctx, {next}, static_cast<int>(n_prompt) + step, false);
    }
    std::printf("%s\n", join_tokens(generated).c_str());
    return 0;
}

std::string cpu_features_json() {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    auto fn = reinterpret_cast<ggml_backend_get_features_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features"));
    std::string out = "{";
    for (const ggml_backend_feature * f = fn ? fn(reg) : nullptr; f && f->name; ++f) {
        if (out.size() > 1) out += ",";
        out += json_str(f->name) + ":" + json_str(f->value);
    }
    return out + "}";
}

int cmd_info(int argc, char ** argv) {
    const Args a = Args::parse(argc, argv, 2, {}, {"--verbose"});
    init_compute_backends(a.has("--verbose"));
    const std::string path = loaded_cpu_backend_path();
    const size_t base = path.rfind("/libggml-cpu-");
    const std::string variant = base == std::string::npos ? "" : path.substr(base + 13, path.size() - base - 16);
    std::printf("{\"llama_version\":%s,\"ggml_version\":%s,\"ggml_commit\":%s,\"bins_dir\":%s,\"cpu_backend\":%s,\"cpu_variant\":%s,"
                "\"cpu_features\":%s,\"system_info\":%s}\n",
                json_str(llama_version()).c_str(), json_str(ggml_version()).c_str(), json_str(ggml_commit()).c_str(),
                json_str(bins_dir()).c_str(), json_str(path).c_str(),
                json_str(variant).c_str(), cpu_features_json().c_str(), json_str(llama_print_system_info()).c_str());
    return 0;
}

int dispatch(int argc, char ** argv) {
    const std::string cmd = argc >= 2 ? argv[1] : "";
    if (cmd == "tokenize") return cmd_tokenize(argc, argv);
    if (cmd == "detokenize") return cmd_detokenize(argc, argv);
    if (cmd == "logits") return cmd_logits(argc, argv);
    if (cmd == "greedy") return cmd_greedy(argc, argv);
    if (cmd == "bench") return cmd_bench(argc, argv, 2);
    if (cmd == "info") return cmd_info(argc, argv);
    if (cmd == "quantize") return cmd_quantize(argc, argv, 2);
    if (cmd == "quant-rows") return cmd_quant_rows(argc, argv, 2);
    if (cmd == "dequant") return cmd_dequant(argc, argv, 2);
    std::fputs(kUsage, stderr);
    return 2;
}

}  // namespace
}  // namespace llama_ref

int main(int argc, char ** argv) {
    try {
        return llama_ref::dispatch(argc, argv);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "llama_ref: error: %s\n", e.what());
        return 1;
    }
}
