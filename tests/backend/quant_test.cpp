// Quantization formats: hand-computed values, and byte-exact agreement with llama.cpp's ggml
// (the prebuilt libggml-base.so that scripts/deps.sh installs under .deps).
#include "tensor/quant.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant_int.h"
#include "base/error.h"

namespace efim {
namespace {

TEST(Quant, Q8_0RoundsHalfAwayFromZero) {
  // amax = 127 makes d = 1 and 1/d = 1 exactly, so the quants are round(x).
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  x[4] = -126.49f;
  x[5] = 3.2f;
  BlockQ8_0 b;
  quantize_row_q8_0(x.data(), 32, &b);
  EXPECT_EQ(b.d, 0x3C00);  // f16 1.0
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 1);
  EXPECT_EQ(b.qs[4], -126);
  EXPECT_EQ(b.qs[5], 3);
  EXPECT_EQ(b.qs[6], 0);
  std::vector<float> back(32);
  dequantize_row_q8_0(&b, 32, back.data());
  EXPECT_EQ(back[1], 3.0f);
  EXPECT_EQ(back[4], -126.0f);
}

TEST(Quant, Q4_0UsesSignedMaxAndFloorPlusHalf) {
  // Largest magnitude -8 => d = 1, quant = min(15, floor(x + 8.5)).
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;
  x[1] = 7.0f;
  x[2] = 7.4f;
  x[3] = 0.5f;    // floor(9.0) = 9
  x[4] = -0.5f;   // floor(8.0) = 8
  x[16] = 1.49f;  // high nibble of byte 0: floor(9.99) = 9
  x[17] = -7.6f;  // floor(0.9) = 0
  BlockQ4_0 b;
  quantize_row_q4_0(x.data(), 32, &b);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0], 0x90);  // low: 0 (x=-8), high: 9 (x=1.49)
  EXPECT_EQ(b.qs[1], 0x0F);  // low: 15 (x=7), high: 0 (x=-7.6)
  EXPECT_EQ(b.qs[2] & 0x0F, 15);
  EXPECT_EQ(b.qs[3] & 0x0F, 9);
  EXPECT_EQ(b.qs[4] & 0x0F, 8);
  EXPECT_EQ(b.qs[5] & 0x0F, 8);  // zeros map to 8
  std::vector<float> back(32);
  dequantize_row_q4_0(&b, 32, back.data());
  EXPECT_EQ(back[0], -8.0f);
  EXPECT_EQ(back[1], 7.0f);
  EXPECT_EQ(back[16], 1.0f);
}

TEST(Quant, Q4_0PositiveMaxGivesNegativeScaleAndClamps) {
  std::vector<float> x(32, 0.0f);
  x[0] = 8.0f;   // first of the tied magnitudes: d = 8 / -8 = -1
  x[1] = -8.0f;  // -8 * -1 + 8.5 = 16.5 -> clamped to 15
  BlockQ4_0 b;
  quantize_row_q4_0(x.data(), 32, &b);
  EXPECT_EQ(b.d, 0xBC00);  // f16 -1.0
  EXPECT_EQ(b.qs[0] & 0x0F, 0);
  EXPECT_EQ(b.qs[1] & 0x0F, 15);
}

TEST(Quant, ZeroBlocksHaveZeroScale) {
  std::vector<float> x(64, 0.0f);
  auto q8 = quantize(x.data(), 64, DType::Q8_0);
  auto q4 = quantize(x.data(), 64, DType::Q4_0);
  std::vector<float> back(64, 1.0f);
  dequantize(q8.data(), 64, DType::Q8_0, back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
  dequantize(q4.data(), 64, DType::Q4_0, back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

TEST(Quant, Q4_KDequantizesHandBuiltBlock) {
  BlockQ4_K b{};
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  const uint8_t scales[12] = {1 | 0x40, 2, 3, 4, 5 | 0x80, 6, 7, 8, 0x93, 0, 0, 0};
  std::memcpy(b.scales, scales, 12);
  for (int j = 0; j < 128; ++j) b.qs[j] = static_cast<uint8_t>((j % 16) | ((15 - j % 16) << 4));
  uint8_t sc, mn;
  q4k_scale_min(b.scales, 0, &sc, &mn);
  EXPECT_EQ(sc, 1);
  EXPECT_EQ(mn, 5);
  q4k_scale_min(b.scales, 4, &sc, &mn);
  EXPECT_EQ(sc, 19);  // low 4 bits 3 from byte 8, top bits 01 from byte 0
  EXPECT_EQ(mn, 41);  // low 4 bits 9 from byte 8, top bits 10 from byte 4
  std::vector<float> y(256);
  dequantize_row_q4_k(&b, 256, y.data());
  EXPECT_EQ(y[0], -2.5f);     // sub-block 0: 1*0 - 0.5*5
  EXPECT_EQ(y[5], 2.5f);      // 1*5 - 2.5
  EXPECT_EQ(y[32], 27.0f);    // sub-block 1 (high nibbles): 2*15 - 0.5*6
  EXPECT_EQ(y[128], -20.5f);  // sub-block 4: 19*0 - 0.5*41
  EXPECT_EQ(y[135], 112.5f);  // 19*7 - 20.5
  EXPECT_EQ(y[160], 0.0f);    // sub-block 5: scale 0, min 0
}

TEST(Quant, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<float> x(48, 1.0f);
  EXPECT_THROW(quantize(x.data(), 48, DType::Q8_0), Error);
  EXPECT_THROW(quantize(x.data(), 32, DType::Q4_K), Error);
  EXPECT_THROW(quantize(x.data(), 32, DType::I8), Error);
  std::vector<uint8_t> bytes(200);
  std::vector<float> out(256);
  EXPECT_THROW(dequantize(bytes.data(), 100, DType::Q4_K, out.data()), Error);
  try {
    quantize(x.data(), 48, DType::Q4_0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("48"), std::string::npos) << e.what();
  }
}

TEST(Quant, F16AndBf16RoundTrip) {
  std::vector<float> x = {1.0f, -2.5f, 0.333333f, 65504.0f, 1e-3f, 0.0f, -0.0f, 3.0e38f};
  std::vector<float> back(x.size());
  auto h = quantize(x.data(), static_cast<int64_t>(x.size()), DType::F16);
  dequantize(h.data(), static_cast<int64_t>(x.size()), DType::F16, back.data());
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) * 1e-3f);
  auto b = quantize(x.data(), static_cast<int64_t>(x.size()), DType::BF16);
  dequantize(b.data(), static_cast<int64_t>(x.size()), DType::BF16, back.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) * 8e-3f);
}

// ---- llama.cpp oracle ----

constexpr int kGgmlQ4_0 = 2, kGgmlQ8_0 = 8, kGgmlQ4_K = 12;  // enum ggml_type

struct Ggml {
  using QuantizeChunk = size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t,
                                   const float*);
  using Dequantize = void (*)(const void*, float*, int64_t);
  void* lib = nullptr;
  QuantizeChunk quantize_chunk = nullptr;
  Dequantize dq_q8_0 = nullptr, dq_q4_0 = nullptr, dq_q4_k = nullptr;
};

// Loads the oracle or fails the calling test (never skips: scripts/deps.sh installs it).
const Ggml* load_ggml() {
  static Ggml g;
  if (g.lib != nullptr) return &g;
  const std::string path = std::string(EFIM_SOURCE_DIR) +
                           "/.deps/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/"
                           "libggml-base.so";
  g.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (g.lib == nullptr) {
    ADD_FAILURE() << "llama.cpp oracle missing (run scripts/deps.sh): " << dlerror();
    return nullptr;
  }
  g.quantize_chunk = reinterpret_cast<Ggml::QuantizeChunk>(dlsym(g.lib, "ggml_quantize_chunk"));
  g.dq_q8_0 = reinterpret_cast<Ggml::Dequantize>(dlsym(g.lib, "dequantize_row_q8_0"));
  g.dq_q4_0 = reinterpret_cast<Ggml::Dequantize>(dlsym(g.lib, "dequantize_row_q4_0"));
  g.dq_q4_k = reinterpret_cast<Ggml::Dequantize>(dlsym(g.lib, "dequantize_row_q4_K"));
  if (!g.quantize_chunk || !g.dq_q8_0 || !g.dq_q4_0 || !g.dq_q4_k) {
    ADD_FAILURE() << "llama.cpp oracle lacks the quantization symbols";
    return nullptr;
  }
  return &g;
}

// Rows of test data covering the cases that stress rounding: gaussian, ties at .5 after
// scaling, a zero block, a block whose largest magnitude is positive, tiny values.
std::vector<float> oracle_data(int64_t rows, int64_t cols) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (auto& v : x) v = normal(rng);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j - 16) * 0.5f;
  for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;
  x[70] = 9.0f;
  for (int j = 96; j < 128; ++j) x[static_cast<size_t>(j)] *= 1e-6f;
  return x;
}

TEST(QuantOracle, Q8_0AndQ4_0MatchGgmlByteForByte) {
  const Ggml* g = load_ggml();
  ASSERT_NE(g, nullptr);
  const int64_t rows = 8, cols = 1024;
  const auto x = oracle_data(rows, cols);
  for (auto [ours, theirs] :
       {std::pair{DType::Q8_0, kGgmlQ8_0}, std::pair{DType::Q4_0, kGgmlQ4_0}}) {
    const auto mine = quantize(x.data(), rows * cols, ours);
    std::vector<uint8_t> ref(mine.size());
    const size_t written = g->quantize_chunk(theirs, x.data(), ref.data(), 0, rows, cols, nullptr);
    ASSERT_EQ(written, ref.size()) << dtype_name(ours);
    size_t mismatches = 0;
    for (size_t i = 0; i < ref.size(); ++i) mismatches += mine[i] != ref[i];
    EXPECT_EQ(mismatches, 0u) << dtype_name(ours);
    // Dequantization agrees exactly too.
    std::vector<float> a(x.size()), b(x.size());
    dequantize(mine.data(), rows * cols, ours, a.data());
    (ours == DType::Q8_0 ? g->dq_q8_0 : g->dq_q4_0)(ref.data(), b.data(), rows * cols);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << dtype_name(ours);
  }
}

TEST(QuantOracle, Q4_KDequantizeMatchesGgml) {
  const Ggml* g = load_ggml();
  ASSERT_NE(g, nullptr);
  const int64_t rows = 4, cols = 1024;
  const auto x = oracle_data(rows, cols);
  std::vector<uint8_t> blocks(dtype_row_bytes(DType::Q4_K, rows * cols));
  ASSERT_EQ(g->quantize_chunk(kGgmlQ4_K, x.data(), blocks.data(), 0, rows, cols, nullptr),
            blocks.size());
  std::vector<float> a(x.size()), b(x.size());
  dequantize(blocks.data(), rows * cols, DType::Q4_K, a.data());
  g->dq_q4_k(blocks.data(), b.data(), rows * cols);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  // And it is a 4-bit approximation of the input (sanity of the whole round trip).
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (a[i] - x[i]) * (a[i] - x[i]);
    norm += x[i] * x[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 0.15);
}

// Every other block type llama.cpp's quantizer writes: ggml quantizes (its reference
// quantizers, no importance matrix), and efim's dequantizer must give ggml's floats bit for bit.
TEST(QuantOracle, EveryBlockTypeDequantizesAsGgml) {
  const Ggml* g = load_ggml();
  ASSERT_NE(g, nullptr);
  struct Case {
    DType ours;
    int ggml_id;
    const char* dequantizer;
    double max_rel_rms;  // of the round trip: a sanity bound for the type's bits per weight
  };
  const Case cases[] = {
      {DType::Q4_1, 3, "dequantize_row_q4_1", 0.12},   {DType::Q5_0, 6, "dequantize_row_q5_0", 0.06},
      {DType::Q5_1, 7, "dequantize_row_q5_1", 0.06},   {DType::Q2_K, 10, "dequantize_row_q2_K", 0.45},
      {DType::Q3_K, 11, "dequantize_row_q3_K", 0.25},  {DType::Q5_K, 13, "dequantize_row_q5_K", 0.06},
      {DType::Q6_K, 14, "dequantize_row_q6_K", 0.03},  {DType::IQ4_NL, 20, "dequantize_row_iq4_nl", 0.12},
      {DType::IQ4_XS, 23, "dequantize_row_iq4_xs", 0.12},
  };
  const int64_t rows = 4, cols = 1024;
  const auto x = oracle_data(rows, cols);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.ours)));
    auto dq = reinterpret_cast<Ggml::Dequantize>(dlsym(g->lib, c.dequantizer));
    ASSERT_NE(dq, nullptr) << c.dequantizer;
    std::vector<uint8_t> blocks(dtype_row_bytes(c.ours, rows * cols));
    ASSERT_EQ(g->quantize_chunk(c.ggml_id, x.data(), blocks.data(), 0, rows, cols, nullptr),
              blocks.size());
    std::vector<float> a(x.size()), b(x.size());
    dequantize(blocks.data(), rows * cols, c.ours, a.data());
    dq(blocks.data(), b.data(), rows * cols);
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "first values " << a[0] << " vs " << b[0];
    double err = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (a[i] - x[i]) * (a[i] - x[i]);
      norm += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(err / norm), c.max_rel_rms);
  }
}

// efim's own quantizers: Q4_1, Q5_0, Q5_1 byte for byte as ggml's reference quantizers; the
// K-quants and IQ4_NL / IQ4_XS (searches of efim's own) with bytes that ggml dequantizes to
// efim's values and an error within 3% of ggml's quantizer on the same data.
TEST(QuantOracle, OwnQuantizersMatchOrRivalGgml) {
  const Ggml* g = load_ggml();
  ASSERT_NE(g, nullptr);
  const int64_t rows = 8, cols = 1024;
  auto x = oracle_data(rows, cols);
  for (auto [t, id] : {std::pair{DType::Q4_1, 3}, std::pair{DType::Q5_0, 6},
                       std::pair{DType::Q5_1, 7}}) {
    const auto mine = quantize(x.data(), rows * cols, t);
    std::vector<uint8_t> ref(mine.size());
    ASSERT_EQ(g->quantize_chunk(id, x.data(), ref.data(), 0, rows, cols, nullptr), ref.size());
    size_t differ = 0;
    for (size_t i = 0; i < ref.size(); ++i) differ += mine[i] != ref[i];
    EXPECT_EQ(differ, 0u) << dtype_name(t);
  }
  struct K {
    DType t;
    int id;
    const char* dequantizer;
  };
  for (const K& k : {K{DType::Q4_K, 12, "dequantize_row_q4_K"}, K{DType::Q5_K, 13, "dequantize_row_q5_K"},
                     K{DType::Q6_K, 14, "dequantize_row_q6_K"}, K{DType::Q3_K, 11, "dequantize_row_q3_K"},
                     K{DType::Q2_K, 10, "dequantize_row_q2_K"}, K{DType::IQ4_NL, 20, "dequantize_row_iq4_nl"},
                     K{DType::IQ4_XS, 23, "dequantize_row_iq4_xs"}}) {
    SCOPED_TRACE(std::string(dtype_name(k.t)));
    auto dq = reinterpret_cast<Ggml::Dequantize>(dlsym(g->lib, k.dequantizer));
    ASSERT_NE(dq, nullptr);
    const auto mine = quantize(x.data(), rows * cols, k.t);
    std::vector<uint8_t> ref(mine.size());
    ASSERT_EQ(g->quantize_chunk(k.id, x.data(), ref.data(), 0, rows, cols, nullptr), ref.size());
    std::vector<float> ours(x.size()), theirs_of_ours(x.size()), theirs(x.size());
    dequantize(mine.data(), rows * cols, k.t, ours.data());
    dq(mine.data(), theirs_of_ours.data(), rows * cols);
    EXPECT_EQ(std::memcmp(ours.data(), theirs_of_ours.data(), ours.size() * sizeof(float)), 0);
    dq(ref.data(), theirs.data(), rows * cols);
    double e_ours = 0, e_ggml = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      e_ours += (ours[i] - x[i]) * (ours[i] - x[i]);
      e_ggml += (theirs[i] - x[i]) * (theirs[i] - x[i]);
    }
    std::printf("  %s rms error: efim %.5f, ggml %.5f (ratio %.3f)\n",
                std::string(dtype_name(k.t)).c_str(), std::sqrt(e_ours / x.size()),
                std::sqrt(e_ggml / x.size()), std::sqrt(e_ours / e_ggml));
    EXPECT_LT(std::sqrt(e_ours / e_ggml), 1.03);
  }
}

// An importance matrix (one weight per column, llama-imatrix's mean squared activation): every
// quantized type but Q8_0 fits its scales to the importance-weighted error sum_j imp_j (x - q)^2.
// On columns whose importance spans e^(+-3), that error must drop below efim's own quantization
// without importance, and stay within 10% of ggml's quantizer given the same importance (the
// independent reference); only the ratios of importances matter, and bad importance is refused.
TEST(QuantOracle, ImportanceWeightedQuantizersRivalGgml) {
  const Ggml* g = load_ggml();
  ASSERT_NE(g, nullptr);
  const int64_t rows = 16, cols = 1024;
  const auto x = oracle_data(rows, cols);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> imp(static_cast<size_t>(cols));
  for (float& v : imp) v = std::exp(1.5f * normal(rng));
  auto weighted_error = [&](const std::vector<uint8_t>& q, DType t) {
    std::vector<float> y(x.size());
    dequantize(q.data(), rows * cols, t, y.data());
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i)
      e += imp[i % static_cast<size_t>(cols)] * double(y[i] - x[i]) * double(y[i] - x[i]);
    return e;
  };
  for (auto [t, id] : {std::pair{DType::Q4_0, 2}, {DType::Q4_1, 3}, {DType::Q5_0, 6},
                       {DType::Q5_1, 7}, {DType::Q2_K, 10}, {DType::Q3_K, 11}, {DType::Q4_K, 12},
                       {DType::Q5_K, 13}, {DType::Q6_K, 14}, {DType::IQ4_NL, 20},
                       {DType::IQ4_XS, 23}}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const auto plain = quantize(x.data(), rows * cols, t);
    const auto weighted = quantize(x.data(), rows * cols, t, imp);
    std::vector<uint8_t> ggml_w(plain.size());
    ASSERT_EQ(g->quantize_chunk(id, x.data(), ggml_w.data(), 0, rows, cols, imp.data()),
              ggml_w.size());
    const double e_plain = weighted_error(plain, t), e_w = weighted_error(weighted, t),
                 e_ggml = weighted_error(ggml_w, t);
    std::printf("  %-6s importance-weighted error: efim %.4g without / %.4g with, ggml with %.4g "
                "(efim / ggml %.3f)\n",
                std::string(dtype_name(t)).c_str(), e_plain, e_w, e_ggml, e_w / e_ggml);
    EXPECT_LT(e_w, 0.97 * e_plain);
    EXPECT_LT(e_w, 1.10 * e_ggml);
    // Only the ratios of importances matter.
    const std::vector<float> ones(static_cast<size_t>(cols), 1.0f), fives(ones.size(), 5.0f);
    EXPECT_TRUE(quantize(x.data(), rows * cols, t, ones) == quantize(x.data(), rows * cols, t, fives));
  }
  EXPECT_TRUE(quantize(x.data(), rows * cols, DType::Q8_0, imp) ==
              quantize(x.data(), rows * cols, DType::Q8_0));  // as llama.cpp: no use for it
  std::vector<float> bad = imp;
  bad[5] = -1.0f;
  EXPECT_THROW(quantize(x.data(), rows * cols, DType::Q4_K, bad), Error);
  EXPECT_THROW(quantize(x.data(), rows * cols, DType::Q4_K, std::span(imp).first(100)), Error);
}

// The super-block kernels quantize activations exactly as ggml's Q8_K (the quantizer its x86
// CPU backend runs), so K-quant products differ from llama.cpp's only in summation order.
TEST(QuantOracle, SuperBlockActivationsEqualGgmlQ8K) {
  const Ggml* g = load_ggml();
  ASSERT_NE(g, nullptr);
  using Q8K = void (*)(const float*, void*, int64_t);
  auto q8k = reinterpret_cast<Q8K>(dlsym(g->lib, "quantize_row_q8_K_ref"));
  ASSERT_NE(q8k, nullptr);
  const int64_t rows = 4, cols = 1024;
  auto x = oracle_data(rows, cols);
  for (int j = 256; j < 512; ++j) x[static_cast<size_t>(j)] = 0.0f;  // a zero super-block
  x[600] = -40.0f;                                                  // negative extreme
  x[700] = 3.0f, x[701] = -3.0f;  // a tie in magnitude: the first one sets the sign
  for (int j = 768; j < 1024; ++j) x[static_cast<size_t>(j)] = j == 700 ? 0.0f : 0.01f * (j % 5);
  cpu::QuantizedRowsK a;
  a.resize(rows, cols);
  for (int64_t i = 0; i < rows; ++i) cpu::quantize_row_k_scalar(x.data(), i, a);
  struct BlockQ8K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
  };
  static_assert(sizeof(BlockQ8K) == 292);
  std::vector<BlockQ8K> ref(static_cast<size_t>(rows * cols / 256));
  q8k(x.data(), ref.data(), rows * cols);
  for (size_t s = 0; s < ref.size(); ++s) {
    SCOPED_TRACE(s);
    EXPECT_EQ(std::memcmp(&ref[s].d, &a.d[s], 4), 0) << ref[s].d << " vs " << a.d[s];
    EXPECT_EQ(std::memcmp(ref[s].qs, a.q.data() + 256 * s, 256), 0);
    EXPECT_EQ(std::memcmp(ref[s].bsums, a.bsum.data() + 16 * s, 32), 0);
  }
}

}  // namespace
}  // namespace efim
