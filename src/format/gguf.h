// GGUF v3 (and v2) reader and writer. Layout: magic "GGUF", u32 version, u64 n_tensors,
// u64 n_kv, KV pairs, tensor infos, padding to `general.alignment` (default 32), tensor data.
// Every count, length, offset and size read from a file is checked against the file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
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
  static GgufFile open(const std::string& path);
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

 private:
  MappedFile file_;
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
