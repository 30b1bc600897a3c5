// Malformed GGUF files: each defect must raise efim::Error with a message naming the field and
// the values, never crash or over-read (run under -fsanitize=address,undefined to check).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "base/error.h"
#include "format/gguf.h"
#include "format_test_util.h"

namespace efim {
namespace {

using test::Raw;

// Parses a copy that is exactly `n` bytes long (so ASan catches any read past it). The copy
// dies on return: callers may inspect the metadata but not the tensor data of the result.
GgufFile parse_prefix(const std::string& bytes, size_t n) {
  std::vector<uint8_t> copy(bytes.begin(), bytes.begin() + static_cast<long>(n));
  auto f = GgufFile::parse(copy.data(), copy.size(), "t.gguf");
  // Touch every tensor byte while the copy is alive.
  uint64_t sum = 0;
  for (const auto& name : f.tensor_names()) {
    auto v = f.find(name);
    for (uint64_t i = 0; i < v->nbytes; ++i) sum += static_cast<const uint8_t*>(v->data)[i];
  }
  (void)sum;
  return f;
}

// The error message of parsing `raw`, or "" when it parses.
std::string error_of(const std::string& bytes) {
  try {
    parse_prefix(bytes, bytes.size());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Raw header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Raw r;
  r.b = "GGUF";
  r.put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  return r;
}

// One tensor info (dims innermost first).
Raw& tensor_info(Raw& r, const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                 uint64_t offset) {
  r.str(name).put<uint32_t>(static_cast<uint32_t>(dims.size()));
  for (auto d : dims) r.put<uint64_t>(d);
  return r.put<uint32_t>(type).put<uint64_t>(offset);
}

std::string small_valid_file() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_strings("tokenizer.ggml.tokens", {"a", "bc"});
  w.set("nested", gguf_array(GgufType::ARRAY, {gguf_array(GgufType::U8, {gguf_uint(GgufType::U8, 1)})}));
  std::string a(4 * 3 * 4, 'x'), b(34 * 2, 'y');
  w.add_tensor("a", DType::F32, {4, 3}, a.data(), a.size());
  w.add_tensor("b", DType::Q8_0, {2, 32}, b.data(), b.size());
  return w.serialize();
}

TEST(GgufMalformed, EveryTruncatedPrefixThrows) {
  const std::string bytes = small_valid_file();
  // The shortest valid length ends at the last tensor byte (trailing padding is optional).
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  GgufFile g = GgufFile::parse(copy.data(), copy.size(), "x");
  ASSERT_EQ(g.tensors().size(), 2u);
  size_t min_len = 0;
  for (const auto& name : g.tensor_names()) {
    auto v = g.find(name);
    min_len = std::max<size_t>(min_len, static_cast<const uint8_t*>(v->data) - copy.data() + v->nbytes);
  }
  ASSERT_LE(min_len, bytes.size());
  for (size_t n = 0; n < min_len; ++n) {
    try {
      parse_prefix(bytes, n);
      ADD_FAILURE() << "prefix of " << n << " bytes parsed";
    } catch (const Error&) {
    }
  }
  EXPECT_NO_THROW(parse_prefix(bytes, min_len));
  EXPECT_NE(error_of(bytes.substr(0, 10)).find("truncated"), std::string::npos);
}

TEST(GgufMalformed, BadMagicAndVersion) {
  EXPECT_ERROR(std::string("GGUX") + std::string(20, '\0'), "bad magic", "'t.gguf'");
  EXPECT_ERROR(header(0, 0, 1).b, "unsupported version 1");
  EXPECT_ERROR(header(0, 0, 4).b, "unsupported version 4");
  EXPECT_ERROR(header(0, 0, 0x03000000).b, "unsupported version 50331648");
  EXPECT_EQ(error_of(header(0, 0, 2).b), "");  // v2 has the same layout
  EXPECT_EQ(error_of(header(0, 0, 3).b), "");
}

TEST(GgufMalformed, AbsurdCounts) {
  EXPECT_ERROR(header(UINT64_MAX, 0).b, "tensor count 18446744073709551615 is impossible");
  EXPECT_ERROR(header(0, uint64_t{1} << 60).b, "metadata count", "impossible");
  EXPECT_ERROR(header(2, 0).b, "tensor count 2");
  // Key length far beyond the file.
  Raw r = header(0, 1);
  r.put<uint64_t>(UINT64_MAX - 3);
  r.b += std::string(32, 'k');
  EXPECT_ERROR(r.b, "claims length 18446744073709551612");
  // String value length beyond the file.
  r = header(0, 1);
  r.str("k").put<uint32_t>(8).put<uint64_t>(1000).b += "short";
  EXPECT_ERROR(r.b, "value of 'k'", "claims length 1000");
  // Array length beyond the file, for fixed-size and string items.
  r = header(0, 1);
  r.str("arr").put<uint32_t>(9).put<uint32_t>(5).put<uint64_t>(uint64_t{1} << 62);
  r.b += std::string(64, '\0');
  EXPECT_ERROR(r.b, "array 'arr' claims 4611686018427387904 i32 items");
  r = header(0, 1);
  r.str("arr").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(100);
  r.b += std::string(64, '\0');
  EXPECT_ERROR(r.b, "array 'arr' claims 100 string items");
}

TEST(GgufMalformed, BadMetadata) {
  Raw r = header(0, 2);
  r.str("k").put<uint32_t>(4).put<uint32_t>(1);
  r.str("k").put<uint32_t>(4).put<uint32_t>(2);
  EXPECT_ERROR(r.b, "duplicate metadata key 'k'");
  r = header(0, 1);
  r.str("k").put<uint32_t>(13).put<uint32_t>(0);
  EXPECT_ERROR(r.b, "type of metadata key 'k' 13", "not a GGUF value type");
  r = header(0, 1);
  r.str("k").put<uint32_t>(9).put<uint32_t>(77).put<uint64_t>(0);
  EXPECT_ERROR(r.b, "element type of array 'k' 77");
  r = header(0, 1);
  r.str("flag").put<uint32_t>(7).put<uint8_t>(2);
  EXPECT_ERROR(r.b, "bool value of 'flag'", "must be 0 or 1, got 2");
  r = header(0, 1);
  r.str("").put<uint32_t>(4).put<uint32_t>(1);
  EXPECT_ERROR(r.b, "metadata key #0 is empty");
}

TEST(GgufMalformed, NestingDepthIsBounded) {
  auto nested = [](int levels) {
    Raw r = header(0, 1);
    r.str("deep").put<uint32_t>(9);
    for (int i = 0; i + 1 < levels; ++i) r.put<uint32_t>(9).put<uint64_t>(1);
    r.put<uint32_t>(0).put<uint64_t>(1).put<uint8_t>(42);
    return r.b;
  };
  EXPECT_EQ(error_of(nested(kGgufMaxDepth)), "");
  EXPECT_ERROR(nested(kGgufMaxDepth + 1), "array 'deep' nests 9 levels deep (limit 8)");
  EXPECT_ERROR(nested(100000), "nests 9 levels");
}

TEST(GgufMalformed, Alignment) {
  auto with_alignment = [](uint32_t type, uint64_t value) {
    Raw r = header(0, 1);
    r.str("general.alignment").put<uint32_t>(type);
    if (type == 4) r.put<uint32_t>(static_cast<uint32_t>(value));
    else r.put<uint64_t>(value);
    return r.b;
  };
  EXPECT_ERROR(with_alignment(4, 48), "general.alignment 48 is not a nonzero power of two");
  EXPECT_ERROR(with_alignment(4, 0), "general.alignment 0");
  EXPECT_ERROR(with_alignment(10, 32), "general.alignment must be u32, got u64");
  EXPECT_EQ(error_of(with_alignment(4, 64)), "");
  // A file with alignment 64: data starts at a multiple of 64 and offsets honour it.
  Raw r = header(1, 1);
  r.str("general.alignment").put<uint32_t>(4).put<uint32_t>(64);
  tensor_info(r, "t", {4}, 0, 0).pad(64).b += std::string(16, 'd');
  auto f = GgufFile::parse(r.data(), r.size(), "a64");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(static_cast<const uint8_t*>(f.find("t")->data) - r.data(), 128);
  EXPECT_EQ(std::memcmp(f.find("t")->data, "dddd", 4), 0);
}

TEST(GgufMalformed, TensorInfos) {
  Raw r = header(1, 0);
  tensor_info(r, "t", {4}, 0, 1u << 20).pad(32).b += std::string(16, 'd');
  EXPECT_ERROR(r.b, "tensor 't' data [offset 1048640, +16 bytes] ends past the file (size 80)");
  r = header(1, 0);
  tensor_info(r, "t", {4}, 0, 4).pad(32).b += std::string(64, 'd');
  EXPECT_ERROR(r.b, "tensor 't' data offset 4 is not a multiple of the alignment 32");
  r = header(1, 0);
  tensor_info(r, "blk.0.attn_q.weight", {256}, 16, 0).pad(32).b += std::string(256, 'd');
  // The message names the type and lists every type that loads.
  EXPECT_ERROR(r.b, "tensor 'blk.0.attn_q.weight' has unsupported ggml type 16 (iq2_xxs); efim "
                    "loads f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, "
                    "iq4_nl, iq4_xs, i8, i32, bf16");
  r = header(1, 0);
  tensor_info(r, "t", {1}, 1000, 0).pad(32).b += std::string(32, 'd');
  EXPECT_ERROR(r.b, "unsupported ggml type 1000 (?)");
  r = header(1, 0);
  tensor_info(r, "t", {1, 1, 1, 1, 1}, 0, 0).pad(32).b += std::string(32, 'd');
  EXPECT_ERROR(r.b, "tensor 't' has 5 dims (at most 4)");
  r = header(1, 0);
  tensor_info(r, "t", {33}, 8, 0).pad(32).b += std::string(64, 'd');
  EXPECT_ERROR(r.b, "tensor 't' of type q8_0 has rows of 33 elements", "block size 32");
  r = header(1, 0);
  tensor_info(r, "t", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0).pad(32).b += std::string(32, 'd');
  EXPECT_ERROR(r.b, "tensor 't' byte size overflows");
  r = header(1, 0);
  tensor_info(r, "t", {uint64_t{1} << 62}, 0, 0).pad(32).b += std::string(32, 'd');
  EXPECT_ERROR(r.b, "tensor 't' byte size overflows");
  r = header(1, 0);
  tensor_info(r, "t", {UINT64_MAX}, 0, 0).pad(32).b += std::string(32, 'd');
  EXPECT_ERROR(r.b, "tensor 't' dim 0 = 18446744073709551615 is out of range");
  r = header(2, 0);
  tensor_info(r, "t", {4}, 0, 0);
  tensor_info(r, "t", {4}, 0, 32).pad(32).b += std::string(64, 'd');
  EXPECT_ERROR(r.b, "duplicate tensor name 't'");
  r = header(2, 0);
  tensor_info(r, "a", {16}, 0, 0);
  tensor_info(r, "b", {4}, 0, 32).pad(32).b += std::string(64, 'd');
  EXPECT_ERROR(r.b, "tensors 'a' [0, 64) and 'b' [32, 48) overlap");
  // The data section would start past the end of the file.
  r = header(1, 0);
  tensor_info(r, "t", {0}, 0, 0);
  EXPECT_ERROR(r.b, "data section starts at 64", "past the end of the file (size 57)");
}

// Flips random bytes of a valid file: each parse must succeed or throw efim::Error.
TEST(GgufMalformed, RandomMutations) {
  const std::string bytes = small_valid_file();
  std::mt19937 rng(1234);
  int ok = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string m = bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      size_t pos = rng() % m.size();
      m[pos] = static_cast<char>(rng() % 3 == 0 ? 0xff : rng() & 0xff);
    }
    if (rng() % 8 == 0) m.resize(rng() % m.size());
    try {
      parse_prefix(m, m.size());
      ++ok;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_EQ(ok + rejected, 2000);
  EXPECT_GT(rejected, 100);
  EXPECT_GT(ok, 10);  // many flips land in tensor data or string bytes
}

}  // namespace
}  // namespace efim
