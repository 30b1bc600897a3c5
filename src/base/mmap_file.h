// Read-only memory-mapped file (RAII), or a private copy of the file in transparent huge pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace efim {

enum class MapMode {
  kShared,  // mmap of the file: pages come from the page cache, 4 KB each
  // Model weights: the file is read into anonymous memory aligned to 2 MB and advised
  // MADV_HUGEPAGE, then made read-only. A decode step streams every weight once, and with 4 KB
  // pages that is one TLB miss per 4 KB (11k page walks per token for 44 MB of bf16); 2 MB pages
  // cut them 512-fold (efim-base-py bf16 decode: ~+15% tokens/s on a 2-core Zen VM). Falls back
  // to kShared when the file is larger than half of MemAvailable (a copy must never push a big
  // model into swap where the page cache would just evict) or the allocation fails.
  kPrivateHugePages,
};

class MappedFile {
 public:
  MappedFile() = default;
  // Maps the whole file read-only; throws Error naming the path on failure. Empty files map to
  // size() == 0 with data() == nullptr.
  explicit MappedFile(const std::string& path, MapMode mode = MapMode::kShared);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // True when the bytes are a private copy in huge-page-advised memory (kPrivateHugePages taken).
  bool is_private_copy() const { return region_ != nullptr; }
  // A private copy only: the bytes made writable (true) until make_read_only(); false (and
  // nothing changed) for a shared mapping of the file.
  bool make_writable();
  void make_read_only();
  // A private copy only: the whole 2 MB pages inside [p, p + n) are given back to the system (bytes
  // the caller no longer reads: they read as zeros afterwards). Returns the bytes released; 0
  // for a shared mapping, whose pages the page cache may evict on its own.
  size_t discard(const uint8_t* p, size_t n);
  const std::string& path() const { return path_; }

 private:
  void reset();
  // mprotect of the private copy from data_ to the region's end; false for a shared mapping.
  bool protect(int prot);
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* region_ = nullptr;  // kPrivateHugePages: the anonymous mapping holding data_
  size_t region_size_ = 0;
};

// Reads a whole file into a string; throws Error naming the path.
std::string read_file(const std::string& path);
// Writes a whole file; throws Error naming the path.
void write_file(const std::string& path, const std::string& bytes);

}  // namespace efim
