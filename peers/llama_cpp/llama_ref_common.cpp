#include "llama_ref_common.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#ifndef LLAMA_REF_BINS_DIR
#error "LLAMA_REF_BINS_DIR must name the folder holding the prebuilt libggml-cpu-*.so files"
#endif

namespace llama_ref {

Args Args::parse(int argc, char ** argv, int first, const std::set<std::string> & valued,
                 const std::set<std::string> & switches) {
    Args a;
    for (int i = first; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--", 0) != 0) {
            a.positional.push_back(arg);
        } else if (valued.count(arg)) {
            if (i + 1 >= argc) fail("option ", arg, " needs a value");
            a.options[arg] = argv[++i];
        } else if (switches.count(arg)) {
            a.flags.insert(arg);
        } else {
            fail("unknown option ", arg);
        }
    }
    return a;
}

std::string Args::str(const std::string & name, const std::string & fallback) const {
    auto it = options.find(name);
    return it == options.end() ? fallback : it->second;
}

std::string Args::required(const std::string & name) const {
    auto it = options.find(name);
    if (it == options.end()) fail("missing required option ", name);
    return it->second;
}

int64_t Args::integer(const std::string & name, int64_t fallback, int64_t lo, int64_t hi) const {
    auto it = options.find(name);
    if (it == options.end()) return fallback;
    const char * s = it->second.c_str();
    char * end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') fail("option ", name, ": '", it->second, "' is not an integer");
    if (v < lo || v > hi) fail("option ", name, " = ", v, " is outside [", lo, ", ", hi, "]");
    return v;
}

const std::string & Args::pos(size_t i, const char * what) const {
    if (i >= positional.size()) fail("missing argument ", i + 1, " (", what, ")");
    return positional[i];
}

std::vector<llama_token> parse_token_list(const std::string & text, const char * what) {
    std::vector<llama_token> out;
    size_t i = 0;
    while (i < text.size()) {
        const char c = text[i];
        if (c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '\r') { ++i; continue; }
        size_t j = i;
        while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
        if (j == i || j - i > 10) fail(what, ": bad token id near '", text.substr(i, 12), "'");
        const long long v = std::stoll(text.substr(i, j - i));
        if (v > INT32_MAX) fail(what, ": token id ", v, " does not fit int32");
        out.push_back(static_cast<llama_token>(v));
        i = j;
    }
    return out;
}

std::string join_tokens(const std::vector<llama_token> & tokens) {
    std::string s;
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(tokens[i]);
    }
    return s;
}

std::string read_text_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open '", path, "': ", std::strerror(errno));
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

namespace {

struct LogState {
    bool verbose = false;
    ggml_log_level last = GGML_LOG_LEVEL_NONE;  // CONT lines inherit the previous level
};
LogState g_log;

void log_filter(ggml_log_level level, const char * text, void * /*user*/) {
    if (level != GGML_LOG_LEVEL_CONT) g_log.last = level;
    if (g_log.verbose || g_log.last == GGML_LOG_LEVEL_WARN || g_log.last == GGML_LOG_LEVEL_ERROR) {
        std::fputs(text, stderr);
    }
}

}  // namespace

void install_log_filter(bool verbose) {
    g_log.verbose = verbose;
    llama_log_set(log_filter, nullptr);  // also sets ggml's logger
}

std::string bins_dir() {
    const char * env = std::getenv("LLAMA_REF_BINS_DIR");
    return env && *env ? std::string(env) : std::string(LLAMA_REF_BINS_DIR);
}

std::string loaded_cpu_backend_path() {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
        const size_t slash = line.find('/');
        if (slash == std::string::npos) continue;
        const std::string path = line.substr(slash);
        const size_t base = path.rfind('/');
        if (path.compare(base + 1, 12, "libggml-cpu-") == 0) return path;
    }
    return "";
}

void init_compute_backends(bool verbose) {
    install_log_filter(verbose);
    // The prebuilt ggml is built with GGML_BACKEND_DL: backends are separate .so files, and
    // ggml picks the CPU variant (haswell, zen4, ...) with the best score for this machine.
    // The default search path is the executable's folder, which is not the bins folder.
    // LLAMA_REF_CPU_VARIANT=haswell (alderlake, zen4, ...) loads that variant alone, e.g. to
    // compare with efim's AVX2 kernels (EFIM_KERNEL=avx2) on a machine that has AVX-512.
    const std::string dir = bins_dir();
    const char * variant = std::getenv("LLAMA_REF_CPU_VARIANT");
    if (variant && *variant) {
        const std::string so = dir + "/libggml-cpu-" + variant + ".so";
        if (!std::ifstream(so).good()) fail("LLAMA_REF_CPU_VARIANT=", variant, ": no file '", so, "'");
        if (ggml_backend_load(so.c_str()) == nullptr) {
            fail("LLAMA_REF_CPU_VARIANT=", variant, ": '", so,
                 "' did not load (does this CPU have the instructions it was built for?)");
        }
    } else {
        ggml_backend_load_all_from_path(dir.c_str());
    }
    if (ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU) == nullptr) {
        fail("no CPU backend could be loaded from '", dir, "' (expected libggml-cpu-*.so there)");
    }
    llama_backend_init();  // loads nothing more: backends are already registered
}

AttachedThreadpool::AttachedThreadpool(llama_context * ctx, int n_threads) : ctx_(ctx) {
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    using new_fn_t = ggml_threadpool * (*)(ggml_threadpool_params *);
    auto new_fn = reinterpret_cast<new_fn_t>(ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new"));
    free_fn_ = reinterpret_cast<void (*)(ggml_threadpool *)>(
        ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free"));
    if (!new_fn || !free_fn_) fail("CPU backend does not export ggml_threadpool_new/free");
    ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);
    pool_ = new_fn(&tpp);
    if (!pool_) fail("ggml_threadpool_new failed for n_threads = ", n_threads);
    llama_attach_threadpool(ctx_, pool_, nullptr);
}

AttachedThreadpool::~AttachedThreadpool() {
    llama_detach_threadpool(ctx_);
    free_fn_(pool_);
}

ModelHandle load_model(const std::string & path, bool vocab_only) {
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = vocab_only;
    mp.n_gpu_layers = 0;  // CPU peer: every layer on the CPU backend
    llama_model * m = llama_model_load_from_file(path.c_str(), mp);
    if (!m) fail("llama.cpp could not load model '", path, "' (run with --verbose for its log)");
    return ModelHandle(m);
}

ContextHandle make_context(llama_model * model, const ContextOptions & opt) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = opt.n_ctx;
    cp.n_batch = opt.n_batch;
    cp.n_ubatch = opt.n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = opt.n_threads;
    cp.n_threads_batch = opt.n_threads;
    cp.flash_attn_type = opt.flash_attn_type;
    cp.type_k = opt.kv_type;
    cp.type_v = opt.kv_type;
    cp.no_perf = true;
    llama_context * c = llama_init_from_model(model, cp);
    if (!c) fail("llama_init_from_model failed (n_ctx = ", opt.n_ctx, ", n_batch = ", opt.n_batch, ")");
    return ContextHandle(c);
}

void decode_tokens(llama_context * ctx, const std::vector<llama_token> & tokens, int pos0,
                   bool all_logits) {
    const int n = static_cast<int>(tokens.size());
    if (n == 0) fail("cannot decode an empty token list");
    llama_batch b = llama_batch_init(n, 0, 1);
    b.n_tokens = n;
    for (int i = 0; i < n; ++i) {
        b.token[i] = tokens[i];
        b.pos[i] = pos0 + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = all_logits || i == n - 1;
    }
    const int32_t rc = llama_decode(ctx, b);
    llama_batch_free(b);
    if (rc != 0) fail("llama_decode returned ", rc, " for ", n, " tokens at position ", pos0);
}

void check_token_ids(const llama_model * model, const std::vector<llama_token> & tokens) {
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            fail("token ", i, " = ", tokens[i], " is outside the vocabulary [0, ", n_vocab, ")");
        }
    }
}

llama_token argmax(const float * logits, int n_vocab) {
    int best = 0;
    for (int i = 1; i < n_vocab; ++i) {
        if (logits[i] > logits[best]) best = i;
    }
    return best;
}

}  // namespace llama_ref

namespace llama_ref {

std::string json_str(const std::string & s) {
    std::string out = "\"";
    for (const unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    return out + "\"";
}

}  // namespace llama_ref
