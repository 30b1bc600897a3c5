// llama_ref quantization commands: llama.cpp's own quantizer as the source of test files, and
// ggml's row quantizers / dequantizers as the oracle for efim's block layouts.
//   quantize   IN.gguf OUT.gguf FTYPE [--threads N] [--pure] [--allow-requantize]
//              [--imatrix IMATRIX.gguf]                         llama_model_quantize
//   quant-rows TYPE IN.f32 OUT.bin --cols K                     ggml_quantize_chunk (no imatrix)
//   dequant    TYPE IN.bin OUT.f32                              the type's to_float
#include "llama_ref_common.h"

#include "gguf.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

namespace llama_ref {
namespace {

// The llama.cpp file types a model hub publishes, by the names llama-quantize takes.
const std::pair<const char *, llama_ftype> kFtypes[] = {
    {"F16", LLAMA_FTYPE_MOSTLY_F16},       {"BF16", LLAMA_FTYPE_MOSTLY_BF16},
    {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},     {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},
    {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},     {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},
    {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},     {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},
    {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S}, {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
    {"Q3_K_L", LLAMA_FTYPE_MOSTLY_Q3_K_L}, {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},
    {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S},
    {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M}, {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
    {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL}, {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
};

llama_ftype ftype_from_name(const std::string & name) {
    std::string known;
    for (const auto & [n, t] : kFtypes) {
        if (name == n) return t;
        known += known.empty() ? n : std::string(", ") + n;
    }
    fail("unknown file type '", name, "' (known: ", known, ")");
}

ggml_type type_from_name(const std::string & name) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * n = ggml_type_name(static_cast<ggml_type>(t));
        if (n && ggml_type_size(static_cast<ggml_type>(t)) > 0 && name == n) return static_cast<ggml_type>(t);
    }
    fail("unknown ggml type '", name, "' (names as ggml_type_name prints them: q4_K, iq4_xs, ...)");
}

std::string read_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open '", path, "': ", std::strerror(errno));
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_file(const std::string & path, const void * data, size_t n) {
    FILE * f = std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot create '", path, "': ", std::strerror(errno));
    const bool ok = n == 0 || std::fwrite(data, 1, n, f) == n;
    if (std::fclose(f) != 0 || !ok) fail("cannot write '", path, "'");
}

// An importance matrix in llama-imatrix's GGUF format, as llama-quantize reads it: per matrix
// NAME, NAME.in_sum2 / NAME.counts per expert (1 where a count is 0).
struct Imatrix {
    std::vector<std::string> names;
    std::vector<std::vector<float>> values;
    std::vector<llama_model_imatrix_data> entries;  // ends with a null name
};

void load_imatrix(const std::string & path, Imatrix & im) {
    ggml_context * data = nullptr;
    gguf_init_params gp = {/*no_alloc=*/false, /*ctx=*/&data};
    gguf_context * g = gguf_init_from_file(path.c_str(), gp);
    if (!g || !data) fail("cannot read the importance matrix '", path, "'");
    const std::string sums = ".in_sum2";
    for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
        const std::string n = gguf_get_tensor_name(g, i);
        if (n.size() <= sums.size() || n.compare(n.size() - sums.size(), sums.size(), sums) != 0) continue;
        const std::string base = n.substr(0, n.size() - sums.size());
        const ggml_tensor * s = ggml_get_tensor(data, n.c_str());
        const ggml_tensor * c = ggml_get_tensor(data, (base + ".counts").c_str());
        if (!s || !c || s->type != GGML_TYPE_F32 || c->type != GGML_TYPE_F32)
            fail(path, ": ", base, " lacks f32 in_sum2 / counts");
        const int64_t n_mat = ggml_nelements(c), cols = ggml_nelements(s) / n_mat;
        std::vector<float> v(static_cast<size_t>(n_mat * cols));
        for (int64_t k = 0; k < n_mat; ++k) {
            const float count = static_cast<const float *>(c->data)[k];
            for (int64_t j = 0; j < cols; ++j)
                v[k * cols + j] = count > 0 ? static_cast<const float *>(s->data)[k * cols + j] / count : 1.0f;
        }
        im.names.push_back(base);
        im.values.push_back(std::move(v));
    }
    gguf_free(g);
    ggml_free(data);
    for (size_t i = 0; i < im.names.size(); ++i)
        im.entries.push_back({im.names[i].c_str(), im.values[i].data(), im.values[i].size()});
    im.entries.push_back({nullptr, nullptr, 0});
}

}  // namespace

int cmd_quantize(int argc, char ** argv, int first) {
    const Args a = Args::parse(argc, argv, first, {"--threads", "--imatrix"},
                               {"--pure", "--allow-requantize", "--verbose"});
    install_log_filter(a.has("--verbose"));
    llama_backend_init();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.nthread = static_cast<int32_t>(a.integer("--threads", 2, 1, 512));
    p.ftype = ftype_from_name(a.pos(2, "FTYPE"));
    p.pure = a.has("--pure");
    p.allow_requantize = a.has("--allow-requantize");  // e.g. from a Q8_0 file
    const std::string in = a.pos(0, "IN.gguf"), out = a.pos(1, "OUT.gguf");
    Imatrix im;
    if (const std::string path = a.str("--imatrix", ""); !path.empty()) {
        load_imatrix(path, im);
        p.imatrix = im.entries.data();
    }
    if (llama_model_quantize(in.c_str(), out.c_str(), &p) != 0)
        fail("llama_model_quantize failed for '", in, "' -> ", a.pos(2, "FTYPE"));
    std::printf("{\"in\":%s,\"out\":%s,\"ftype\":%s}\n", json_str(in).c_str(), json_str(out).c_str(),
                json_str(a.pos(2, "FTYPE")).c_str());
    return 0;
}

int cmd_quant_rows(int argc, char ** argv, int first) {
    const Args a = Args::parse(argc, argv, first, {"--cols"}, {});
    const ggml_type t = type_from_name(a.pos(0, "TYPE"));
    const std::string x = read_file(a.pos(1, "IN.f32"));
    const int64_t cols = a.integer("--cols", 0, 1, int64_t{1} << 40);
    const int64_t n = static_cast<int64_t>(x.size() / sizeof(float));
    if (x.size() % sizeof(float) != 0 || n % cols != 0)
        fail(a.pos(1, "IN.f32"), " holds ", x.size(), " bytes: not whole rows of ", cols, " floats");
    if (cols % ggml_blck_size(t) != 0) fail("--cols ", cols, " is not a multiple of ", ggml_type_name(t), "'s block ", ggml_blck_size(t));
    if (ggml_quantize_requires_imatrix(t)) fail(ggml_type_name(t), " needs an importance matrix");
    std::string out(ggml_row_size(t, cols) * static_cast<size_t>(n / cols), '\0');
    ggml_quantize_init(t);
    const size_t written = ggml_quantize_chunk(t, reinterpret_cast<const float *>(x.data()), out.data(), 0, n / cols,
                                               cols, nullptr);
    if (written != out.size()) fail("ggml_quantize_chunk wrote ", written, " bytes, expected ", out.size());
    write_file(a.pos(2, "OUT.bin"), out.data(), out.size());
    return 0;
}

int cmd_dequant(int argc, char ** argv, int first) {
    const Args a = Args::parse(argc, argv, first, {}, {});
    const ggml_type t = type_from_name(a.pos(0, "TYPE"));
    const std::string q = read_file(a.pos(1, "IN.bin"));
    const size_t block = ggml_type_size(t);
    if (q.size() % block != 0) fail(a.pos(1, "IN.bin"), " holds ", q.size(), " bytes: not whole ", ggml_type_name(t), " blocks");
    const int64_t n = static_cast<int64_t>(q.size() / block) * ggml_blck_size(t);
    const ggml_type_traits * tr = ggml_get_type_traits(t);
    if (!tr || !tr->to_float) fail(ggml_type_name(t), " has no to_float");
    std::vector<float> y(static_cast<size_t>(n));
    tr->to_float(q.data(), y.data(), n);
    write_file(a.pos(2, "OUT.f32"), y.data(), y.size() * sizeof(float));
    return 0;
}

}  // namespace llama_ref
