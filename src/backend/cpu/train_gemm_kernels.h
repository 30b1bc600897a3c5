// Internal interface between train_gemm.cpp (blocking, packing, threads) and its micro-kernels.
#pragma once

#include <cstdint>

namespace efim::cpu::detail {

constexpr int kTrainMR = 6;   // rows of C per micro-tile (one packed A sliver)
constexpr int kTrainNR = 16;  // columns of C per micro-tile (one packed B sliver, 2 ymm)

// C[rows, cols] (+)= sum_p ap[p][0..6) (x) bp[p][0..16) for p < kc, rows <= 6, cols <= 16.
// ap: packed A sliver [kc][6], bp: packed B sliver [kc][16] (zero padded past rows / cols).
using TrainMicroKernel = void (*)(int64_t kc, const float* ap, const float* bp, float* c,
                                  int64_t ldc, int rows, int cols, bool accumulate);

// Packing of one sliver for the transposing layouts (the others are contiguous copies):
// ap[p][r] = a[(i0 + r) * lda + p0 + p] for r < rows (0 beyond), p < kc     (A not transposed)
// bp[p][c] = b[(j0 + c) * ldb + p0 + p] for c < cols (0 beyond), p < kc     (B transposed)
// `a` / `b` point at element (i0, p0) / (j0, p0).
// TrainPackA may write up to kTrainPackSlack floats past the sliver (garbage): callers pack the
// slivers of a block in ascending order (a later sliver overwrites the spill) and give the
// buffer that many floats of slack at its end.
constexpr int kTrainPackSlack = 8;
using TrainPackA = void (*)(const float* a, int64_t lda, int rows, int64_t kc, float* ap);
using TrainPackB = void (*)(const float* b, int64_t ldb, int cols, int64_t kc, float* bp);

void train_pack_a_scalar(const float* a, int64_t lda, int rows, int64_t kc, float* ap);
void train_pack_b_scalar(const float* b, int64_t ldb, int cols, int64_t kc, float* bp);
void train_pack_a_avx2(const float* a, int64_t lda, int rows, int64_t kc, float* ap);
void train_pack_b_avx2(const float* b, int64_t ldb, int cols, int64_t kc, float* bp);

void train_micro_scalar(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc,
                        int rows, int cols, bool accumulate);
void train_micro_avx2(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int rows,
                      int cols, bool accumulate);

}  // namespace efim::cpu::detail
