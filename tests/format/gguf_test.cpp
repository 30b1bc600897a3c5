// GGUF round trips (all value types, all dtypes), typed accessors, writer validation and the
// real llama.cpp vocab file.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>

#include "base/error.h"
#include "format/gguf.h"
#include "format_test_util.h"

namespace efim {
namespace {

using test::random_bytes;
using test::TempDir;

struct SampleTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // outermost first
  std::string bytes;
};

std::vector<SampleTensor> sample_tensors() {
  std::vector<SampleTensor> ts = {
      {"tok_embd.weight", DType::F32, {3, 5}, ""},    {"blk.0.attn_q.weight", DType::F16, {2, 3, 4}, ""},
      {"blk.0.norm", DType::BF16, {7}, ""},           {"blk.0.ffn_up.weight", DType::Q8_0, {2, 64}, ""},
      {"blk.0.ffn_down.weight", DType::Q4_0, {3, 32}, ""}, {"blk.0.ffn_gate.weight", DType::Q4_K, {2, 256}, ""},
      {"ids", DType::I32, {1, 2, 3, 4}, ""},          {"mask", DType::I8, {5, 3}, ""},
  };
  uint32_t seed = 1;
  for (auto& t : ts) {
    uint64_t rows = 1;
    for (size_t i = 0; i + 1 < t.shape.size(); ++i) rows *= t.shape[i];
    t.bytes = random_bytes(dtype_row_bytes(t.dtype, t.shape.back()) * rows, seed++);
  }
  return ts;
}

// Every scalar type, arrays of every type, and nested arrays (which llama.cpp cannot read, so
// callers that hand the file to llama.cpp pass nested = false). Floats are exact in f32.
std::vector<std::pair<std::string, GgufValue>> sample_metadata(bool nested) {
  std::vector<std::pair<std::string, GgufValue>> m = {
      {"general.architecture", gguf_string("llama")},
      {"v.u8", gguf_uint(GgufType::U8, 200)},
      {"v.i8", gguf_int(GgufType::I8, -7)},
      {"v.u16", gguf_uint(GgufType::U16, 65535)},
      {"v.i16", gguf_int(GgufType::I16, -32768)},
      {"v.u32", gguf_uint(GgufType::U32, 4000000000u)},
      {"v.i32", gguf_int(GgufType::I32, -2)},
      {"v.f32", gguf_float(GgufType::F32, 1.5)},
      {"v.bool", gguf_bool(true)},
      {"v.u64", gguf_uint(GgufType::U64, uint64_t{1} << 40)},
      {"v.i64", gguf_int(GgufType::I64, -(int64_t{1} << 40))},
      {"v.f64", gguf_float(GgufType::F64, 3.25)},
      {"a.strings", gguf_array(GgufType::STRING, {gguf_string("a"), gguf_string(""), gguf_string("ccc")})},
      {"a.i32", gguf_array(GgufType::I32, {gguf_int(GgufType::I32, 1), gguf_int(GgufType::I32, -2)})},
      {"a.f32", gguf_array(GgufType::F32, {gguf_float(GgufType::F32, 0.5), gguf_float(GgufType::F32, -1)})},
      {"a.u8", gguf_array(GgufType::U8, {gguf_uint(GgufType::U8, 1), gguf_uint(GgufType::U8, 255)})},
      {"a.bool", gguf_array(GgufType::BOOL, {gguf_bool(true), gguf_bool(false)})},
      {"a.i64", gguf_array(GgufType::I64, {gguf_int(GgufType::I64, INT64_MIN)})},
      {"a.u64", gguf_array(GgufType::U64, {gguf_uint(GgufType::U64, UINT64_MAX)})},
      {"a.f64", gguf_array(GgufType::F64, {gguf_float(GgufType::F64, -0.125)})},
      {"a.u16", gguf_array(GgufType::U16, {gguf_uint(GgufType::U16, 9)})},
      {"a.i16", gguf_array(GgufType::I16, {gguf_int(GgufType::I16, -9)})},
      {"a.u32", gguf_array(GgufType::U32, {gguf_uint(GgufType::U32, 77)})},
      {"a.i8", gguf_array(GgufType::I8, {gguf_int(GgufType::I8, -128)})},
      {"a.empty", gguf_array(GgufType::STRING, {})},
  };
  if (nested) {
    m.emplace_back("v.nul", gguf_string(std::string("a\0b", 3)));
    auto inner = gguf_array(GgufType::I32, {gguf_int(GgufType::I32, 4)});
    auto mid = gguf_array(GgufType::ARRAY, {inner, inner});
    m.emplace_back("a.nested", gguf_array(GgufType::ARRAY, {mid, gguf_array(GgufType::I32, {})}));
  }
  return m;
}

GgufWriter sample_writer(bool nested) {
  GgufWriter w;
  for (const auto& [k, v] : sample_metadata(nested)) w.set(k, v);
  for (const auto& t : sample_tensors())
    w.add_tensor(t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  return w;
}

void expect_same(const GgufValue& a, const GgufValue& b, const std::string& key) {
  ASSERT_EQ(a.type, b.type) << key;
  ASSERT_EQ(a.v.index(), b.v.index()) << key;
  if (auto* x = std::get_if<uint64_t>(&a.v)) {
    EXPECT_EQ(*x, std::get<uint64_t>(b.v)) << key;
  }
  if (auto* x = std::get_if<int64_t>(&a.v)) {
    EXPECT_EQ(*x, std::get<int64_t>(b.v)) << key;
  }
  if (auto* x = std::get_if<double>(&a.v)) {
    EXPECT_EQ(*x, std::get<double>(b.v)) << key;
  }
  if (auto* x = std::get_if<bool>(&a.v)) {
    EXPECT_EQ(*x, std::get<bool>(b.v)) << key;
  }
  if (auto* x = std::get_if<std::string>(&a.v)) {
    EXPECT_EQ(*x, std::get<std::string>(b.v)) << key;
  }
  if (auto* x = std::get_if<GgufArray>(&a.v)) {
    const auto& y = std::get<GgufArray>(b.v);
    ASSERT_EQ(x->elem_type, y.elem_type) << key;
    ASSERT_EQ(x->items.size(), y.items.size()) << key;
    for (size_t i = 0; i < x->items.size(); ++i) expect_same(x->items[i], y.items[i], key);
  }
}

TEST(Gguf, RoundTripEveryValueTypeAndDtype) {
  TempDir dir;
  GgufWriter w = sample_writer(true);
  w.write(dir.file("t.gguf"));
  EXPECT_EQ(read_file(dir.file("t.gguf")), w.serialize());
  GgufFile f = GgufFile::open(dir.file("t.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);

  // Metadata: insertion order, types and values exactly as set.
  auto want = sample_metadata(true);
  ASSERT_EQ(f.metadata_order().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(f.metadata_order()[i], want[i].first);
    expect_same(*f.get(want[i].first), want[i].second, want[i].first);
  }
  EXPECT_EQ(f.metadata_order().front(), "general.architecture");
  EXPECT_EQ(f.metadata_order().back(), "a.nested");
  EXPECT_EQ(f.get("v.u8")->as_u64(), 200u);
  EXPECT_EQ(f.get("v.i8")->as_i64(), -7);
  EXPECT_EQ(f.get("v.u16")->as_u64(), 65535u);
  EXPECT_EQ(f.get("v.i16")->as_i64(), -32768);
  EXPECT_EQ(f.get("v.u32")->as_u64(), 4000000000u);
  EXPECT_EQ(f.get("v.i32")->as_i64(), -2);
  EXPECT_EQ(f.get("v.f32")->as_f64(), 1.5);
  EXPECT_EQ(f.get("v.f32")->type, GgufType::F32);
  EXPECT_TRUE(f.get("v.bool")->as_bool());
  EXPECT_EQ(f.get("v.u64")->as_u64(), uint64_t{1} << 40);
  EXPECT_EQ(f.get("v.i64")->as_i64(), -(int64_t{1} << 40));
  EXPECT_EQ(f.get("v.f64")->as_f64(), 3.25);
  EXPECT_EQ(f.get("v.nul")->as_string(), std::string("a\0b", 3));
  EXPECT_EQ(f.get("a.strings")->as_strings(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.get("a.i32")->as_ints(), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(f.get("a.f32")->as_floats(), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(f.get("a.u64")->as_array().items[0].as_u64(), UINT64_MAX);
  EXPECT_EQ(f.get("a.i64")->as_ints(), (std::vector<int64_t>{INT64_MIN}));
  EXPECT_TRUE(f.get("a.empty")->as_strings().empty());
  const auto& nested = f.get("a.nested")->as_array();
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].as_array().items[1].as_ints(), (std::vector<int64_t>{4}));
  EXPECT_EQ(f.get("missing"), nullptr);

  // Tensors: order, dtypes, outermost-first shapes, identical bytes, aligned offsets.
  auto ts = sample_tensors();
  ASSERT_EQ(f.tensors().size(), ts.size());
  std::vector<std::string> names;
  for (const auto& t : ts) names.push_back(t.name);
  EXPECT_EQ(f.tensor_names(), names);
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto& info = f.tensors()[i];
    EXPECT_EQ(info.offset % 32, 0u) << ts[i].name;
    std::vector<int64_t> dims(ts[i].shape.rbegin(), ts[i].shape.rend());
    EXPECT_EQ(info.dims, dims) << ts[i].name;
    auto v = f.find(ts[i].name);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->dtype, ts[i].dtype);
    EXPECT_EQ(v->shape, ts[i].shape);
    ASSERT_EQ(v->nbytes, ts[i].bytes.size());
    EXPECT_EQ(std::memcmp(v->data, ts[i].bytes.data(), v->nbytes), 0) << ts[i].name;
  }
  EXPECT_FALSE(f.find("nope").has_value());

  // Read -> write reproduces the file byte for byte.
  GgufWriter again;
  for (const auto& key : f.metadata_order()) again.set(key, *f.get(key));
  for (const auto& name : f.tensor_names()) {
    auto v = f.find(name);
    again.add_tensor(name, v->dtype, v->shape, v->data, v->nbytes);
  }
  EXPECT_EQ(again.serialize(), w.serialize());
}

TEST(Gguf, RealLlamaBpeVocab) {
  const std::string path =
      std::string(EFIM_SOURCE_DIR) + "/.deps/llama.cpp/models/ggml-vocab-llama-bpe.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " missing: run scripts/deps.sh";
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get("general.architecture")->as_string(), "llama");
  EXPECT_EQ(f.get("tokenizer.ggml.model")->as_string(), "gpt2");
  auto tokens = f.get("tokenizer.ggml.tokens")->as_strings();
  EXPECT_EQ(tokens.size(), 128256u);
  EXPECT_EQ(tokens[0], "!");
  EXPECT_EQ(f.get("tokenizer.ggml.token_type")->as_ints().size(), tokens.size());
  EXPECT_EQ(f.get("tokenizer.ggml.bos_token_id")->as_u64(), 128000u);
  EXPECT_EQ(tokens[128000], "<|begin_of_text|>");
  EXPECT_GT(f.get("tokenizer.ggml.merges")->as_strings().size(), 200000u);
  EXPECT_TRUE(f.tensors().empty());  // vocab-only file
}

TEST(Gguf, TypedAccessorsNameTheTypes) {
  auto expect_msg = [](auto fn, const std::string& want) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  GgufValue u32 = gguf_uint(GgufType::U32, 5), neg = gguf_int(GgufType::I64, -1);
  GgufValue big = gguf_uint(GgufType::U64, UINT64_MAX), s = gguf_string("x");
  expect_msg([&] { (void)u32.as_string(); }, "expected string, got u32");
  expect_msg([&] { (void)neg.as_u64(); }, "non-negative");
  expect_msg([&] { (void)big.as_i64(); }, "does not fit in int64");
  expect_msg([&] { (void)s.as_f64(); }, "expected a number, got string");
  expect_msg([&] { (void)s.as_array(); }, "expected array, got string");
  expect_msg([&] { (void)gguf_array(GgufType::STRING, {s}).as_ints(); }, "expected an integer");
  expect_msg([&] { (void)gguf_array(GgufType::I32, {s}); }, "item 0 has type string");
  expect_msg([&] { (void)gguf_uint(GgufType::I32, 1); }, "not unsigned");
  EXPECT_EQ(u32.as_f64(), 5.0);
  EXPECT_EQ(u32.as_i64(), 5);
}

TEST(Gguf, WriterRejectsBadInput) {
  auto expect_msg = [](auto fn, const std::string& want) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  std::string data(64, '\0');
  expect_msg([&] { GgufWriter().add_tensor("t", DType::F32, {4, 4}, data.data(), 60); },
             "needs 64 bytes, got 60");
  expect_msg([&] { GgufWriter().add_tensor("t", DType::Q8_0, {2, 33}, data.data(), 64); },
             "divisible by 32");
  expect_msg([&] { GgufWriter().add_tensor("t", DType::F32, {1, 1, 1, 1, 1}, data.data(), 4); },
             "5 dims");
  expect_msg([&] { GgufWriter().add_tensor(std::string(64, 'n'), DType::I8, {1}, data.data(), 1); },
             "64 bytes");
  expect_msg([&] {
    GgufWriter w;
    w.add_tensor("t", DType::I8, {1}, data.data(), 1);
    w.add_tensor("t", DType::I8, {1}, data.data(), 1);
  }, "added twice");
  expect_msg([&] {
    GgufWriter w;
    w.set("k", GgufValue{GgufType::U8, uint64_t{300}});
    (void)w.serialize();
  }, "'k' value 300 does not fit u8");
  expect_msg([&] {
    GgufWriter w;
    w.set("k", GgufValue{GgufType::U32, std::string("x")});
    (void)w.serialize();
  }, "declared u32");
  expect_msg([&] {
    GgufWriter w;
    w.set("k", gguf_float(GgufType::F32, 1e300));
    (void)w.serialize();
  }, "does not fit f32");
  expect_msg([&] { GgufWriter().set_u32("general.alignment", 64); }, "fixed at u32 32");
}

TEST(Gguf, WriterSetReplacesInPlace) {
  GgufWriter w;
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "x");
  std::string bytes = w.serialize();
  auto f = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "m");
  EXPECT_EQ(f.metadata_order(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.get("a")->as_string(), "x");
}

TEST(Gguf, GgmlTypeIds) {
  // ggml.h enum ggml_type values.
  EXPECT_EQ(ggml_type_id(DType::F32), 0u);
  EXPECT_EQ(ggml_type_id(DType::F16), 1u);
  EXPECT_EQ(ggml_type_id(DType::Q4_0), 2u);
  EXPECT_EQ(ggml_type_id(DType::Q8_0), 8u);
  EXPECT_EQ(ggml_type_id(DType::Q4_K), 12u);
  EXPECT_EQ(ggml_type_id(DType::I8), 24u);
  EXPECT_EQ(ggml_type_id(DType::I32), 26u);
  EXPECT_EQ(ggml_type_id(DType::BF16), 30u);
  EXPECT_EQ(ggml_type_id(DType::Q4_1), 3u);
  EXPECT_EQ(ggml_type_id(DType::Q5_0), 6u);
  EXPECT_EQ(ggml_type_id(DType::Q5_1), 7u);
  EXPECT_EQ(ggml_type_id(DType::Q2_K), 10u);
  EXPECT_EQ(ggml_type_id(DType::Q3_K), 11u);
  EXPECT_EQ(ggml_type_id(DType::Q5_K), 13u);
  EXPECT_EQ(ggml_type_id(DType::Q6_K), 14u);
  EXPECT_EQ(ggml_type_id(DType::IQ4_NL), 20u);
  EXPECT_EQ(ggml_type_id(DType::IQ4_XS), 23u);
  int loadable = 0;
  for (uint32_t id = 0; id < 64; ++id)
    if (auto d = dtype_from_ggml_type(id)) {
      EXPECT_EQ(ggml_type_id(*d), id);
      // Names agree up to case ("q4_K" / "q4_k").
      std::string ours(dtype_name(*d)), theirs(ggml_type_name(id));
      for (char& c : theirs) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      EXPECT_EQ(ours, theirs);
      ++loadable;
    }
  EXPECT_EQ(loadable, 17);
  // IQ2/IQ3/IQ1, ternary and 4x4-repacked types do not load.
  for (uint32_t id : {16u, 17u, 18u, 19u, 21u, 22u, 29u, 34u, 35u, 39u})
    EXPECT_FALSE(dtype_from_ggml_type(id).has_value()) << id;
  EXPECT_EQ(ggml_type_name(14), "q6_K");
  EXPECT_EQ(ggml_type_name(1000), "?");
}

}  // namespace
}  // namespace efim
