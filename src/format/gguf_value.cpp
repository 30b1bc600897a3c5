// GGUF metadata values (typed accessors and builders) and the ggml tensor type table.
#include <array>
#include <limits>
#include <utility>

#include "base/error.h"
#include "format/gguf.h"

namespace efim {

namespace {

bool is_unsigned_type(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed_type(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}
bool is_float_type(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

[[noreturn]] void wrong_type(const char* expected, GgufType actual) {
  fail("gguf value: expected ", expected, ", got ", gguf_type_name(actual));
}

// Index = ggml type id (ggml.h enum ggml_type); empty entries are removed or unused ids.
constexpr std::array<std::string_view, 43> kGgmlTypeNames = {
    "f32",   "f16",     "q4_0",    "q4_1",  "",      "",      "q5_0",   "q5_1",   "q8_0",
    "q8_1",  "q2_K",    "q3_K",    "q4_K",  "q5_K",  "q6_K",  "q8_K",   "iq2_xxs", "iq2_xs",
    "iq3_xxs", "iq1_s", "iq4_nl",  "iq3_s", "iq2_s", "iq4_xs", "i8",    "i16",    "i32",
    "i64",   "f64",     "iq1_m",   "bf16",  "",      "",      "",       "tq1_0",  "tq2_0",
    "",      "",        "",        "mxfp4", "nvfp4", "q1_0",  "q2_0",
};

}  // namespace

uint64_t GgufValue::as_u64() const {
  if (auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (auto* i = std::get_if<int64_t>(&v)) {
    EFIM_CHECK(*i >= 0, "gguf value: expected a non-negative integer, got ", *i);
    return static_cast<uint64_t>(*i);
  }
  wrong_type("an unsigned integer", type);
}

int64_t GgufValue::as_i64() const {
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* u = std::get_if<uint64_t>(&v)) {
    EFIM_CHECK(*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
               "gguf value: ", *u, " does not fit in int64");
    return static_cast<int64_t>(*u);
  }
  wrong_type("an integer", type);
}

double GgufValue::as_f64() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  wrong_type("a number", type);
}

bool GgufValue::as_bool() const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  wrong_type("bool", type);
}

const std::string& GgufValue::as_string() const {
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  wrong_type("string", type);
}

const GgufArray& GgufValue::as_array() const {
  if (auto* a = std::get_if<GgufArray>(&v)) return *a;
  wrong_type("array", type);
}

std::vector<std::string> GgufValue::as_strings() const {
  const auto& a = as_array();
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const auto& item : a.items) out.push_back(item.as_string());
  return out;
}

std::vector<int64_t> GgufValue::as_ints() const {
  const auto& a = as_array();
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  for (const auto& item : a.items) out.push_back(item.as_i64());
  return out;
}

std::vector<double> GgufValue::as_floats() const {
  const auto& a = as_array();
  std::vector<double> out;
  out.reserve(a.items.size());
  for (const auto& item : a.items) out.push_back(item.as_f64());
  return out;
}

GgufValue gguf_uint(GgufType type, uint64_t v) {
  EFIM_CHECK(is_unsigned_type(type), "gguf_uint: ", gguf_type_name(type), " is not unsigned");
  return GgufValue{type, v};
}

GgufValue gguf_int(GgufType type, int64_t v) {
  EFIM_CHECK(is_signed_type(type), "gguf_int: ", gguf_type_name(type), " is not signed");
  return GgufValue{type, v};
}

GgufValue gguf_float(GgufType type, double v) {
  EFIM_CHECK(is_float_type(type), "gguf_float: ", gguf_type_name(type), " is not a float type");
  return GgufValue{type, v};
}

GgufValue gguf_bool(bool v) { return GgufValue{GgufType::BOOL, v}; }
GgufValue gguf_string(std::string v) { return GgufValue{GgufType::STRING, std::move(v)}; }

GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> items) {
  for (size_t i = 0; i < items.size(); ++i)
    EFIM_CHECK(items[i].type == elem_type, "gguf_array: item ", i, " has type ",
               gguf_type_name(items[i].type), ", array holds ", gguf_type_name(elem_type));
  return GgufValue{GgufType::ARRAY, GgufArray{elem_type, std::move(items)}};
}

std::string gguf_type_name(GgufType t) {
  static constexpr std::array<std::string_view, 13> kNames = {
      "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
      "f64"};
  auto i = static_cast<uint32_t>(t);
  if (i < kNames.size()) return std::string(kNames[i]);
  return str("type<", i, ">");
}

namespace {
// efim dtype <-> ggml type id (ggml.h enum ggml_type).
constexpr std::pair<DType, uint32_t> kGgmlIds[] = {
    {DType::F32, 0},     {DType::F16, 1},     {DType::Q4_0, 2},    {DType::Q4_1, 3},
    {DType::Q5_0, 6},    {DType::Q5_1, 7},    {DType::Q8_0, 8},    {DType::Q2_K, 10},
    {DType::Q3_K, 11},   {DType::Q4_K, 12},   {DType::Q5_K, 13},   {DType::Q6_K, 14},
    {DType::IQ4_NL, 20}, {DType::IQ4_XS, 23}, {DType::I8, 24},     {DType::I32, 26},
    {DType::BF16, 30},
};
}  // namespace

uint32_t ggml_type_id(DType t) {
  for (const auto& [dt, id] : kGgmlIds)
    if (dt == t) return id;
  fail("ggml_type_id: unknown dtype code ", static_cast<int>(t));
}

std::optional<DType> dtype_from_ggml_type(uint32_t id) {
  for (const auto& [dt, gid] : kGgmlIds)
    if (gid == id) return dt;
  return std::nullopt;
}

std::string loadable_ggml_types() {
  std::string out;
  for (const auto& [dt, id] : kGgmlIds) out += (out.empty() ? "" : ", ") + std::string(ggml_type_name(id));
  return out;
}

std::string_view ggml_type_name(uint32_t id) {
  if (id < kGgmlTypeNames.size() && !kGgmlTypeNames[id].empty()) return kGgmlTypeNames[id];
  return "?";
}

}  // namespace efim
