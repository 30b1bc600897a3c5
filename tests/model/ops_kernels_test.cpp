// Differential tests of the AVX2 forward-pass ops against their scalar references (ops.h), and
// of flash attention against a direct computation in double.
#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "model/batch.h"
#include "model/ops.h"
#include "model/ops_internal.h"

namespace efim {
namespace {

using cpu::CpuKernel;

void need_avx2() {
  ASSERT_TRUE(cpu::kernel_supported(CpuKernel::Avx2)) << "this test needs an AVX2 + FMA CPU";
}

std::vector<float> normal(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (float& x : v) x = scale * nd(rng);
  return v;
}

// |a - b| <= rel * |b| + abs elementwise; returns the worst violation ratio (<= 1 passes).
double worst_ratio(const std::vector<float>& a, const std::vector<float>& b, double rel,
                   double abs) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::isnan(a[i]) == std::isnan(b[i]) ? 0 : 1e9;
    if (a[i] == b[i]) continue;  // also equal infinities
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) /
                                (rel * std::fabs(static_cast<double>(b[i])) + abs));
  }
  return worst;
}

TEST(OpsAvx2, RmsNormMatchesReference) {
  need_avx2();
  for (int64_t n : {1, 7, 8, 31, 64, 384, 768, 1001}) {
    const auto x = normal(static_cast<size_t>(n), 3, 1), w = normal(static_cast<size_t>(n), 1, 2);
    std::vector<float> a(x.size()), b(x.size());
    ops::rms_norm(x.data(), w.data(), n, 1e-5f, a.data(), CpuKernel::Avx2);
    ops::rms_norm(x.data(), w.data(), n, 1e-5f, b.data(), CpuKernel::Scalar);
    EXPECT_LE(worst_ratio(a, b, 1e-6, 0), 1.0) << "n " << n;
  }
}

TEST(OpsAvx2, AddRmsNormMatchesReference) {
  need_avx2();
  for (int64_t n : {5, 16, 384, 777}) {
    const auto x = normal(static_cast<size_t>(n), 3, 3), d = normal(static_cast<size_t>(n), 1, 4);
    const auto w = normal(static_cast<size_t>(n), 1, 5);
    std::vector<float> xa = x, xb = x, a(x.size()), b(x.size());
    ops::add_rms_norm(xa.data(), d.data(), w.data(), n, 1e-6f, a.data(), CpuKernel::Avx2);
    ops::add_rms_norm(xb.data(), d.data(), w.data(), n, 1e-6f, b.data(), CpuKernel::Scalar);
    EXPECT_EQ(xa, xb) << "the residual sum is exact in both";
    EXPECT_LE(worst_ratio(a, b, 1e-6, 0), 1.0) << "n " << n;
    // and it is the unfused pair
    std::vector<float> xc = x, c(x.size());
    ops::add_inplace(xc.data(), d.data(), n);
    ops::rms_norm(xc.data(), w.data(), n, 1e-6f, c.data(), CpuKernel::Scalar);
    EXPECT_EQ(b, c);
  }
}

TEST(OpsAvx2, SiluMulMatchesReference) {
  need_avx2();
  const int64_t n = 4099;
  auto g = normal(n, 6, 6);
  const auto up = normal(n, 2, 7);
  g[0] = 0;
  g[1] = -0.0f;
  g[2] = 1e-30f;
  std::vector<float> a = g, b = g;
  ops::silu_mul(a.data(), up.data(), n, CpuKernel::Avx2);
  ops::silu_mul(b.data(), up.data(), n, CpuKernel::Scalar);
  EXPECT_LE(worst_ratio(a, b, 1e-6, 1e-37), 1.0);
  // silu actually applied: silu(0) = 0, large z: silu(z) ~ z
  EXPECT_EQ(a[0], 0.0f);
}

TEST(OpsAvx2, SiluMulExtremes) {
  need_avx2();
  std::vector<float> g = {-200, -100, -88.9f, -88.3f, -87, -20, 20, 87, 88.3f, 100, 1e30f, -1e30f,
                          INFINITY, -INFINITY, NAN, 0.5f};
  const std::vector<float> up(g.size(), 1.5f);
  std::vector<float> a = g, b = g;
  ops::silu_mul(a.data(), up.data(), static_cast<int64_t>(g.size()), CpuKernel::Avx2);
  ops::silu_mul(b.data(), up.data(), static_cast<int64_t>(g.size()), CpuKernel::Scalar);
  // exp overflows to inf a little early (z < -88.37), where silu is below 1e-36: absolute slack.
  EXPECT_LE(worst_ratio(a, b, 1e-6, 1e-35), 1.0);
  EXPECT_EQ(a[12], INFINITY);
  EXPECT_TRUE(std::isnan(a[14]));
}

// Both pairings, rows with a stride (fused q|k|v rows), a token sub-range.
TEST(OpsAvx2, RopeMatchesReference) {
  need_avx2();
  for (int64_t hd : {8, 16, 64, 128, 12}) {
    for (RopePairing pairing : {RopePairing::RotateHalf, RopePairing::Interleaved}) {
      const int64_t n_tok = 9, heads = 5, stride = heads * hd + 13;
      std::vector<double> inv_freq(static_cast<size_t>(hd / 2));
      for (size_t i = 0; i < inv_freq.size(); ++i)
        inv_freq[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
      std::vector<int32_t> pos(n_tok);
      for (int64_t t = 0; t < n_tok; ++t) pos[t] = static_cast<int32_t>(t * 37 + 3);
      ops::RopeTable table;
      table.build(inv_freq, pos.data(), n_tok);
      const auto x = normal(static_cast<size_t>(n_tok * stride), 1, 8);
      std::vector<float> a = x, b = x;
      ops::RopeRows rr{a.data(), stride, heads - 1, hd, 2, 8, pairing};
      ops::rope_rows(rr, table, CpuKernel::Avx2);
      rr.x = b.data();
      ops::rope_rows(rr, table, CpuKernel::Scalar);
      EXPECT_LE(worst_ratio(a, b, 1e-6, 1e-6), 1.0) << "hd " << hd;
      // rows outside [2, 8) and the last head of each row are untouched; inside, moved
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t i = 0; i < stride; ++i) {
          const bool inside = t >= 2 && t < 8 && i < (heads - 1) * hd;
          const size_t k = static_cast<size_t>(t * stride + i);
          if (!inside) {
            EXPECT_EQ(a[k], x[k]);
          }
        }
      }
      EXPECT_NE(a[2 * stride + 5], x[2 * stride + 5]);
    }
  }
}

// ---------------------------------------------------------------- attention

struct AttnCase {
  int64_t n_heads, n_kv, hd;
  std::vector<int64_t> ctx_len, new_tokens;
  int threads;
  bool strided = false;  // q/out rows inside wider rows (the fused projection layout)
  DType kv = DType::F32;  // the cache's element type
  int64_t window = 0;     // sliding window (0: full causal attention)
};

struct AttnData {
  std::vector<std::vector<int32_t>> slots;
  std::vector<ops::AttentionSeq> seqs;
  std::vector<int32_t> pos;
  std::vector<float> q, k, v;  // k, v: the values the cache holds, as f32
  std::vector<uint8_t> kb, vb;  // the cache in its element type
  ops::AttentionArgs args;
};

// Sequences with scattered slots; tokens of the step are each sequence's last new_tokens.
void make_case(const AttnCase& c, AttnData& d, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t kvs = c.n_kv * c.hd;
  const int64_t n_slots = std::accumulate(c.ctx_len.begin(), c.ctx_len.end(), int64_t{0});
  std::vector<int32_t> perm(static_cast<size_t>(n_slots));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  d.seqs.assign(c.ctx_len.size(), {});
  int64_t next = 0;
  for (size_t s = 0; s < c.ctx_len.size(); ++s) {
    d.slots.emplace_back(perm.begin() + next, perm.begin() + next + c.ctx_len[s]);
    next += c.ctx_len[s];
    for (int64_t p = c.ctx_len[s] - c.new_tokens[s]; p < c.ctx_len[s]; ++p) {
      d.seqs[s].tokens.push_back(static_cast<int32_t>(d.pos.size()));
      d.pos.push_back(static_cast<int32_t>(p));
    }
  }
  for (size_t s = 0; s < d.seqs.size(); ++s) {
    d.seqs[s].ctx = d.slots[s].data();
    d.seqs[s].n_ctx = c.ctx_len[s];
  }
  const int64_t q_stride = c.n_heads * c.hd + (c.strided ? 2 * kvs : 0);
  d.q = normal(d.pos.size() * static_cast<size_t>(q_stride), 2, seed + 1);
  d.k = normal(static_cast<size_t>(n_slots * kvs), 1, seed + 2);
  d.v = normal(static_cast<size_t>(n_slots * kvs), 1, seed + 3);
  // The cache in c.kv: rows rounded to f16 / quantized to q8_0 as KvCache::store does; the
  // f32 copies become what the cache holds, so every variant has the same exact answer.
  KvCache cache(1, n_slots, kvs, c.kv, c.n_kv);  // head-major, as the model's
  for (int64_t slot = 0; slot < n_slots; ++slot) {
    cache.store(0, slot, &d.k[slot * kvs], &d.v[slot * kvs]);
    cache.load(0, slot, &d.k[slot * kvs], &d.v[slot * kvs]);
  }
  const size_t layer_bytes = static_cast<size_t>(c.n_kv * cache.head_stride());
  d.kb.assign(cache.k(0), cache.k(0) + layer_bytes);
  d.vb.assign(cache.v(0), cache.v(0) + layer_bytes);
  d.args = ops::AttentionArgs{d.q.data(), d.pos.data(), d.kb.data(), d.vb.data(), nullptr,
                              c.n_heads, c.n_kv, c.hd, &d.seqs};
  d.args.kv_type = c.kv;
  d.args.kv_slot_stride = cache.head_bytes();
  d.args.kv_head_stride = cache.head_stride();
  if (c.strided) {
    d.args.q_stride = q_stride;
    d.args.out_stride = q_stride;
  }
  d.args.window = c.window;
}

// Direct attention in double over the same inputs (out rows of q_dim floats, dense): the query
// at position p over keys max(0, p - window + 1) .. p (window 0: 0 .. p).
std::vector<double> naive(const AttnCase& c, const AttnData& d) {
  const int64_t hd = c.hd, kvs = c.n_kv * hd, group = c.n_heads / c.n_kv;
  const int64_t qs = d.args.q_stride ? d.args.q_stride : c.n_heads * hd;
  std::vector<double> out(d.pos.size() * static_cast<size_t>(c.n_heads * hd), 0.0);
  for (const auto& s : d.seqs)
    for (int32_t t : s.tokens)
      for (int64_t h = 0; h < c.n_heads; ++h) {
        const int64_t n = d.pos[t] + 1;
        const int64_t lo = c.window > 0 ? std::max<int64_t>(0, n - c.window) : 0;
        std::vector<double> sc(static_cast<size_t>(n), -1e300);
        double m = -1e300, sum = 0;
        for (int64_t j = lo; j < n; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < hd; ++i)
            dot += static_cast<double>(d.q[t * qs + h * hd + i]) *
                   d.k[s.ctx[j] * kvs + (h / group) * hd + i];
          m = std::max(m, sc[j] = dot / std::sqrt(static_cast<double>(hd)));
        }
        for (double& x : sc) sum += (x = std::exp(x - m));
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < hd; ++i)
            out[t * c.n_heads * hd + h * hd + i] +=
                sc[j] / sum * d.v[s.ctx[j] * kvs + (h / group) * hd + i];
      }
  return out;
}

// The flash kernels: AVX2, and AVX-512 natively where the CPU has it and on SIMDe's emulation
// everywhere.
struct NamedKernel {
  const char* name;
  ops::detail::FlashKernel kernel;
};
std::vector<NamedKernel> flash_kernels() {
  std::vector<NamedKernel> ks = {{"avx2", ops::detail::kFlashAvx2},
                                 {"avx512 (emulated)", ops::detail::kFlashAvx512Emulated}};
  if (cpu::kernel_supported(CpuKernel::Avx512))
    ks.push_back({"avx512", ops::detail::kFlashAvx512});
  return ks;
}

// One attention call (flash with kernel `fk`, or ops::attention(k) when fk is null).
void attend(ThreadPool& pool, const ops::AttentionArgs& a, ops::AttentionScratch& scratch,
            CpuKernel k, const ops::detail::FlashKernel* fk) {
  if (fk) ops::detail::attention_flash(pool, a, scratch, *fk);
  else ops::attention(pool, a, scratch, k);
}

std::vector<float> run_attention(const AttnCase& c, AttnData& d, CpuKernel k,
                                 const ops::detail::FlashKernel* fk = nullptr) {
  const int64_t os = d.args.out_stride ? d.args.out_stride : c.n_heads * c.hd;
  std::vector<float> out(d.pos.size() * static_cast<size_t>(os), -7.0f);
  d.args.out = out.data();
  ThreadPool pool(c.threads);
  ops::AttentionScratch scratch;
  attend(pool, d.args, scratch, k, fk);
  // A second call with the same scratch (reuse across layers) gives the same bits.
  std::vector<float> again(out.size(), -7.0f);
  d.args.out = again.data();
  attend(pool, d.args, scratch, k, fk);
  EXPECT_EQ(out, again);
  // Dense [n, q_dim]; the columns past q_dim of strided rows must be left alone.
  std::vector<float> dense;
  for (size_t t = 0; t < d.pos.size(); ++t)
    for (int64_t i = 0; i < os; ++i) {
      if (i < c.n_heads * c.hd) dense.push_back(out[t * os + i]);
      else EXPECT_EQ(out[t * os + i], -7.0f);
    }
  return dense;
}

// ops::attention's flash path for `k` (AVX2 or AVX-512), each flash kernel through
// attention_flash and the reference, against the direct computation in double.
void check_flash(const AttnCase& c) {
  AttnData d;
  make_case(c, d, 21);
  const std::vector<double> want = naive(c, d);
  auto check = [&](const std::vector<float>& got, const std::string& what) {
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LT(worst, 2e-5) << what << ": heads " << c.n_heads << "/" << c.n_kv << " hd "
                           << c.hd << " kv " << dtype_name(c.kv);
  };
  check(run_attention(c, d, CpuKernel::Avx2), "attention avx2");
  if (cpu::kernel_supported(CpuKernel::Avx512))
    check(run_attention(c, d, CpuKernel::Avx512), "attention avx512");
  if (c.hd % 16 == 0)  // flash shapes; other head_dims take the reference path only
    for (const NamedKernel& fk : flash_kernels())
      check(run_attention(c, d, CpuKernel::Avx2, &fk.kernel), str("kernel ", fk.name));
  check(run_attention(c, d, CpuKernel::Scalar), "reference");
}

TEST(FlashAttention, PrefillGqaMatchesReference) {
  need_avx2();
  check_flash({6, 2, 64, {256}, {256}, 2});          // efim-base-py shape, one-step prefill
  check_flash({12, 4, 64, {300}, {300}, 2, true});   // bench model, fused q|k|v rows
  check_flash({4, 4, 32, {130}, {130}, 1});          // MHA, partial key block
  check_flash({8, 1, 16, {77}, {77}, 2});            // one KV head, 8 heads per row group
}

TEST(FlashAttention, ChunksDecodeAndMixedSequences) {
  need_avx2();
  check_flash({6, 2, 64, {100, 7, 65}, {36, 7, 1}, 2});  // chunk after a prefix, prompt, decode
  check_flash({4, 2, 128, {64, 129}, {1, 1}, 2});        // decode at block edges
  check_flash({2, 1, 48, {200}, {3}, 3});                // hd not a multiple of 32
}

TEST(FlashAttention, LongContextDecodeSplitsKeys) {
  need_avx2();
  check_flash({6, 2, 64, {2048}, {1}, 2});     // keys split across threads, merged
  check_flash({12, 4, 64, {1500}, {1}, 4});    // uneven pieces
  check_flash({4, 1, 64, {700, 900}, {1, 2}, 2});
}

// Sliding windows (starcoder2): rows of one unit whose windows start in different key blocks,
// windows of one key, of a whole block and longer than the context, decode keys split across
// threads with the window starting inside a piece, f16 / q8_0 caches and the reference path.
TEST(FlashAttention, SlidingWindowMatchesReference) {
  need_avx2();
  auto with = [](AttnCase c, int64_t window, DType kv = DType::F32) {
    c.window = window;
    c.kv = kv;
    return c;
  };
  check_flash(with({6, 2, 64, {300}, {300}, 2}, 100));           // prefill, window mid-block
  check_flash(with({12, 4, 64, {300}, {300}, 2, true}, 64));     // a whole key block
  check_flash(with({4, 4, 32, {130}, {130}, 1}, 1));             // each token sees itself only
  check_flash(with({8, 1, 16, {77}, {77}, 2}, 500));             // longer than the context
  check_flash(with({6, 2, 64, {1000, 7, 65}, {36, 7, 1}, 2}, 200));  // chunk, prompt, decode
  check_flash(with({6, 2, 64, {3000}, {1}, 2}, 1500));           // decode split, window inside
  check_flash(with({12, 4, 64, {2100}, {9}, 4}, 700));           // verify-sized step, split
  check_flash(with({4, 1, 64, {700, 900}, {1, 2}, 2}, 333));
  check_flash(with({2, 1, 48, {200}, {3}, 3}, 50));              // hd not a multiple of 32
  check_flash(with({6, 2, 64, {2048}, {600}, 2}, 129));          // long chunk, split by threads
  for (DType kv : {DType::F16, DType::Q8_0}) {
    check_flash(with({6, 2, 64, {256}, {256}, 2}, 70, kv));
    check_flash(with({6, 2, 64, {2048}, {1}, 2}, 1000, kv));
    check_flash(with({8, 1, 256, {170}, {3}, 1}, 65, kv));
  }
  check_flash(with({4, 2, 24, {40}, {40}, 2}, 9, DType::F16));  // the reference path only
}

// Batch invariance: the rows of a speculative verify step (a token and its
// draft, up to 9 tokens) equal, bit for bit, what one-token decode steps at the same positions
// compute, with the keys split across threads or not, direct scores (3 heads per KV head) or
// transposed tiles (4 and 6), at context lengths on both sides of the split positions.
// With a sliding window too (the window's start moves with each token, across key blocks and
// split positions).
void check_verify_rows_bit_for_bit(int64_t window) {
  for (const NamedKernel& fk : flash_kernels())
  for (DType kv : {DType::F16, DType::Q8_0, DType::F32})
    for (const auto& [heads, kvh] : {std::pair{6, 2}, std::pair{12, 2}, std::pair{4, 1}})
      for (int64_t last : {int64_t{300}, int64_t{515}, int64_t{1030}, int64_t{1600}})
        for (int threads : {1, 2, 3}) {
          const int64_t n_tok = 9;  // positions last - 8 .. last
          const AttnCase c{heads, kvh, 64, {last + 1}, {n_tok}, threads, false, kv, window};
          AttnData d;
          make_case(c, d, uint32_t(last + heads));
          const int64_t width = heads * 64;
          std::vector<float> verify(static_cast<size_t>(n_tok * width), -7.0f);
          ThreadPool pool(threads);
          ops::AttentionScratch scratch;
          d.args.out = verify.data();
          ops::detail::attention_flash(pool, d.args, scratch, fk.kernel);
          for (int64_t t = 0; t < n_tok; ++t) {
            std::vector<ops::AttentionSeq> one(1);
            one[0].tokens = {static_cast<int32_t>(t)};
            one[0].ctx = d.slots[0].data();
            one[0].n_ctx = last - (n_tok - 1) + t + 1;
            ops::AttentionArgs a = d.args;
            a.seqs = &one;
            std::vector<float> alone(static_cast<size_t>(n_tok * width), -7.0f);
            a.out = alone.data();
            ops::detail::attention_flash(pool, a, scratch, fk.kernel);
            EXPECT_EQ(std::memcmp(alone.data() + t * width, verify.data() + t * width,
                                  static_cast<size_t>(width) * sizeof(float)),
                      0)
                << fk.name << " " << dtype_name(kv) << " heads " << heads << "/" << kvh
                << " position "
                << one[0].n_ctx - 1 << " threads " << threads << " window " << window;
          }
        }
}

TEST(FlashAttention, VerifyRowsEqualOneTokenDecodeStepsBitForBit) {
  need_avx2();
  check_verify_rows_bit_for_bit(0);
}

TEST(FlashAttention, WindowedVerifyRowsEqualOneTokenDecodeStepsBitForBit) {
  need_avx2();
  check_verify_rows_bit_for_bit(4);    // the window starts in the step's own tokens
  check_verify_rows_bit_for_bit(700);  // ... in an earlier key block, on either side of 512
}

// Batch invariance of the flash kernels (AVX2 and AVX-512, ops_internal.h): the rows of a
// sequence's last 40 tokens computed in one step beside another sequence's prompt chunk and
// decode token, and again in chunks of 7, 16 and 17 tokens alone, with 1, 2 and 3 threads, are the same bit for
// bit; contexts across the split positions (512, 1024), with and without a sliding window.
TEST(FlashAttention, RowsDoNotDependOnTheBatch) {
  for (const NamedKernel& fk : flash_kernels()) {
    for (DType kv : {DType::F16, DType::Q8_0, DType::F32})
      for (const auto& [heads, kvh, hd] :
           {std::tuple{6, 2, 64}, std::tuple{12, 2, 128}, std::tuple{4, 1, 64}})
        for (int64_t window : {int64_t{0}, int64_t{700}}) {
          const int64_t n_tok = 40, len = 1100, width = heads * hd;
          const AttnCase c{heads, kvh, hd, {len, 300, 900}, {n_tok, 50, 1}, 2, false, kv,
                           window};
          AttnData d;
          make_case(c, d, uint32_t(heads + window));
          std::vector<float> together(d.pos.size() * size_t(width), -7.0f);
          {
            ThreadPool pool(2);
            ops::AttentionScratch scratch;
            d.args.out = together.data();
            ops::detail::attention_flash(pool, d.args, scratch, fk.kernel);
          }
          const std::vector<int32_t>& rows = d.seqs[0].tokens;  // rows of q, ascending position
          for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            ops::AttentionScratch scratch;
            std::vector<float> chunked(together.size(), -7.0f);
            size_t t0 = 0;
            for (size_t n : {size_t{7}, size_t{16}, size_t{17}}) {
              std::vector<ops::AttentionSeq> one(1);
              one[0].tokens.assign(rows.begin() + ptrdiff_t(t0), rows.begin() + ptrdiff_t(t0 + n));
              one[0].ctx = d.slots[0].data();
              one[0].n_ctx = d.pos[size_t(one[0].tokens.back())] + 1;
              ops::AttentionArgs a = d.args;
              a.seqs = &one;
              a.out = chunked.data();
              ops::detail::attention_flash(pool, a, scratch, fk.kernel);
              t0 += n;
            }
            for (int32_t r : rows)
              EXPECT_EQ(std::memcmp(chunked.data() + r * width, together.data() + r * width,
                                    size_t(width) * sizeof(float)),
                        0)
                  << fk.name << " " << dtype_name(kv) << " heads " << heads << "/" << kvh
                  << " position " << d.pos[size_t(r)] << " threads " << threads << " window "
                  << window;
          }
        }
  }
}

// f16 and q8_0 caches read in place: flash (AVX2 + F16C) and the reference (which widens the
// unit's rows first) against the direct computation on the values the cache holds.
// A unit that runs through several key cells (AttentionScratch::cells_per_run) writes each
// cell's (m, l, O) as a unit of that cell alone would: the outputs are the same bit for bit
// with runs of 1, 2, 3 and 8 cells and the automatic choice, for decode tokens at depths
// across the cells' ends, a prompt chunk beside them and sliding windows, with every kernel and
// cache type. Fails if a run's later cells carry the sums of the earlier ones or are written at
// the wrong offset.
TEST(FlashAttention, CellRunsDoNotChangeABit) {
  for (const NamedKernel& fk : flash_kernels())
    for (DType kv : {DType::F16, DType::Q8_0, DType::F32})
      for (int64_t window : {int64_t{0}, int64_t{700}}) {
        const AttnCase c{12, 4, 64, {4100, 1537, 2048}, {1, 40, 3}, 2, false, kv, window};
        AttnData d;
        make_case(c, d, uint32_t(17 + window));
        const int64_t width = c.n_heads * c.hd;
        std::vector<float> want;
        for (int64_t run : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}, int64_t{0}}) {
          std::vector<float> out(d.pos.size() * size_t(width), -7.0f);
          ThreadPool pool(2);
          ops::AttentionScratch scratch;
          scratch.cells_per_run = run;
          d.args.out = out.data();
          ops::detail::attention_flash(pool, d.args, scratch, fk.kernel);
          if (want.empty()) {
            want = out;
            continue;
          }
          for (size_t t = 0; t < d.pos.size(); ++t)
            EXPECT_EQ(std::memcmp(out.data() + t * width, want.data() + t * width,
                                  size_t(width) * sizeof(float)),
                      0)
                << fk.name << " " << dtype_name(kv) << " position " << d.pos[t]
                << " cells per run " << run << " window " << window;
        }
        // ... and match the direct computation.
        const std::vector<double> exact = naive(c, d);
        double worst = 0;
        for (size_t i = 0; i < exact.size(); ++i)
          worst = std::max(worst, std::fabs(want[i] - exact[i]));
        EXPECT_LT(worst, 2e-5) << fk.name << " " << dtype_name(kv);
      }
}

TEST(FlashAttention, F16AndQ8_0CachesMatchReference) {
  need_avx2();
  for (DType kv : {DType::F16, DType::Q8_0}) {
    AttnCase prefill{6, 2, 64, {256}, {256}, 2};
    prefill.kv = kv;
    check_flash(prefill);
    AttnCase mixed{6, 2, 64, {100, 7, 65}, {36, 7, 1}, 2, true};
    mixed.kv = kv;
    check_flash(mixed);
    AttnCase decode{4, 2, 128, {64, 129}, {1, 1}, 2};
    decode.kv = kv;
    check_flash(decode);
    AttnCase split{6, 2, 64, {2048}, {1}, 2};  // keys split across threads
    split.kv = kv;
    check_flash(split);
    AttnCase hd256{8, 1, 256, {70}, {3}, 1};  // CodeGemma's head_dim
    hd256.kv = kv;
    check_flash(hd256);
  }
  AttnCase odd{2, 1, 48, {200}, {3}, 3};  // 48: whole f16 rows, not whole q8_0 blocks
  odd.kv = DType::F16;
  check_flash(odd);
  AttnCase ref_only{4, 2, 24, {40}, {40}, 2};  // 24 % 16 != 0: the reference reads the f16 rows
  ref_only.kv = DType::F16;
  check_flash(ref_only);
}

// The f16 / q8_0 cache's error against f32 is that of rounding K and V: small next to the
// output's spread, and q8_0's larger than f16's.
TEST(FlashAttention, F16AndQ8_0CachesStayCloseToF32) {
  need_avx2();
  AttnCase c{6, 2, 64, {300}, {300}, 2};
  AttnData f32;
  make_case(c, f32, 21);
  const std::vector<float> exact = run_attention(c, f32, CpuKernel::Avx2);
  double worst[2] = {0, 0};
  int i = 0;
  for (DType kv : {DType::F16, DType::Q8_0}) {
    c.kv = kv;
    AttnData d;
    make_case(c, d, 21);
    const std::vector<float> got = run_attention(c, d, CpuKernel::Avx2);
    for (size_t j = 0; j < exact.size(); ++j)
      worst[i] = std::max(worst[i], double(std::fabs(got[j] - exact[j])));
    ++i;
  }
  EXPECT_LT(worst[0], 4e-3) << "f16";   // values ~N(0, 1): f16 keeps 11 bits
  EXPECT_LT(worst[1], 6e-2) << "q8_0";  // 8 bits per 32-value block; scores of std ~16 here
  EXPECT_GT(worst[1], worst[0]);
  std::printf("worst |f16 - f32| %.2e, |q8_0 - f32| %.2e\n", worst[0], worst[1]);
}

TEST(FlashAttention, KvTypeTheCacheCannotHoldIsAnError) {
  AttnCase c{2, 1, 48, {8}, {8}, 1};
  EXPECT_THROW(KvCache(1, 4, 48, DType::Q8_0), Error);  // 48 values: not whole blocks
  EXPECT_THROW(KvCache(1, 4, 64, DType::Q4_0), Error);
  AttnData d;
  make_case(c, d, 3);
  d.args.kv_type = DType::Q8_0;  // head_dim 48 is not whole q8_0 blocks
  std::vector<float> out(d.pos.size() * 96);
  d.args.out = out.data();
  ThreadPool pool(1);
  ops::AttentionScratch scratch;
  EXPECT_THROW(ops::attention(pool, d.args, scratch), Error);
  EXPECT_THROW(parse_kv_type("q4_0"), Error);
  EXPECT_EQ(KvCache::row_bytes(DType::F16, 128), 256);
  KvCache heads(2, 10, 128, DType::Q8_0, 2);  // head-major: one head's 64 values, 2 blocks
  EXPECT_EQ(heads.head_bytes(), 68);
  EXPECT_EQ(heads.head_stride(), 680);
  EXPECT_EQ(KvCache::row_bytes(DType::Q8_0, 128), 136);
}

TEST(FlashAttention, HeadDimsWithoutFlashFallBackToReference) {
  need_avx2();
  check_flash({4, 2, 24, {40}, {40}, 2});  // 24 % 16 != 0: the reference runs for Avx2 too
}

}  // namespace
}  // namespace efim
