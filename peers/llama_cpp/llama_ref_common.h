// llama_ref: a thin harness around llama.cpp's PREBUILT shared library, used by efim as an
// independent reference (tokens, logits, greedy continuations) and as the performance peer.
// It is not part of the efim CMake build: scripts/build_llama_ref.sh compiles it with g++.
#pragma once

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "llama.h"

#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace llama_ref {

// Every failure is an exception carrying a message that names the offending value; main()
// prints it and exits non-zero.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

template <typename... Parts>
[[noreturn]] void fail(const Parts &... parts) {
    std::ostringstream os;
    (os << ... << parts);
    throw Error(os.str());
}

// argv after the subcommand: positionals plus "--name value" options and "--flag" switches.
struct Args {
    std::vector<std::string> positional;
    std::map<std::string, std::string> options;
    std::set<std::string> flags;

    // Parses argv[first..argc); `valued` lists the options that take a value, `switches` the
    // boolean ones. Anything else starting with "--" is an error.
    static Args parse(int argc, char ** argv, int first, const std::set<std::string> & valued,
                      const std::set<std::string> & switches);

    bool has(const std::string & name) const { return flags.count(name) > 0; }
    std::string str(const std::string & name, const std::string & fallback) const;
    std::string required(const std::string & name) const;
    int64_t integer(const std::string & name, int64_t fallback, int64_t lo, int64_t hi) const;
    const std::string & pos(size_t i, const char * what) const;
};

// Parses "1 2 3" (spaces, commas, tabs or newlines between ids).
std::vector<llama_token> parse_token_list(const std::string & text, const char * what);
std::string join_tokens(const std::vector<llama_token> & tokens);
std::string read_text_file(const std::string & path);

// Loads the ggml backends (the best CPU variant for this machine) from the prebuilt bins dir,
// then initialises llama. Fails when no CPU device is found.
void init_compute_backends(bool verbose);
// Routes llama/ggml logs to stderr: warnings and errors always, the rest with --verbose.
void install_log_filter(bool verbose);
// Path of the libggml-cpu-*.so that ggml picked, read from /proc/self/maps ("" if none).
std::string loaded_cpu_backend_path();
// The directory the backends are loaded from (compile-time default, env LLAMA_REF_BINS_DIR).
std::string bins_dir();

// Owning handles.
struct ModelHandle {
    llama_model * model = nullptr;
    explicit ModelHandle(llama_model * m) : model(m) {}
    ModelHandle(const ModelHandle &) = delete;
    ModelHandle & operator=(const ModelHandle &) = delete;
    ~ModelHandle() { if (model) llama_model_free(model); }
};

struct ContextHandle {
    llama_context * ctx = nullptr;
    explicit ContextHandle(llama_context * c) : ctx(c) {}
    ContextHandle(const ContextHandle &) = delete;
    ContextHandle & operator=(const ContextHandle &) = delete;
    ~ContextHandle() { if (ctx) llama_free(ctx); }
};

// A ggml CPU threadpool attached to a context (what llama-bench does); without one, ggml
// creates and destroys a pool on every graph compute, which would distort decode timings.
class AttachedThreadpool {
public:
    AttachedThreadpool(llama_context * ctx, int n_threads);
    AttachedThreadpool(const AttachedThreadpool &) = delete;
    AttachedThreadpool & operator=(const AttachedThreadpool &) = delete;
    ~AttachedThreadpool();

private:
    llama_context * ctx_;
    ggml_threadpool * pool_ = nullptr;
    void (*free_fn_)(ggml_threadpool *) = nullptr;
};

ModelHandle load_model(const std::string & path, bool vocab_only);

struct ContextOptions {
    uint32_t n_ctx = 0;      // context length in tokens (must cover prompt + generated)
    uint32_t n_batch = 0;    // logical = physical batch, so one prompt is one ubatch
    int n_threads = 2;
    llama_flash_attn_type flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;  // reference: off
    ggml_type kv_type = GGML_TYPE_F32;  // reference runs: exact F32 KV cache
};

ContextHandle make_context(llama_model * model, const ContextOptions & opt);

// Decodes `tokens` at positions [pos0, pos0 + n) of sequence 0 in one llama_decode call,
// requesting logits for every position (all_logits) or only the last one.
void decode_tokens(llama_context * ctx, const std::vector<llama_token> & tokens, int pos0,
                   bool all_logits);

// Checks every id is in [0, n_vocab).
void check_token_ids(const llama_model * model, const std::vector<llama_token> & tokens);

// Index of the largest logit (lowest index wins ties).
llama_token argmax(const float * logits, int n_vocab);

}  // namespace llama_ref

namespace llama_ref {

// Minimal JSON string escaping for the one-line JSON outputs.
std::string json_str(const std::string & s);

// `llama_ref bench ...` (llama_ref_bench.cpp); argv[first] is the model path.
int cmd_bench(int argc, char ** argv, int first);
// `llama_ref quantize | quant-rows | dequant ...` (llama_ref_quant.cpp); argv[first] is the
// first positional argument.
int cmd_quantize(int argc, char ** argv, int first);
int cmd_quant_rows(int argc, char ** argv, int first);
int cmd_dequant(int argc, char ** argv, int first);

}  // namespace llama_ref
