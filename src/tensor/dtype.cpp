#include "tensor/dtype.h"

#include <array>

#include "base/error.h"

namespace efim {

namespace {
// Indexed by the DType code.
constexpr std::array<DTypeInfo, 17> kInfos = {{
    {DType::F32, "f32", 1, 4},
    {DType::F16, "f16", 1, 2},
    {DType::BF16, "bf16", 1, 2},
    {DType::Q8_0, "q8_0", 32, 34},
    {DType::Q4_0, "q4_0", 32, 18},
    {DType::Q4_K, "q4_k", 256, 144},
    {DType::I32, "i32", 1, 4},
    {DType::I8, "i8", 1, 1},
    {DType::Q4_1, "q4_1", 32, 20},
    {DType::Q5_0, "q5_0", 32, 22},
    {DType::Q5_1, "q5_1", 32, 24},
    {DType::IQ4_NL, "iq4_nl", 32, 18},
    {DType::Q2_K, "q2_k", 256, 84},
    {DType::Q3_K, "q3_k", 256, 110},
    {DType::Q5_K, "q5_k", 256, 176},
    {DType::Q6_K, "q6_k", 256, 210},
    {DType::IQ4_XS, "iq4_xs", 256, 136},
}};
constexpr bool table_in_code_order() {
  for (size_t i = 0; i < kInfos.size(); ++i)
    if (static_cast<size_t>(kInfos[i].dtype) != i) return false;
  return true;
}
static_assert(table_in_code_order());
}  // namespace

const DTypeInfo& dtype_info(DType t) {
  auto i = static_cast<size_t>(t);
  EFIM_CHECK(i < kInfos.size(), "unknown dtype code ", i);
  return kInfos[i];
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

DType dtype_from_name(std::string_view name) {
  for (const auto& info : kInfos)
    if (info.name == name) return info.dtype;
  std::string known;
  for (const auto& info : kInfos) known += (known.empty() ? "" : ", ") + std::string(info.name);
  fail("unknown dtype '", name, "' (expected one of ", known, ")");
}

bool is_quantized(DType t) { return dtype_info(t).block_elems > 1; }

uint64_t dtype_row_bytes(DType t, uint64_t n) {
  const auto& info = dtype_info(t);
  EFIM_CHECK(n % static_cast<uint64_t>(info.block_elems) == 0, "dtype ", info.name,
             " needs element counts divisible by ", info.block_elems, ", got ", n);
  uint64_t blocks = n / static_cast<uint64_t>(info.block_elems);
  EFIM_CHECK(blocks <= UINT64_MAX / static_cast<uint64_t>(info.block_bytes), "size of ", n,
             " elements of ", info.name, " overflows");
  return blocks * static_cast<uint64_t>(info.block_bytes);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t exp = abs >> 23;
    uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14..24
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs >> 13) - ((127 - 15) << 10));
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

}  // namespace efim
