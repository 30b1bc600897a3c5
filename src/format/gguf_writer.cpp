// GGUF v3 writer. Layout as llama.cpp reads it (ggml/src/gguf.cpp): header, KV pairs in
// insertion order, tensor infos whose offsets are the running sum of sizes each padded to the
// alignment, zero padding to the alignment, then each tensor's data followed by zero padding.
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include "base/error.h"
#include "format/gguf.h"

namespace efim {

namespace {

constexpr uint64_t kAlignment = 32;
constexpr size_t kMaxNameBytes = 63;  // llama.cpp: GGML_MAX_NAME (64) including the NUL

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void pad_to(std::string& out, uint64_t alignment) {
  out.append((alignment - out.size() % alignment) % alignment, '\0');
}

uint64_t padded(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// Unsigned/signed values must fit the declared width; the error names the key and the value.
void put_uint(std::string& out, GgufType t, uint64_t v, const std::string& key) {
  auto check = [&](uint64_t max) {
    EFIM_CHECK(v <= max, "gguf writer: '", key, "' value ", v, " does not fit ", gguf_type_name(t));
  };
  switch (t) {
    case GgufType::U8: check(UINT8_MAX); put<uint8_t>(out, static_cast<uint8_t>(v)); break;
    case GgufType::U16: check(UINT16_MAX); put<uint16_t>(out, static_cast<uint16_t>(v)); break;
    case GgufType::U32: check(UINT32_MAX); put<uint32_t>(out, static_cast<uint32_t>(v)); break;
    default: put<uint64_t>(out, v); break;
  }
}

void put_int(std::string& out, GgufType t, int64_t v, const std::string& key) {
  auto check = [&](int64_t lo, int64_t hi) {
    EFIM_CHECK(v >= lo && v <= hi, "gguf writer: '", key, "' value ", v, " does not fit ",
               gguf_type_name(t));
  };
  switch (t) {
    case GgufType::I8: check(INT8_MIN, INT8_MAX); put<int8_t>(out, static_cast<int8_t>(v)); break;
    case GgufType::I16:
      check(INT16_MIN, INT16_MAX);
      put<int16_t>(out, static_cast<int16_t>(v));
      break;
    case GgufType::I32:
      check(INT32_MIN, INT32_MAX);
      put<int32_t>(out, static_cast<int32_t>(v));
      break;
    default: put<int64_t>(out, v); break;
  }
}

// Writes the payload of `v` (no type tag); `level` counts enclosing arrays.
void put_value(std::string& out, const GgufValue& v, const std::string& key, int level) {
  auto mismatch = [&]() {
    fail("gguf writer: '", key, "' is declared ", gguf_type_name(v.type),
         " but holds a different kind of value");
  };
  switch (v.type) {
    case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::U64:
      if (!std::holds_alternative<uint64_t>(v.v)) mismatch();
      return put_uint(out, v.type, std::get<uint64_t>(v.v), key);
    case GgufType::I8: case GgufType::I16: case GgufType::I32: case GgufType::I64:
      if (!std::holds_alternative<int64_t>(v.v)) mismatch();
      return put_int(out, v.type, std::get<int64_t>(v.v), key);
    case GgufType::F32:
    {
      if (!std::holds_alternative<double>(v.v)) mismatch();
      double d = std::get<double>(v.v);
      EFIM_CHECK(!std::isfinite(d) || std::fabs(d) <= std::numeric_limits<float>::max(),
                 "gguf writer: '", key, "' value ", d, " does not fit f32");
      return put<float>(out, static_cast<float>(d));
    }
    case GgufType::F64:
      if (!std::holds_alternative<double>(v.v)) mismatch();
      return put<double>(out, std::get<double>(v.v));
    case GgufType::BOOL:
      if (!std::holds_alternative<bool>(v.v)) mismatch();
      return put<uint8_t>(out, std::get<bool>(v.v) ? 1 : 0);
    case GgufType::STRING:
      if (!std::holds_alternative<std::string>(v.v)) mismatch();
      return put_string(out, std::get<std::string>(v.v));
    case GgufType::ARRAY: {
      if (!std::holds_alternative<GgufArray>(v.v)) mismatch();
      EFIM_CHECK(level < kGgufMaxDepth, "gguf writer: '", key, "' nests arrays deeper than ",
                 kGgufMaxDepth, " levels");
      const auto& arr = std::get<GgufArray>(v.v);
      put<uint32_t>(out, static_cast<uint32_t>(arr.elem_type));
      put<uint64_t>(out, arr.items.size());
      for (const auto& item : arr.items) {
        EFIM_CHECK(item.type == arr.elem_type, "gguf writer: '", key, "' array of ",
                   gguf_type_name(arr.elem_type), " holds an item of type ",
                   gguf_type_name(item.type));
        put_value(out, item, key, level + 1);
      }
      return;
    }
  }
  fail("gguf writer: '", key, "' has unknown type ", static_cast<uint32_t>(v.type));
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  EFIM_CHECK(!key.empty(), "gguf writer: metadata key is empty");
  if (key == "general.alignment")
    EFIM_CHECK(value.type == GgufType::U32 && value.as_u64() == kAlignment,
               "gguf writer: general.alignment is fixed at u32 ", kAlignment);
  // Re-setting a key replaces its value and keeps its original position.
  for (auto& [k, v] : kv_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  kv_.emplace_back(key, std::move(value));
}

bool GgufWriter::remove(const std::string& key) {
  return std::erase_if(kv_, [&](const auto& kv) { return kv.first == key; }) > 0;
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) { set(key, gguf_uint(GgufType::U32, v)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { set(key, gguf_int(GgufType::I32, v)); }
void GgufWriter::set_f32(const std::string& key, float v) { set(key, gguf_float(GgufType::F32, v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { set(key, gguf_bool(v)); }
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  set(key, gguf_string(v));
}

void GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(gguf_string(s));
  set(key, gguf_array(GgufType::STRING, std::move(items)));
}

void GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(gguf_int(GgufType::I32, x));
  set(key, gguf_array(GgufType::I32, std::move(items)));
}

void GgufWriter::set_f32s(const std::string& key, const std::vector<float>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(gguf_float(GgufType::F32, x));
  set(key, gguf_array(GgufType::F32, std::move(items)));
}

void GgufWriter::add_tensor(const std::string& name, DType dtype,
                            const std::vector<int64_t>& shape, const void* data,
                            uint64_t nbytes) {
  const std::string t = str("gguf writer: tensor '", name, "'");
  EFIM_CHECK(!name.empty(), "gguf writer: tensor name is empty");
  EFIM_CHECK(name.size() <= kMaxNameBytes, t, " name is ", name.size(),
             " bytes; llama.cpp reads at most ", kMaxNameBytes);
  for (const auto& p : tensors_) EFIM_CHECK(p.name != name, t, " added twice");
  EFIM_CHECK(!shape.empty() && shape.size() <= 4, t, " has ", shape.size(),
             " dims (GGUF holds 1 to 4)");
  for (auto d : shape) EFIM_CHECK(d >= 0, t, " has negative dim ", d);
  // Rows are the innermost (last) dim; quantized blocks never straddle rows.
  uint64_t expect = dtype_row_bytes(dtype, static_cast<uint64_t>(shape.back()));
  for (size_t i = 0; i + 1 < shape.size(); ++i) {
    auto d = static_cast<uint64_t>(shape[i]);
    EFIM_CHECK(d == 0 || expect <= std::numeric_limits<uint64_t>::max() / d, t,
               " byte size overflows");
    expect *= d;
  }
  EFIM_CHECK(nbytes == expect, t, " of dtype ", dtype_name(dtype), " needs ", expect,
             " bytes, got ", nbytes);
  EFIM_CHECK(data != nullptr || nbytes == 0, t, " has no data");
  Pending p{name, dtype, shape, std::string()};
  if (nbytes) p.bytes.assign(static_cast<const char*>(data), static_cast<size_t>(nbytes));
  tensors_.push_back(std::move(p));
}

std::string GgufWriter::serialize_meta() const {
  std::string out;
  put<uint32_t>(out, 0x46554747u);  // "GGUF"
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size());
  for (const auto& [key, value] : kv_) {
    put_string(out, key);
    put<uint32_t>(out, static_cast<uint32_t>(value.type));
    put_value(out, value, key, 0);
  }
  uint64_t offset = 0;  // relative to the data section
  for (const auto& p : tensors_) {
    put_string(out, p.name);
    put<uint32_t>(out, static_cast<uint32_t>(p.shape.size()));
    for (auto it = p.shape.rbegin(); it != p.shape.rend(); ++it)  // ne[0] = innermost first
      put<uint64_t>(out, static_cast<uint64_t>(*it));
    put<uint32_t>(out, ggml_type_id(p.dtype));
    put<uint64_t>(out, offset);
    offset += padded(p.bytes.size());
  }
  pad_to(out, kAlignment);
  return out;
}

std::string GgufWriter::serialize() const {
  std::string out = serialize_meta();
  for (const auto& p : tensors_) {
    out += p.bytes;
    pad_to(out, kAlignment);  // the data section starts aligned, so this aligns offsets too
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  // Streams tensor data instead of building one string, so memory stays at one copy.
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  EFIM_CHECK(out, "gguf writer: cannot create '", path, "': ", std::strerror(errno));
  std::string meta = serialize_meta();
  out.write(meta.data(), static_cast<std::streamsize>(meta.size()));
  static const char zeros[kAlignment] = {};
  for (const auto& p : tensors_) {
    out.write(p.bytes.data(), static_cast<std::streamsize>(p.bytes.size()));
    out.write(zeros, static_cast<std::streamsize>(padded(p.bytes.size()) - p.bytes.size()));
  }
  out.flush();
  EFIM_CHECK(out.good(), "gguf writer: error writing '", path, "'");
}

}  // namespace efim
