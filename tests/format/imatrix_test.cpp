// Importance matrices as llama-imatrix writes them (GGUF and the legacy .dat), and every defect
// of an untrusted file refused with an Error that names it, never a crash or an over-read.
#include "format/imatrix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "base/error.h"
#include "format/gguf.h"

namespace efim {
namespace {

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse_imatrix(bytes.data(), bytes.size(), "im");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// llama-imatrix's layout: NAME.in_sum2 [n_mat, cols] sums of squares, NAME.counts [n_mat].
std::vector<uint8_t> gguf_imatrix(const std::vector<float>& sums, const std::vector<float>& counts,
                                  int64_t cols, const char* type = "imatrix") {
  GgufWriter w;
  w.set_string("general.type", type);
  w.set_strings("imatrix.datasets", {"calib.txt"});
  w.set_u32("imatrix.chunk_count", 3);
  const auto n_mat = static_cast<int64_t>(counts.size());
  w.add_tensor("blk.0.ffn_up_exps.weight.in_sum2", DType::F32, {n_mat, cols}, sums.data(),
               sums.size() * 4);
  w.add_tensor("blk.0.ffn_up_exps.weight.counts", DType::F32, {n_mat, 1}, counts.data(),
               counts.size() * 4);
  return bytes_of(w.serialize());
}

// The legacy format: i32 entries; per entry i32 length, name, i32 ncall, i32 nval, f32 values;
// then i32 last call, i32 length, dataset name.
struct Legacy {
  std::vector<uint8_t> b;
  void i32(int32_t v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + 4);
  }
  void f32(float v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + 4);
  }
  void str(const std::string& s) {
    i32(static_cast<int32_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
};

Legacy legacy_imatrix() {
  Legacy l;
  l.i32(2);
  l.str("blk.0.attn_q.weight");
  l.i32(10);  // ncall: the values are means times 10
  l.i32(4);
  for (float v : {10.0f, 20.0f, 0.0f, 5.0f}) l.f32(v);
  l.str("output.weight");
  l.i32(0);  // ncall 0: values as stored
  l.i32(2);
  for (float v : {3.0f, 4.0f}) l.f32(v);
  l.i32(10);  // last call
  l.str("wiki.train.raw");
  return l;
}

TEST(Imatrix, GgufEntriesAreSumsOverCountsPerExpert) {
  // Two experts of 3 columns: expert 1 saw no token, so its importance is 1 (llama-quantize's
  // rule), expert 0's is sums / 4.
  const auto b = gguf_imatrix({4, 8, 12, 7, 7, 7}, {4, 0}, 3);
  const ImportanceMatrix m = parse_imatrix(b.data(), b.size(), "im");
  EXPECT_FALSE(m.legacy);
  EXPECT_EQ(m.datasets, std::vector<std::string>{"calib.txt"});
  ASSERT_EQ(m.entries.size(), 1u);
  const ImportanceMatrix::Entry* e = m.find("blk.0.ffn_up_exps.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->n_mat, 2);
  EXPECT_EQ(e->cols(), 3);
  EXPECT_EQ(std::vector<float>(e->of(0).begin(), e->of(0).end()), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(std::vector<float>(e->of(1).begin(), e->of(1).end()), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(m.find("blk.0.ffn_down_exps.weight"), nullptr);
}

TEST(Imatrix, LegacyValuesAreDividedByTheirCalls) {
  const Legacy l = legacy_imatrix();
  const ImportanceMatrix m = parse_imatrix(l.b.data(), l.b.size(), "im.dat");
  EXPECT_TRUE(m.legacy);
  EXPECT_EQ(m.datasets, std::vector<std::string>{"wiki.train.raw"});
  ASSERT_EQ(m.entries.size(), 2u);
  const auto* q = m.find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->values, (std::vector<float>{1, 2, 0, 0.5f}));
  EXPECT_EQ(m.find("output.weight")->values, (std::vector<float>{3, 4}));
  // Without the optional trailer (older writers) the entries read the same.
  const std::vector<uint8_t> bare(l.b.begin(), l.b.end() - 4 - 4 - 14);
  EXPECT_EQ(parse_imatrix(bare.data(), bare.size(), "im.dat").entries.size(), 2u);
}

TEST(Imatrix, WrittenGgufReadsBack) {
  ImportanceMatrix m;
  m.datasets = {"code.txt"};
  m.entries["blk.3.attn_output.weight"] = {1, {0.5f, 2.0f, 8.0f, 1.0f}};
  m.entries["blk.3.ffn_gate_exps.weight"] = {2, {1, 2, 3, 4}};
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("efim-imatrix-" + std::to_string(getpid()) + ".gguf"))
                               .string();
  write_imatrix_gguf(m, path);
  const ImportanceMatrix r = read_imatrix(path);
  std::filesystem::remove(path);
  EXPECT_EQ(r.datasets, m.datasets);
  ASSERT_EQ(r.entries.size(), 2u);
  for (const auto& [name, e] : m.entries) {
    ASSERT_NE(r.find(name), nullptr) << name;
    EXPECT_EQ(r.find(name)->n_mat, e.n_mat) << name;
    EXPECT_EQ(r.find(name)->values, e.values) << name;
  }
}

TEST(Imatrix, DefectsAreNamedErrors) {
  auto expect_error = [](const std::vector<uint8_t>& b, const std::string& part) {
    const std::string err = error_of(b);
    EXPECT_NE(err.find(part), std::string::npos) << "wanted \"" << part << "\", got: " << err;
  };
  expect_error(gguf_imatrix({1, 2, 3}, {1}, 3, "model"),
               "not an importance matrix (general.type is \"model\"");
  {
    GgufWriter w;  // 6 sums for 4 matrices
    w.set_string("general.type", "imatrix");
    const float s[6] = {1, 2, 3, 4, 5, 6}, c[4] = {1, 1, 1, 1};
    w.add_tensor("a.weight.in_sum2", DType::F32, {1, 6}, s, sizeof s);
    w.add_tensor("a.weight.counts", DType::F32, {4, 1}, c, sizeof c);
    expect_error(bytes_of(w.serialize()), "6 sums for 4 counts");
  }
  expect_error(gguf_imatrix({1, -2, 3}, {1}, 3), "in_sum2 value 1 is -2");
  expect_error(gguf_imatrix({1, NAN, 3}, {1}, 3), "value 1 is nan");
  {
    GgufWriter w;  // sums without counts
    w.set_string("general.type", "imatrix");
    const float s[2] = {1, 2};
    w.add_tensor("a.weight.in_sum2", DType::F32, {1, 2}, s, 8);
    expect_error(bytes_of(w.serialize()), "imatrix tensor a.weight.counts is missing");
  }
  {
    GgufWriter w;  // neither NAME.in_sum2 nor NAME.counts
    w.set_string("general.type", "imatrix");
    const float s[2] = {1, 2};
    w.add_tensor("a.weight", DType::F32, {1, 2}, s, 8);
    expect_error(bytes_of(w.serialize()), "unexpected imatrix tensor a.weight");
  }
  Legacy neg;
  neg.i32(-3);
  expect_error(neg.b, "entry count -3");
  Legacy big;
  big.i32(1);
  big.str("w");
  big.i32(1);
  big.i32(1 << 30);  // values the file does not hold
  expect_error(big.b, "has 1073741824 values");
  // Every truncation of a valid legacy file is an Error (or, past the entries, a shorter valid
  // file); none reads past its end (ASan builds check).
  const Legacy l = legacy_imatrix();
  int errors = 0;
  for (size_t n = 0; n < l.b.size(); ++n) {
    const std::vector<uint8_t> cut(l.b.begin(), l.b.begin() + static_cast<long>(n));
    errors += !error_of(cut).empty();
  }
  EXPECT_GE(errors, static_cast<int>(l.b.size()) - 30);
  // And every truncation of a valid GGUF one, but those that cut only the padding after the
  // last tensor (which then read the same).
  const auto g = gguf_imatrix({4, 8, 12, 7, 7, 7}, {4, 0}, 3);
  const auto full = parse_imatrix(g.data(), g.size(), "im").find("blk.0.ffn_up_exps.weight")->values;
  for (size_t n = 0; n < g.size(); ++n) {
    const std::vector<uint8_t> cut(g.begin(), g.begin() + static_cast<long>(n));
    if (!error_of(cut).empty()) continue;
    EXPECT_EQ(parse_imatrix(cut.data(), cut.size(), "im").find("blk.0.ffn_up_exps.weight")->values,
              full)
        << n;
    EXPECT_GE(n, g.size() - 32) << "a cut before the last tensor's padding parsed";
  }
}

}  // namespace
}  // namespace efim
