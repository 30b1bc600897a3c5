// Interoperability with llama.cpp's own GGUF code (the prebuilt libggml-base.so shipped with
// node-llama-cpp, installed by scripts/deps.sh): llama.cpp must read what GgufWriter writes,
// GgufFile must read what llama.cpp writes, and both must agree on the real vocab file.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "format/gguf.h"
#include "format_test_util.h"

namespace efim {
namespace {

// Mirrors of the two parameter structs of ggml.h / gguf.h (passed by value).
struct GgufInitParams {
  bool no_alloc;
  void** ctx;  // struct ggml_context **
};
struct GgmlInitParams {
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};

// The handful of ggml/gguf entry points the tests call, resolved with dlsym.
class Ggml {
 public:
  Ggml() {
    const std::string lib = std::string(EFIM_SOURCE_DIR) +
                            "/.deps/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"
                            "libggml-base.so";
    handle_ = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* e = dlerror();
      dlerror_ += std::string(" (") + (e ? e : "?") + ")";
      return;
    }
    bind(init_from_file, "gguf_init_from_file");
    bind(init_empty, "gguf_init_empty");
    bind(gguf_free, "gguf_free");
    bind(get_version, "gguf_get_version");
    bind(get_n_kv, "gguf_get_n_kv");
    bind(get_key, "gguf_get_key");
    bind(get_kv_type, "gguf_get_kv_type");
    bind(get_arr_type, "gguf_get_arr_type");
    bind(get_arr_n, "gguf_get_arr_n");
    bind(get_arr_data, "gguf_get_arr_data");
    bind(get_arr_str, "gguf_get_arr_str");
    bind(get_val_data, "gguf_get_val_data");
    bind(get_val_str, "gguf_get_val_str");
    bind(get_n_tensors, "gguf_get_n_tensors");
    bind(get_tensor_name, "gguf_get_tensor_name");
    bind(get_tensor_type, "gguf_get_tensor_type");
    bind(get_tensor_offset, "gguf_get_tensor_offset");
    bind(get_tensor_size, "gguf_get_tensor_size");
    bind(set_val_u32, "gguf_set_val_u32");
    bind(set_val_str, "gguf_set_val_str");
    bind(set_arr_data, "gguf_set_arr_data");
    bind(set_arr_str, "gguf_set_arr_str");
    bind(add_tensor, "gguf_add_tensor");
    bind(write_to_file, "gguf_write_to_file");
    bind(ggml_init, "ggml_init");
    bind(ggml_free, "ggml_free");
    bind(new_tensor, "ggml_new_tensor");
    bind(set_name, "ggml_set_name");
    bind(get_tensor, "ggml_get_tensor");
    bind(get_data, "ggml_get_data");
    bind(nbytes, "ggml_nbytes");
  }
  ~Ggml() {
    if (handle_) dlclose(handle_);
  }
  bool ok() const { return handle_ && missing_.empty(); }
  std::string why() const { return handle_ ? "missing symbols:" + missing_ : dlerror_; }

  void* (*init_from_file)(const char*, GgufInitParams) = nullptr;
  void* (*init_empty)() = nullptr;
  void (*gguf_free)(void*) = nullptr;
  uint32_t (*get_version)(const void*) = nullptr;
  int64_t (*get_n_kv)(const void*) = nullptr;
  const char* (*get_key)(const void*, int64_t) = nullptr;
  int (*get_kv_type)(const void*, int64_t) = nullptr;
  int (*get_arr_type)(const void*, int64_t) = nullptr;
  size_t (*get_arr_n)(const void*, int64_t) = nullptr;
  const void* (*get_arr_data)(const void*, int64_t) = nullptr;
  const char* (*get_arr_str)(const void*, int64_t, size_t) = nullptr;
  const void* (*get_val_data)(const void*, int64_t) = nullptr;
  const char* (*get_val_str)(const void*, int64_t) = nullptr;
  int64_t (*get_n_tensors)(const void*) = nullptr;
  const char* (*get_tensor_name)(const void*, int64_t) = nullptr;
  int (*get_tensor_type)(const void*, int64_t) = nullptr;
  size_t (*get_tensor_offset)(const void*, int64_t) = nullptr;
  size_t (*get_tensor_size)(const void*, int64_t) = nullptr;
  void (*set_val_u32)(void*, const char*, uint32_t) = nullptr;
  void (*set_val_str)(void*, const char*, const char*) = nullptr;
  void (*set_arr_data)(void*, const char*, int, const void*, size_t) = nullptr;
  void (*set_arr_str)(void*, const char*, const char**, size_t) = nullptr;
  void (*add_tensor)(void*, const void*) = nullptr;
  bool (*write_to_file)(const void*, const char*, bool) = nullptr;
  void* (*ggml_init)(GgmlInitParams) = nullptr;
  void (*ggml_free)(void*) = nullptr;
  void* (*new_tensor)(void*, int, int, const int64_t*) = nullptr;
  void* (*set_name)(void*, const char*) = nullptr;
  void* (*get_tensor)(void*, const char*) = nullptr;
  void* (*get_data)(const void*) = nullptr;
  size_t (*nbytes)(const void*) = nullptr;

 private:
  template <typename F>
  void bind(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(handle_, name));
    if (!f) missing_ += std::string(" ") + name;
  }
  void* handle_ = nullptr;
  std::string missing_;
  std::string dlerror_ = "libggml-base.so not found: run scripts/deps.sh";
};

// Bytes of one item of a fixed-size GGUF type.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    default: return 8;
  }
}

// The value as llama.cpp stores it in memory: little-endian items of their declared width.
std::string packed(const GgufValue& v) {
  std::string out;
  auto add = [&](const GgufValue& x) {
    size_t n = scalar_size(x.type);
    if (x.type == GgufType::F32) {
      float f = static_cast<float>(x.as_f64());
      out.append(reinterpret_cast<const char*>(&f), 4);
    } else if (x.type == GgufType::F64) {
      double d = x.as_f64();
      out.append(reinterpret_cast<const char*>(&d), 8);
    } else if (x.type == GgufType::BOOL) {
      out += static_cast<char>(x.as_bool());
    } else {
      uint64_t u = std::holds_alternative<int64_t>(x.v) ? static_cast<uint64_t>(std::get<int64_t>(x.v))
                                                        : std::get<uint64_t>(x.v);
      out.append(reinterpret_cast<const char*>(&u), n);
    }
  };
  if (v.type == GgufType::ARRAY)
    for (const auto& item : v.as_array().items) add(item);
  else
    add(v);
  return out;
}

class GgufLlama : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ggml.ok()) << ggml.why(); }
  Ggml ggml;
  test::TempDir dir;
};

TEST_F(GgufLlama, LlamaCppReadsOurFile) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.context_length", 2048);
  w.set_i32("v.i32", -5);
  w.set_f32("v.f32", 0.25f);
  w.set_bool("v.bool", true);
  w.set("v.u8", gguf_uint(GgufType::U8, 3));
  w.set("v.i8", gguf_int(GgufType::I8, -3));
  w.set("v.u16", gguf_uint(GgufType::U16, 300));
  w.set("v.i16", gguf_int(GgufType::I16, -300));
  w.set("v.u64", gguf_uint(GgufType::U64, uint64_t{1} << 50));
  w.set("v.i64", gguf_int(GgufType::I64, -(int64_t{1} << 50)));
  w.set("v.f64", gguf_float(GgufType::F64, -2.5));
  w.set_strings("tokenizer.ggml.tokens", {"<s>", "a", "", "hello world"});
  w.set_i32s("tokenizer.ggml.token_type", {3, 1, 1, 1});
  w.set_f32s("tokenizer.ggml.scores", {0.0f, -1.5f, 2.0f, 3.0f});
  w.set("a.bool", gguf_array(GgufType::BOOL, {gguf_bool(false), gguf_bool(true)}));
  w.set("a.u64", gguf_array(GgufType::U64, {gguf_uint(GgufType::U64, 7)}));
  struct T {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  std::vector<T> ts = {{"a.f32", DType::F32, {3, 5}},    {"b.f16", DType::F16, {2, 3, 4}},
                       {"c.bf16", DType::BF16, {7}},     {"d.q8_0", DType::Q8_0, {2, 64}},
                       {"e.q4_0", DType::Q4_0, {3, 32}}, {"f.q4_k", DType::Q4_K, {2, 256}},
                       {"g.i32", DType::I32, {1, 2, 3, 4}}, {"h.i8", DType::I8, {5, 3}}};
  std::vector<std::string> data;
  for (size_t i = 0; i < ts.size(); ++i) {
    uint64_t rows = 1;
    for (size_t d = 0; d + 1 < ts[i].shape.size(); ++d) rows *= ts[i].shape[d];
    data.push_back(test::random_bytes(dtype_row_bytes(ts[i].dtype, ts[i].shape.back()) * rows,
                                      static_cast<uint32_t>(i + 10)));
    w.add_tensor(ts[i].name, ts[i].dtype, ts[i].shape, data[i].data(), data[i].size());
  }
  const std::string path = dir.file("ours.gguf");
  w.write(path);
  const GgufFile ours = GgufFile::open(path);

  void* gctx = nullptr;
  void* ctx = ggml.init_from_file(path.c_str(), GgufInitParams{false, &gctx});
  ASSERT_NE(ctx, nullptr) << "llama.cpp rejected the file";
  EXPECT_EQ(ggml.get_version(ctx), 3u);
  ASSERT_EQ(ggml.get_n_kv(ctx), static_cast<int64_t>(ours.metadata_order().size()));
  for (int64_t i = 0; i < ggml.get_n_kv(ctx); ++i) {
    const std::string key = ggml.get_key(ctx, i);
    ASSERT_EQ(key, ours.metadata_order()[i]);
    const GgufValue& v = *ours.get(key);
    ASSERT_EQ(ggml.get_kv_type(ctx, i), static_cast<int>(v.type)) << key;
    if (v.type == GgufType::STRING) {
      EXPECT_EQ(std::string(ggml.get_val_str(ctx, i)), v.as_string()) << key;
    } else if (v.type != GgufType::ARRAY) {
      std::string want = packed(v);
      EXPECT_EQ(std::memcmp(ggml.get_val_data(ctx, i), want.data(), want.size()), 0) << key;
    } else {
      const auto& arr = v.as_array();
      ASSERT_EQ(ggml.get_arr_type(ctx, i), static_cast<int>(arr.elem_type)) << key;
      ASSERT_EQ(ggml.get_arr_n(ctx, i), arr.items.size()) << key;
      if (arr.elem_type == GgufType::STRING) {
        for (size_t j = 0; j < arr.items.size(); ++j)
          EXPECT_EQ(std::string(ggml.get_arr_str(ctx, i, j)), arr.items[j].as_string()) << key;
      } else {
        std::string want = packed(v);
        EXPECT_EQ(std::memcmp(ggml.get_arr_data(ctx, i), want.data(), want.size()), 0) << key;
      }
    }
  }
  ASSERT_EQ(ggml.get_n_tensors(ctx), static_cast<int64_t>(ts.size()));
  for (size_t i = 0; i < ts.size(); ++i) {
    auto id = static_cast<int64_t>(i);
    EXPECT_EQ(std::string(ggml.get_tensor_name(ctx, id)), ts[i].name);
    EXPECT_EQ(ggml.get_tensor_type(ctx, id), static_cast<int>(ggml_type_id(ts[i].dtype)));
    EXPECT_EQ(ggml.get_tensor_offset(ctx, id), ours.tensors()[i].offset);
    EXPECT_EQ(ggml.get_tensor_size(ctx, id), data[i].size());
    void* t = ggml.get_tensor(gctx, ts[i].name);
    ASSERT_NE(t, nullptr) << ts[i].name;
    ASSERT_EQ(ggml.nbytes(t), data[i].size());
    EXPECT_EQ(std::memcmp(ggml.get_data(t), data[i].data(), data[i].size()), 0) << ts[i].name;
  }
  ggml.ggml_free(gctx);
  ggml.gguf_free(ctx);
}

TEST_F(GgufLlama, WeReadLlamaCppFile) {
  void* ctx = ggml.init_empty();
  ggml.set_val_str(ctx, "general.architecture", "llama");
  ggml.set_val_u32(ctx, "llama.block_count", 12);
  const char* toks[] = {"<unk>", "x", "yz"};
  ggml.set_arr_str(ctx, "tokenizer.ggml.tokens", toks, 3);
  const int32_t types[] = {2, 1, 1};
  ggml.set_arr_data(ctx, "tokenizer.ggml.token_type", static_cast<int>(GgufType::I32), types, 3);
  void* gctx = ggml.ggml_init(GgmlInitParams{1 << 20, nullptr, false});
  ASSERT_NE(gctx, nullptr);
  struct T {
    const char* name;
    DType dtype;
    std::vector<int64_t> ne;  // ggml order: innermost first
  };
  std::vector<T> ts = {{"w.f32", DType::F32, {5, 3}}, {"w.q8_0", DType::Q8_0, {64, 2}},
                       {"w.bf16", DType::BF16, {9}}, {"w.q4_k", DType::Q4_K, {256, 1, 2}}};
  std::vector<std::string> data;
  for (size_t i = 0; i < ts.size(); ++i) {
    void* t = ggml.new_tensor(gctx, static_cast<int>(ggml_type_id(ts[i].dtype)),
                              static_cast<int>(ts[i].ne.size()), ts[i].ne.data());
    ggml.set_name(t, ts[i].name);
    data.push_back(test::random_bytes(ggml.nbytes(t), static_cast<uint32_t>(i + 100)));
    std::memcpy(ggml.get_data(t), data[i].data(), data[i].size());
    ggml.add_tensor(ctx, t);
  }
  const std::string path = dir.file("theirs.gguf");
  ASSERT_TRUE(ggml.write_to_file(ctx, path.c_str(), false));
  ggml.ggml_free(gctx);
  ggml.gguf_free(ctx);

  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get("general.architecture")->as_string(), "llama");
  EXPECT_EQ(f.get("llama.block_count")->type, GgufType::U32);
  EXPECT_EQ(f.get("llama.block_count")->as_u64(), 12u);
  EXPECT_EQ(f.get("tokenizer.ggml.tokens")->as_strings(),
            (std::vector<std::string>{"<unk>", "x", "yz"}));
  EXPECT_EQ(f.get("tokenizer.ggml.token_type")->as_ints(), (std::vector<int64_t>{2, 1, 1}));
  ASSERT_EQ(f.tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    auto v = f.find(ts[i].name);
    ASSERT_TRUE(v.has_value()) << ts[i].name;
    EXPECT_EQ(v->dtype, ts[i].dtype);
    EXPECT_EQ(v->shape, std::vector<int64_t>(ts[i].ne.rbegin(), ts[i].ne.rend()));
    ASSERT_EQ(v->nbytes, data[i].size());
    EXPECT_EQ(std::memcmp(v->data, data[i].data(), data[i].size()), 0) << ts[i].name;
  }
}

// Every key, type and value of the real vocab file as llama.cpp reads it.
TEST_F(GgufLlama, RealVocabMetadataAgreesWithLlamaCpp) {
  const std::string path =
      std::string(EFIM_SOURCE_DIR) + "/.deps/llama.cpp/models/ggml-vocab-llama-bpe.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " missing: run scripts/deps.sh";
  GgufFile f = GgufFile::open(path);
  void* ctx = ggml.init_from_file(path.c_str(), GgufInitParams{true, nullptr});
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(ggml.get_n_kv(ctx), static_cast<int64_t>(f.metadata_order().size()));
  size_t compared_strings = 0;
  for (int64_t i = 0; i < ggml.get_n_kv(ctx); ++i) {
    const std::string key = ggml.get_key(ctx, i);
    ASSERT_EQ(key, f.metadata_order()[i]);
    const GgufValue& v = *f.get(key);
    ASSERT_EQ(ggml.get_kv_type(ctx, i), static_cast<int>(v.type)) << key;
    if (v.type == GgufType::STRING) {
      EXPECT_EQ(std::string(ggml.get_val_str(ctx, i)), v.as_string()) << key;
    } else if (v.type == GgufType::ARRAY && v.as_array().elem_type == GgufType::STRING) {
      const auto& items = v.as_array().items;
      ASSERT_EQ(ggml.get_arr_n(ctx, i), items.size()) << key;
      for (size_t j = 0; j < items.size(); ++j, ++compared_strings)
        ASSERT_EQ(std::string(ggml.get_arr_str(ctx, i, j)), items[j].as_string()) << key << j;
    } else if (v.type == GgufType::ARRAY) {
      ASSERT_EQ(ggml.get_arr_n(ctx, i), v.as_array().items.size()) << key;
      std::string want = packed(v);
      EXPECT_EQ(std::memcmp(ggml.get_arr_data(ctx, i), want.data(), want.size()), 0) << key;
    } else {
      std::string want = packed(v);
      EXPECT_EQ(std::memcmp(ggml.get_val_data(ctx, i), want.data(), want.size()), 0) << key;
    }
  }
  EXPECT_GT(compared_strings, 128256u);  // tokens and merges
  ggml.gguf_free(ctx);
}

}  // namespace
}  // namespace efim
