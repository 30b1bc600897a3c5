// GGUF v3 (and v2) reader and writer. Layout: magic "GGUF", u32 version, u64 n_tensors,
// u64 n_kv, KV pairs, tensor infos, padding to `general.alignment` (default 32), tensor data.
// Every count, length, offset and size read from a file is checked against the file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/mmap_file.h"
#include "format/tensor_source.h"

namespace efim {

// GGUF metadata value types (spec numbering).
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

struct GgufValue;
struct GgufArray {
  GgufType elem_type = GgufType::U8;
  std::vector<GgufValue> items;
};
// Scalars are widened: all integers to int64_t/uint64_t, floats to double.
struct GgufValue {
  GgufType type = GgufType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> v;

  // Typed accessors; each throws Error naming the expected and actual type.
  uint64_t as_u64() const;  // any non-negative integer type
  int64_t as_i64() const;   // any integer type that fits
  double as_f64() const;    // any number
  bool as_bool() const;
  const std::string& as_string() const;
  const GgufArray& as_array() const;
  std::vector<std::string> as_strings() const;  // array of strings
  std::vector<int64_t> as_ints() const;         // array of integers
  std::vector<double> as_floats() const;        // array of numbers
};

// Value builders (the type says how the value is stored in a file).
GgufValue gguf_uint(GgufType type, uint64_t v);  // U8, U16, U32 or U64; range-checked on write
GgufValue gguf_int(GgufType type, int64_t v);    // I8, I16, I32 or I64
GgufValue gguf_float(GgufType type, double v);   // F32 or F64
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
// Every item must have type `elem_type` (arrays may nest, up to kGgufMaxDepth levels).
GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> items);

// "u32", "string", "array", ...; "type<N>" for numbers outside the spec.
std::string gguf_type_name(GgufType t);
// Arrays nest at most this deep (an array of scalars has depth 1).
inline constexpr int kGgufMaxDepth = 8;

// ggml tensor type ids (ggml.h: F32=0, F16=1, Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8,
// Q2_K..Q6_K=10..14, IQ4_NL=20, IQ4_XS=23, I8=24, I32=26, BF16=30).
uint32_t ggml_type_id(DType t);
// The dtype for a ggml type id, or nullopt for ids efim does not load.
std::optional<DType> dtype_from_ggml_type(uint32_t id);
// The ggml names of every type efim loads ("f32, f16, q4_0, ..."), for error messages.
std::string loadable_ggml_types();
// ggml's name for a type id ("q6_K", "iq2_xs", ...) for error messages; "?" when unknown.
std::string_view ggml_type_name(uint32_t id);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // as stored: innermost first (ne[0] is the row length)
  DType dtype;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
};

class GgufFile : public TensorSource {
 public:
  // Maps and validates the file; throws Error naming the field, offset and values on any defect.
  static GgufFile open(const std::string& path, MapMode mode = MapMode::kShared);
  // Parses an in-memory image (for fuzzing and tests); `bytes` must outlive the object.
  static GgufFile parse(const uint8_t* bytes, size_t size, const std::string& label);

  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<std::string>& metadata_order() const { return kv_order_; }
  const GgufValue* get(const std::string& key) const;  // nullptr when absent
  const std::vector<GgufTensorInfo>& tensors() const { return infos_; }
  uint64_t alignment() const { return alignment_; }

  std::vector<std::string> tensor_names() const override;
  std::optional<TensorView> find(const std::string& name) const override;
  uint8_t* writable(const void* p, size_t n) override;
  void seal() override;
  size_t discard(const void* p, size_t n) override;

 private:
  MappedFile file_;
  bool writable_ = false;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string label_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<std::string> kv_order_;
  std::vector<GgufTensorInfo> infos_;
  std::map<std::string, size_t> index_;
};

// Builds a GGUF file: metadata in insertion order, then tensors (data copied when written).
class GgufWriter {
 public:
  void set(const std::string& key, GgufValue value);
  bool remove(const std::string& key);  // false: there was no such key
  // Convenience setters.
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_i32s(const std::string& key, const std::vector<int32_t>& v);
  void set_f32s(const std::string& key, const std::vector<float>& v);
  // shape outermost first (PyTorch order); data holds dtype_row_bytes(dtype, numel) bytes.
  void add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                  const void* data, uint64_t nbytes);
  // Writes the file (alignment 32); throws Error on I/O failure.
  void write(const std::string& path) const;
  std::string serialize() const;

 private:
  std::string serialize_meta() const;  // everything before the data section, padded
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Pending> tensors_;
};

}  // namespace efim
