// Read-only memory-mapped file (RAII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace efim {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps the whole file read-only; throws Error naming the path on failure. Empty files map to
  // size() == 0 with data() == nullptr.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole file into a string; throws Error naming the path.
std::string read_file(const std::string& path);
// Writes a whole file; throws Error naming the path.
void write_file(const std::string& path, const std::string& bytes);

}  // namespace efim
