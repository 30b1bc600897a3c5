// train_gemm: checks, blocking, packing and threading (see train_gemm.h); the micro-kernels
// are in train_gemm_avx2.cpp and below (scalar).
#include "backend/cpu/train_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/train_gemm_kernels.h"
#include "base/error.h"

namespace efim::cpu {
namespace detail {

void train_micro_scalar(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc,
                        int rows, int cols, bool accumulate) {
  float acc[kTrainMR][kTrainNR] = {};
  for (int64_t p = 0; p < kc; ++p)
    for (int i = 0; i < kTrainMR; ++i)
      for (int j = 0; j < kTrainNR; ++j) acc[i][j] += ap[p * kTrainMR + i] * bp[p * kTrainNR + j];
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
}

void train_pack_a_scalar(const float* a, int64_t lda, int rows, int64_t kc, float* ap) {
  for (int r = 0; r < kTrainMR; ++r)
    for (int64_t p = 0; p < kc; ++p) ap[p * kTrainMR + r] = r < rows ? a[r * lda + p] : 0.0f;
}

void train_pack_b_scalar(const float* b, int64_t ldb, int cols, int64_t kc, float* bp) {
  for (int c = 0; c < kTrainNR; ++c)
    for (int64_t p = 0; p < kc; ++p) bp[p * kTrainNR + c] = c < cols ? b[c * ldb + p] : 0.0f;
}

}  // namespace detail

namespace {

using detail::kTrainMR;
using detail::kTrainNR;

// Block sizes: a packed A block (kMC x kKC, 96 KB) and B block (kKC x kNC, 256 KB) stay in the
// 512 KB L2 of a core; one B sliver (kKC x 16, 16 KB) stays in L1 while A slivers pass over it.
constexpr int64_t kMC = 96;   // multiple of kTrainMR
constexpr int64_t kNC = 256;  // multiple of kTrainNR
constexpr int64_t kKC = 256;
// Rows of C per work item: packing a B block costs as much as ~1/16 of its use by 6-row tiles,
// so it is amortised over kItemRows rows (about 1% overhead) while large products still give
// several items per thread.
constexpr int64_t kItemRows = 4 * kMC;
// Smallest items the split makes when it cuts further for balance (packing overheads ~1/48).
constexpr int64_t kMinItemRows = 48, kMinItemCols = 64;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// C cut into mb x nb near-equal items of `rows` x `cols` (multiples of the micro-tile; the last
// row / column of items may be smaller). Equal items matter: a fixed kItemRows x kNC grid gave
// e.g. a 256- and a 128-column item for n = 384, i.e. one thread doing 2/3 of a dW product.
// Below 4 items per thread (dynamic hand-out then evens out a thread slowed by other work) the
// larger item side is cut again, as long as items keep kMinItemRows rows / kMinItemCols columns.
struct ItemGrid {
  int64_t mb, nb, rows, cols;
};

ItemGrid item_grid(int64_t m, int64_t n, int threads) {
  int64_t mb = ceil_div(m, kItemRows), nb = ceil_div(n, kNC);
  while (mb * nb < 4 * int64_t{threads}) {
    const bool can_m = ceil_div(m, mb + 1) >= kMinItemRows;
    const bool can_n = ceil_div(n, nb + 1) >= kMinItemCols;
    if (can_m && (!can_n || ceil_div(m, mb) >= ceil_div(n, nb)))
      ++mb;
    else if (can_n)
      ++nb;
    else
      break;
  }
  const int64_t rows = ceil_div(ceil_div(m, mb), kTrainMR) * kTrainMR;
  const int64_t cols = ceil_div(ceil_div(n, nb), kTrainNR) * kTrainNR;
  return {ceil_div(m, rows), ceil_div(n, cols), rows, cols};
}

// The variant's micro-kernel and transposing packers.
struct Kernel {
  detail::TrainMicroKernel micro;
  detail::TrainPackA pack_a;
  detail::TrainPackB pack_b;
};

// Copies `n` <= `width` floats to d and zero-fills d up to `width` (a fixed-size memcpy compiles
// to vector moves; a variable one is a slow `rep movs`).
template <int width>
inline void copy_padded(float* d, const float* src, int64_t n) {
  if (n == width) {
    std::memcpy(d, src, width * sizeof(float));
    return;
  }
  std::memcpy(d, src, static_cast<size_t>(n) * sizeof(float));
  for (int64_t c = n; c < width; ++c) d[c] = 0.0f;
}

// Packs op(A)[i0 .. i0 + mc, p0 .. p0 + kc) into slivers of 6 rows: ap[s][p][r], zero padded.
void pack_a(const TrainGemm& g, const Kernel& kern, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
            float* ap) {
  if (!g.trans_a) {
    for (int64_t s = 0; s < mc; s += kTrainMR) {  // ascending: see kTrainPackSlack
      const int rows = static_cast<int>(std::min<int64_t>(kTrainMR, mc - s));
      kern.pack_a(g.a + (i0 + s) * g.lda + p0, g.lda, rows, kc, ap + s * kc);
    }
    return;
  }
  // op(A)(i, p) = a[p * lda + i]: row p of `a` holds 6 contiguous values of every sliver. Rows
  // outer, so that the source is read sequentially (slivers outer read one 24-byte piece per
  // row and stalled on memory).
  for (int64_t p = 0; p < kc; ++p) {
    const float* src = g.a + (p0 + p) * g.lda + i0;
    for (int64_t s = 0; s < mc; s += kTrainMR)
      copy_padded<kTrainMR>(ap + s * kc + p * kTrainMR, src + s,
                            std::min<int64_t>(kTrainMR, mc - s));
  }
}

// Packs op(B)[p0 .. p0 + kc, j0 .. j0 + nc) into slivers of 16 columns: bp[s][p][c].
void pack_b(const TrainGemm& g, const Kernel& kern, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
            float* bp) {
  if (g.trans_b) {
    for (int64_t s = 0; s < nc; s += kTrainNR) {
      const int cols = static_cast<int>(std::min<int64_t>(kTrainNR, nc - s));
      kern.pack_b(g.b + (j0 + s) * g.ldb + p0, g.ldb, cols, kc, bp + s * kc);
    }
    return;
  }
  // op(B)(p, j) = b[p * ldb + j]: 16 contiguous values per sliver; rows outer as in pack_a.
  for (int64_t p = 0; p < kc; ++p) {
    const float* src = g.b + (p0 + p) * g.ldb + j0;
    for (int64_t s = 0; s < nc; s += kTrainNR)
      copy_padded<kTrainNR>(bp + s * kc + p * kTrainNR, src + s,
                            std::min<int64_t>(kTrainNR, nc - s));
  }
}

struct Packs {
  std::vector<float> a, b;  // [kMC * kKC], [kKC * kNC]
};

// One work item: C[i_begin .. i_end, j0 .. j0 + nc) over the whole k range. Each k block of B
// is packed once and reused by every kMC-row block of A in the item.
void run_item(const TrainGemm& g, const Kernel& kern, int64_t i_begin, int64_t i_end, int64_t j0,
              int64_t nc, Packs& packs) {
  packs.a.resize(static_cast<size_t>(kMC * kKC + detail::kTrainPackSlack));
  packs.b.resize(static_cast<size_t>(kKC * kNC));
  for (int64_t p0 = 0; p0 < g.k; p0 += kKC) {
    const int64_t kc = std::min(kKC, g.k - p0);
    const bool acc = g.accumulate || p0 > 0;
    pack_b(g, kern, p0, kc, j0, nc, packs.b.data());
    for (int64_t i0 = i_begin; i0 < i_end; i0 += kMC) {
      const int64_t mc = std::min(kMC, i_end - i0);
      pack_a(g, kern, i0, mc, p0, kc, packs.a.data());
      for (int64_t js = 0; js < nc; js += kTrainNR) {
        const int cols = static_cast<int>(std::min<int64_t>(kTrainNR, nc - js));
        for (int64_t is = 0; is < mc; is += kTrainMR) {
          const int rows = static_cast<int>(std::min<int64_t>(kTrainMR, mc - is));
          kern.micro(kc, packs.a.data() + is * kc, packs.b.data() + js * kc,
                     g.c + (i0 + is) * g.ldc + j0 + js, g.ldc, rows, cols, acc);
        }
      }
    }
  }
}

void check(const TrainGemm& g) {
  EFIM_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "train_gemm: negative size m ", g.m, ", n ", g.n,
             ", k ", g.k);
  if (g.m == 0 || g.n == 0) return;
  EFIM_CHECK(g.c && g.ldc >= g.n, "train_gemm: C is null or ldc ", g.ldc, " < n ", g.n);
  if (g.k == 0) return;
  EFIM_CHECK(g.a && g.lda >= (g.trans_a ? g.m : g.k), "train_gemm: A is null or lda ", g.lda,
             " too small (m ", g.m, ", k ", g.k, ", trans_a ", g.trans_a, ")");
  EFIM_CHECK(g.b && g.ldb >= (g.trans_b ? g.k : g.n), "train_gemm: B is null or ldb ", g.ldb,
             " too small (k ", g.k, ", n ", g.n, ", trans_b ", g.trans_b, ")");
}

// Handles the degenerate shapes; returns true when nothing is left to compute.
bool trivial(const TrainGemm& g) {
  if (g.m == 0 || g.n == 0) return true;
  if (g.k > 0) return false;
  if (!g.accumulate)
    for (int64_t i = 0; i < g.m; ++i) std::fill_n(g.c + i * g.ldc, g.n, 0.0f);
  return true;
}

Kernel kernel_for(CpuKernel kernel) {
  EFIM_CHECK(kernel_supported(kernel), "train_gemm: this CPU lacks the ", kernel_name(kernel),
             " kernel");
  if (has_avx2(kernel))
    return {detail::train_micro_avx2, detail::train_pack_a_avx2, detail::train_pack_b_avx2};
  return {detail::train_micro_scalar, detail::train_pack_a_scalar, detail::train_pack_b_scalar};
}

}  // namespace

void train_gemm(ThreadPool& pool, const TrainGemm& g, CpuKernel kernel) {
  check(g);
  const Kernel kern = kernel_for(kernel);
  if (trivial(g)) return;
  const ItemGrid grid = item_grid(g.m, g.n, pool.size());
  const int64_t items = grid.mb * grid.nb;
  const int64_t grain = detail::grain_for(items, g.m * g.n * g.k, pool.size());
  pool.parallel_for(items, grain, [&](int, int64_t it0, int64_t it1) {
    static thread_local Packs packs;
    for (int64_t it = it0; it < it1; ++it) {
      const int64_t i0 = (it % grid.mb) * grid.rows, j0 = (it / grid.mb) * grid.cols;
      run_item(g, kern, i0, std::min(g.m, i0 + grid.rows), j0, std::min(grid.cols, g.n - j0),
               packs);
    }
  });
}

void train_gemm(ThreadPool& pool, const TrainGemm& g) {
  train_gemm(pool, g, active_kernel());
}

void train_gemm_serial(const TrainGemm& g) {
  check(g);
  static const Kernel kern = kernel_for(active_kernel());
  if (trivial(g)) return;
  static thread_local Packs packs;
  for (int64_t j0 = 0; j0 < g.n; j0 += kNC)
    run_item(g, kern, 0, g.m, j0, std::min(kNC, g.n - j0), packs);
}

void train_gemm_reference(const TrainGemm& g) {
  check(g);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const float a = g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
        const float b = g.trans_b ? g.b[j * g.ldb + p] : g.b[p * g.ldb + j];
        s += static_cast<double>(a) * b;
      }
      float& c = g.c[i * g.ldc + j];
      c = static_cast<float>(g.accumulate ? c + s : s);
    }
}

}  // namespace efim::cpu
