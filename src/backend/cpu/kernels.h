// Internal interface between the matmul dispatcher and its kernel variants.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/matmul.h"
#include "tensor/quant.h"

namespace efim::cpu {
struct QuantizedRowsK;  // quant_int.h
}  // namespace efim::cpu

namespace efim::cpu::detail {

// Activations quantized for the integer kernels, one Q8_0 block per 32 values of a row:
// x[i][32b + j] ~= d[i][b] * q[i][32b + j], d rounded to f16 as in the Q8_0 format (what
// llama.cpp multiplies Q8_0 and Q4_0 weights with), held as f32; the quant sum is kept for
// Q4_0's -8 offset.
struct QuantizedRows {
  int64_t m = 0, k = 0, nb = 0;  // nb = k / 32 blocks per row
  std::vector<int8_t> q;         // [m][k]  quants in [-127, 127], rounded to nearest even
  std::vector<float> d;          // [m][nb] scales f16(amax / 127)
  std::vector<int32_t> sum;      // [m][nb] sum of the block's 32 quants
  std::vector<float> s;          // [m][nb] f16(d * sum) (ggml's Q8_1), by the ggml quantizer only

  void resize(int64_t rows, int64_t cols);
};

// Activations for the int8 kernels (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) exactly as ggml's x86
// quantize_row_q8_0 / quantize_row_q8_1 (what llama.cpp multiplies those weights with):
// d = amax / 127 rounded to f16, q = round(x * (127 / amax)) to nearest even, s = f16(d * sum q)
// with the unrounded d. Row i of x into row i of out (already sized): d holds the f16 value as
// f32, sum and s are filled. The two versions write identical bytes.
void quantize_row_q8_ggml_scalar(const float* x, int64_t i, QuantizedRows& out);
void quantize_row_q8_ggml_avx2(const float* x, int64_t i, QuantizedRows& out);

// Kernel bodies; shapes as in matmul, already validated, m > 0, rows > 0, cols > 0.
void matmul_scalar(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y);
// F32, F16, BF16 (and any other dtype through dequantize_row): f32 FMA.
void matmul_float_avx2(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                       float* y);
// Q8_0 and Q4_0: int8 dot products on quantized activations.
void matmul_quant_avx2(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                       float* y);
// Q2_K..Q6_K, IQ4_XS (against Q8_K activations) and Q4_1, Q5_0, Q5_1, IQ4_NL (against int8
// blocks of 32): int8 dot products in the integer forms of quant_int.h.
void matmul_blocks_avx2(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                        float* y);
// Q3_K, Q5_K, Q6_K and IQ4_XS on 512-bit registers (AVX-512F, BW and VNNI), 8 rows of x per
// pass; the other block types through matmul_blocks_avx2 (measured no faster on 512 bits).
void matmul_blocks_avx512(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                          float* y);
// Q2_K..Q6_K and IQ4_XS GEMM on panels of 16 weight rows unpacked to int8 once and reused by
// every row of x (VNNI dpbusd, one scale multiply per sub-block); matmul_blocks_avx512 routes products of at
// least kPanelMinRows rows of x here. It also computes those types interleaved (interleave.h)
// at any m: below kPanelMinRows rows of x by the 8-row GEMV of that layout, above by panels
// packed from it.
// y[i][r] at y + i * ldy + r (ldy >= W.rows). Interleaved W: its whole groups of 8 rows only.
void matmul_panel_avx512(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                         float* y, int64_t ldy);
void matmul_panel_avx512_emulated(ThreadPool& pool, const float* x, int64_t m,
                                  const WeightMatrix& w, float* y, int64_t ldy);
// GEMV (m < kPanelMinRows) on interleaved Q3_K and Q2_K (whole groups of 8 rows), against their
// activations quantized to Q8_K (matmul_q23x8_avx512.cpp); matmul_panel_avx512 routes them here.
void x8_gemv_q23_avx512(ThreadPool& pool, const QuantizedRowsK& a, const WeightMatrix& w,
                        float* y, int64_t ldy);
void x8_gemv_q23_avx512_emulated(ThreadPool& pool, const QuantizedRowsK& a,
                                 const WeightMatrix& w, float* y, int64_t ldy);
// Interleaved Q8_0, Q4_0 and IQ4_NL (interleave.h) on AVX-512 VNNI, any m: the 8-row GEMV
// below kPanelMinRows rows of x, panels of 16 rows above (matmul_b32x8_avx512.cpp). Whole
// groups of 8 rows only; y[i][r] at y + i * ldy + r (ldy >= W.rows).
void matmul_b32x8_avx512(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                         float* y, int64_t ldy);
void matmul_b32x8_avx512_emulated(ThreadPool& pool, const float* x, int64_t m,
                                  const WeightMatrix& w, float* y, int64_t ldy);
// Interleaved Q4_K / Q5_K / Q6_K / Q8_0 / Q4_0 / IQ4_NL (interleave.h) on AVX2, any m: 8 weight
// rows per maddubs, up to 4 rows of x per pass, each row of x summed the same way at every m
// (matmul_interleaved_avx2.cpp). Whole groups of 8 rows only; y[i][r] at
// y + i * ldy + r (ldy >= W.rows).
void matmul_interleaved_avx2(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                             float* y, int64_t ldy);
inline bool is_panel_type(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K || t == DType::IQ4_XS;
}
constexpr int64_t kPanelMinRows = 16;
// Whether this CPU runs matmul_blocks_avx512 (AVX-512 and VNNI).
bool avx512_vnni_supported();
// Whether variant k computes the block types with the VNNI kernels (matmul_blocks_avx512 and
// the panel GEMM, and the interleaved layouts).
inline bool vnni_kernels_run(CpuKernel k) {
  return k == CpuKernel::Avx512 && avx512_vnni_supported();
}
// Whether matmul_blocks_avx2 (and the scalar kernel's integer path for the same types) takes t.
bool is_block_kernel_type(DType t);
// The same two kernels on 512-bit registers (AVX-512F + AVX-512BW).
void matmul_float_avx512(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                         float* y);
void matmul_quant_avx512(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                         float* y);
// The sources of the AVX-512 kernels compiled once more on SIMDe's portable emulation of
// the intrinsics (library efim_backend_cpu_avx512_emulated, test builds only), so that their
// differential tests run on CPUs without AVX-512. They call the AVX2 quantizer: AVX2 CPU only.
void matmul_float_avx512_emulated(ThreadPool& pool, const float* x, int64_t m,
                                  const WeightMatrix& w, float* y);
void matmul_quant_avx512_emulated(ThreadPool& pool, const float* x, int64_t m,
                                  const WeightMatrix& w, float* y);
void matmul_blocks_avx512_emulated(ThreadPool& pool, const float* x, int64_t m,
                                   const WeightMatrix& w, float* y);

// Element k of a float weight row (F32, F16 or BF16) in f32: the k tails of the SIMD loops.
template <DType T>
inline float load_weight(const uint8_t* row, int64_t k) {
  if constexpr (T == DType::F32) {
    float f;
    std::memcpy(&f, row + 4 * k, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * k, 2);
    return T == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

// Start of row r of W.
inline const uint8_t* weight_row(const WeightMatrix& w, int64_t r) {
  return static_cast<const uint8_t*>(w.data) +
         static_cast<uint64_t>(r) * dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
}

// Chunk size for parallel_for over `units` work units: about 8 chunks per thread so that
// dynamic hand-out balances threads slowed by other work, never below `min_grain`.
inline int64_t balanced_grain(int64_t units, int threads, int64_t min_grain = 1) {
  int64_t g = units / (8 * static_cast<int64_t>(threads));
  return g < min_grain ? min_grain : g;
}

// Products smaller than this many multiply-adds run on the calling thread: waking a sleeping
// pool costs ~15 us (measured, 2 threads), more than such a product takes on one core even when
// its weights come from DRAM (128K bf16 weights = 256 KB, ~25 us at 10 GB/s per core). With the
// spinning pool a hand-off is under 1 us, but 16K instead of 128K measured no decode gain.
constexpr int64_t kSerialMacs = 128 * 1024;

// balanced_grain, or all units in one chunk (run inline) when the whole product is small.
inline int64_t grain_for(int64_t units, int64_t macs, int threads, int64_t min_grain = 1) {
  return macs < kSerialMacs ? units : balanced_grain(units, threads, min_grain);
}

// x [m][cols] quantized for an integer kernel by QuantizeRow (row i of x into row i of the
// buffer), rows in parallel (a serial pass would cost ~5% of a prefill GEMM on 2 threads), into
// a buffer of the calling thread reused across calls (no allocation per token).
template <class Acts, void (*QuantizeRow)(const float*, int64_t, Acts&)>
const Acts& quantize_activations(ThreadPool& pool, const float* x, int64_t m, int64_t cols) {
  static thread_local Acts buffer;
  Acts& acts = buffer;  // the workers must see this thread's instance, not theirs
  acts.resize(m, cols);
  pool.parallel_for(m, grain_for(m, m * cols * 8, pool.size(), 4),
                    [&](int, int64_t i0, int64_t i1) {
                      for (int64_t i = i0; i < i1; ++i) QuantizeRow(x, i, acts);
                    });
  return acts;
}

// How a GEMM is cut into work items: panels of `nr` weight rows times blocks of m_block x rows
// (a multiple of mr). With few panels m is split too, so every thread gets several items.
// Item it covers panel it / m_blocks and x rows [(it % m_blocks) * m_block, +m_block).
struct GemmSplit {
  int64_t panels, m_blocks, m_block;
  int64_t items() const { return panels * m_blocks; }
};

inline GemmSplit split_gemm(int64_t m, int64_t n, int mr, int nr, int threads) {
  const int64_t panels = (n + nr - 1) / nr;
  const int64_t want_items = 4 * static_cast<int64_t>(threads);
  int64_t m_blocks = std::min((want_items + panels - 1) / panels, (m + mr - 1) / mr);
  m_blocks = std::max<int64_t>(1, m_blocks);
  const int64_t m_block = ((m + m_blocks - 1) / m_blocks + mr - 1) / mr * mr;
  return GemmSplit{panels, (m + m_block - 1) / m_block, m_block};
}

}  // namespace efim::cpu::detail
