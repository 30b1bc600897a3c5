// safetensors reader and writer: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data. A folder may be sharded with model.safetensors.index.json ({"weight_map":
// {name: file}}). Every offset is checked against the file.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mmap_file.h"
#include "format/tensor_source.h"

namespace efim {

class SafetensorsFile : public TensorSource {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path,
                                               MapMode mode = MapMode::kShared);
  // For fuzzing and tests; `bytes` must outlive the object.
  static std::unique_ptr<SafetensorsFile> parse(const uint8_t* bytes, size_t size,
                                                const std::string& label);
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::vector<std::string> tensor_names() const override;
  std::optional<TensorView> find(const std::string& name) const override;
  // Gives back the whole 2 MB pages of [p, p + n) where the file is a private huge-page copy
  // (MappedFile::discard); 0 for a shared mapping, parsed bytes, or a range outside the file.
  size_t discard(const void* p, size_t n) override;

 private:
  MappedFile file_;
  std::string label_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A folder: model.safetensors, or model.safetensors.index.json with its shards.
class SafetensorsFolder : public TensorSource {
 public:
  static std::unique_ptr<SafetensorsFolder> open(const std::string& dir,
                                                 MapMode mode = MapMode::kShared);
  std::vector<std::string> tensor_names() const override;
  std::optional<TensorView> find(const std::string& name) const override;
  // The shard holding [p, p + n) gives its whole pages back (SafetensorsFile::discard).
  size_t discard(const void* p, size_t n) override;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t> where_;  // tensor name -> shard
  std::vector<std::string> names_;
};

struct SafetensorsTensor {
  std::string name;
  DType dtype;  // F32, F16 or BF16 (also I32, I8)
  std::vector<int64_t> shape;
  std::string bytes;
};

// "F32", "F16", "BF16", "I32", "I8" <-> DType; nullopt / Error for anything else.
std::optional<DType> safetensors_dtype(const std::string& name);
std::string safetensors_dtype_name(DType t);

// Writes one file, or when max_shard_bytes > 0 and the data is larger, shards named
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json in `dir`.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors_folder(const std::string& dir,
                              const std::vector<SafetensorsTensor>& tensors,
                              uint64_t max_shard_bytes);

}  // namespace efim
