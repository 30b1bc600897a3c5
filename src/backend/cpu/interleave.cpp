#include "backend/cpu/interleave.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include <vector>

namespace efim::cpu {

namespace {

// n bytes between the interleaved block and a file block: file -> interleaved when to_x8.
struct Mover {
  bool to_x8;
  void operator()(void* x8, void* file, size_t n) const {
    to_x8 ? std::memcpy(x8, file, n) : std::memcpy(file, x8, n);
  }
};

// Copies between one super-block of 8 interleaved rows and the file's blocks of those rows;
// to_x8: file -> interleaved.
void copy_block(BlockQ4_Kx8& b, BlockQ4_K& row, int r, bool to_x8) {
  const Mover mv{to_x8};
  mv(&b.d[r], &row.d, 2);
  mv(&b.dmin[r], &row.dmin, 2);
  for (int i = 0; i < 3; ++i) mv(&b.scales[i][r], row.scales + 4 * i, 4);
  for (int p = 0; p < 4; ++p)
    for (int g = 0; g < 8; ++g) mv(b.qs[p][g][r], row.qs + 32 * p + 4 * g, 4);
}

void copy_block(BlockQ5_Kx8& b, BlockQ5_K& row, int r, bool to_x8) {
  const Mover mv{to_x8};
  mv(&b.d[r], &row.d, 2);
  mv(&b.dmin[r], &row.dmin, 2);
  for (int i = 0; i < 3; ++i) mv(&b.scales[i][r], row.scales + 4 * i, 4);
  for (int g = 0; g < 8; ++g) mv(b.qh[g][r], row.qh + 4 * g, 4);
  for (int p = 0; p < 4; ++p)
    for (int g = 0; g < 8; ++g) mv(b.qs[p][g][r], row.qs + 32 * p + 4 * g, 4);
}

void copy_block(BlockQ6_Kx8& b, BlockQ6_K& row, int r, bool to_x8) {
  const Mover mv{to_x8};
  mv(&b.d[r], &row.d, 2);
  for (int j = 0; j < 16; ++j) mv(&b.scales[j][r], &row.scales[j], 1);
  for (int h = 0; h < 2; ++h)
    for (int g = 0; g < 8; ++g) {
      for (int c = 0; c < 2; ++c) mv(b.q[h][g][c][r], row.ql + 64 * h + 32 * c + 4 * g, 4);
      mv(b.q[h][g][2][r], row.qh + 32 * h + 4 * g, 4);
    }
}

void copy_block(BlockQ3_Kx8& b, BlockQ3_K& row, int r, bool to_x8) {
  const Mover mv{to_x8};
  mv(&b.d[r], &row.d, 2);
  for (int i = 0; i < 3; ++i) mv(&b.scales[i][r], row.scales + 4 * i, 4);
  for (int g = 0; g < 8; ++g) {
    mv(b.q[g][0][r], row.hmask + 4 * g, 4);
    for (int h = 0; h < 2; ++h) mv(b.q[g][1 + h][r], row.qs + 32 * h + 4 * g, 4);
  }
}

void copy_block(BlockQ2_Kx8& b, BlockQ2_K& row, int r, bool to_x8) {
  const Mover mv{to_x8};
  mv(&b.d[r], &row.d, 2);
  mv(&b.dmin[r], &row.dmin, 2);
  for (int i = 0; i < 4; ++i) mv(&b.scales[i][r], row.scales + 4 * i, 4);
  for (int g = 0; g < 8; ++g)
    for (int h = 0; h < 2; ++h) mv(b.qs[g][h][r], row.qs + 32 * h + 4 * g, 4);
}

void copy_block(BlockQ8_0x8& b, BlockQ8_0& row, int r, bool to_x8) {
  const Mover mv{to_x8};
  mv(&b.d[r], &row.d, 2);
  for (int g = 0; g < 8; ++g)
    for (int i = 0; i < 4; ++i) {
      int8_t& q = row.qs[4 * g + i];
      uint8_t& u = b.qs[g][r][i];
      if (to_x8)
        u = static_cast<uint8_t>(static_cast<uint8_t>(q) ^ 0x80u);  // q + 128
      else
        q = static_cast<int8_t>(u ^ 0x80u);
    }
}

// Q4_0 and IQ4_NL: the scale and the 16 bytes of nibbles as they are.
template <class B>
void copy_block(BlockQ4_0x8& b, B& row, int r, bool to_x8) {
  const Mover mv{to_x8};
  mv(&b.d[r], &row.d, 2);
  for (int g = 0; g < 4; ++g) mv(b.qs[g][r], row.qs + 4 * g, 4);
}

void copy_block(BlockIQ4_XSx8& b, BlockIQ4_XS& row, int r, bool to_x8) {
  const Mover mv{to_x8};
  mv(&b.d[r], &row.d, 2);
  mv(&b.scales_h[r], &row.scales_h, 2);
  mv(&b.scales_l[r], row.scales_l, 4);
  for (int j = 0; j < 8; ++j)
    for (int g = 0; g < 4; ++g) mv(b.qs[j][g][r], row.qs + 16 * j + 4 * g, 4);
}

// Blocks of the dtype per row.
int64_t blocks_per_row(const WeightMatrix& w) {
  return w.cols / static_cast<int64_t>(dtype_info(w.dtype).block_elems);
}

// Calls f.template operator()<X8, B>() with t's interleaved block X8 and file block B.
template <class F>
void with_layout(DType t, F&& f) {
  switch (t) {
    case DType::Q2_K:
      return f.template operator()<BlockQ2_Kx8, BlockQ2_K>();
    case DType::Q3_K:
      return f.template operator()<BlockQ3_Kx8, BlockQ3_K>();
    case DType::Q4_K:
      return f.template operator()<BlockQ4_Kx8, BlockQ4_K>();
    case DType::Q5_K:
      return f.template operator()<BlockQ5_Kx8, BlockQ5_K>();
    case DType::Q6_K:
      return f.template operator()<BlockQ6_Kx8, BlockQ6_K>();
    case DType::Q8_0:
      return f.template operator()<BlockQ8_0x8, BlockQ8_0>();
    case DType::Q4_0:
      return f.template operator()<BlockQ4_0x8, BlockQ4_0>();
    case DType::IQ4_NL:
      return f.template operator()<BlockQ4_0x8, BlockIQ4_NL>();
    case DType::IQ4_XS:
      return f.template operator()<BlockIQ4_XSx8, BlockIQ4_XS>();
    default:
      fail("interleave: no interleaved layout for ", dtype_name(t));
  }
}

// Group by group: each group's rows are copied aside (8 rows, a few KB) and written back
// interleaved over the same bytes, so out may be W's own bytes.
template <class X8, class B>
void interleave_typed(const WeightMatrix& w, void* out, ThreadPool* pool) {
  const int64_t ns = blocks_per_row(w);
  const auto* src = static_cast<const B*>(w.data);  // [rows][ns]
  auto* dst = static_cast<X8*>(out);                 // [rows / 8][ns], then the tail rows
  const int64_t groups = w.rows / kInterleaveRows;
  if (out != w.data)
    std::memcpy(dst + groups * ns, src + groups * kInterleaveRows * ns,
                static_cast<size_t>(w.rows % kInterleaveRows * ns) * sizeof(B));
  auto run = [&](int, int64_t g0, int64_t g1) {
    std::vector<B> rows(static_cast<size_t>(kInterleaveRows * ns));  // [8][ns]
    for (int64_t g = g0; g < g1; ++g) {
      std::memcpy(rows.data(), src + g * kInterleaveRows * ns, rows.size() * sizeof(B));
      for (int64_t s = 0; s < ns; ++s)
        for (int r = 0; r < kInterleaveRows; ++r) {
          B& row = rows[static_cast<size_t>(r * ns + s)];
          copy_block(dst[g * ns + s], row, r, true);
        }
    }
  };
  if (pool != nullptr)
    pool->parallel_for(groups, std::max<int64_t>(1, groups / (8 * pool->size())), run);
  else
    run(0, 0, groups);
}

template <class X8, class B>
void deinterleave_typed(const WeightMatrix& w, int64_t r, void* out) {
  const int64_t ns = blocks_per_row(w);
  auto* blocks = const_cast<X8*>(static_cast<const X8*>(w.data));  // only read
  auto* row = static_cast<B*>(out);
  const int64_t groups = w.rows / kInterleaveRows;
  if (r >= groups * kInterleaveRows) {  // a tail row, in the file's layout after the groups
    const B* tail = reinterpret_cast<const B*>(blocks + groups * ns);
    std::memcpy(row, tail + (r - groups * kInterleaveRows) * ns, static_cast<size_t>(ns) * sizeof(B));
    return;
  }
  const int j = static_cast<int>(r % kInterleaveRows);
  for (int64_t s = 0; s < ns; ++s) {
    X8& b = blocks[(r / kInterleaveRows) * ns + s];
    copy_block(b, row[s], j, false);
  }
}

}  // namespace

bool is_block32_x8(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::IQ4_NL;
}

bool has_interleaved_layout(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K || t == DType::Q8_0 || t == DType::Q4_0 || t == DType::IQ4_NL ||
         t == DType::IQ4_XS;
}

bool computes_interleaved(DType t, CpuKernel kernel) {
  return has_interleaved_layout(t) && has_avx2(kernel);
}

bool can_interleave(const WeightMatrix& w) {
  return w.interleave == 1 && w.rows >= kInterleaveRows && w.cols > 0 &&
         computes_interleaved(w.dtype, active_kernel());
}

WeightMatrix interleave_rows8(const WeightMatrix& w, void* out, ThreadPool* pool) {
  EFIM_CHECK(has_interleaved_layout(w.dtype) && w.interleave == 1 && w.rows >= kInterleaveRows,
             "interleave_rows8: needs Q2_K..Q6_K, Q8_0, Q4_0, IQ4_NL or IQ4_XS rows in the file ",
             "layout, at least 8 of them; ",
             "got ", dtype_name(w.dtype), " [", w.rows, ", ", w.cols, "] interleave ",
             int{w.interleave});
  with_layout(w.dtype, [&]<class X8, class B>() { interleave_typed<X8, B>(w, out, pool); });
  WeightMatrix x = w;
  x.data = out;
  x.interleave = kInterleaveRows;
  return x;
}

void deinterleave_row(const WeightMatrix& w, int64_t r, void* out) {
  with_layout(w.dtype, [&]<class X8, class B>() { deinterleave_typed<X8, B>(w, r, out); });
}

}  // namespace efim::cpu
