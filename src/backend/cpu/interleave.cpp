#include "backend/cpu/interleave.h"

#include <cstring>

#include "backend/cpu/kernels.h"
#include "base/error.h"

namespace efim::cpu {

bool can_interleave(const WeightMatrix& w) {
  return w.dtype == DType::Q4_K && w.interleave == 1 && w.rows > 0 &&
         w.rows % kInterleaveRows == 0 && w.cols > 0 && active_kernel() == CpuKernel::Avx512 &&
         detail::avx512_vnni_supported();
}

WeightMatrix interleave_rows8(const WeightMatrix& w, void* out) {
  EFIM_CHECK(w.dtype == DType::Q4_K && w.interleave == 1 && w.rows % kInterleaveRows == 0,
             "interleave_rows8: needs Q4_K rows in the file layout, a multiple of 8 of them; got ",
             dtype_name(w.dtype), " [", w.rows, ", ", w.cols, "] interleave ", int{w.interleave});
  const int64_t ns = w.cols / kQKBlock;
  const auto* src = static_cast<const BlockQ4_K*>(w.data);  // [rows][ns]
  auto* dst = static_cast<BlockQ4_Kx8*>(out);                // [rows / 8][ns]
  for (int64_t g = 0; g < w.rows / kInterleaveRows; ++g)
    for (int64_t s = 0; s < ns; ++s) {
      BlockQ4_Kx8& b = dst[g * ns + s];
      for (int r = 0; r < kInterleaveRows; ++r) {
        const BlockQ4_K& row = src[(g * kInterleaveRows + r) * ns + s];
        b.d[r] = row.d;
        b.dmin[r] = row.dmin;
        for (int i = 0; i < 3; ++i) std::memcpy(&b.scales[i][r], row.scales + 4 * i, 4);
        for (int p = 0; p < 4; ++p)
          for (int q = 0; q < 8; ++q) std::memcpy(b.qs[p][q][r], row.qs + 32 * p + 4 * q, 4);
      }
    }
  WeightMatrix x = w;
  x.data = out;
  x.interleave = kInterleaveRows;
  return x;
}

BlockQ4_K deinterleave_block(const WeightMatrix& w, int64_t r, int64_t s) {
  const int64_t ns = w.cols / kQKBlock;
  const BlockQ4_Kx8& b = static_cast<const BlockQ4_Kx8*>(w.data)[(r / kInterleaveRows) * ns + s];
  const int j = static_cast<int>(r % kInterleaveRows);
  BlockQ4_K row;
  row.d = b.d[j];
  row.dmin = b.dmin[j];
  for (int i = 0; i < 3; ++i) std::memcpy(row.scales + 4 * i, &b.scales[i][j], 4);
  for (int p = 0; p < 4; ++p)
    for (int q = 0; q < 8; ++q) std::memcpy(row.qs + 32 * p + 4 * q, b.qs[p][q][j], 4);
  return row;
}

}  // namespace efim::cpu
