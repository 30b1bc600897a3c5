// Zeroed anonymous memory advised for transparent huge pages (MADV_HUGEPAGE): large working
// sets read once per step (the K/V cache) take a TLB miss per 2 MB instead of per 4 KB. Pages
// are touched lazily, so a large buffer costs memory only where it is written.
#pragma once

#include <cstddef>
#include <cstdint>

namespace efim {

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  // Throws Error when the memory cannot be mapped (the message gives the size).
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& o) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& o) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release();
  uint8_t* data_ = nullptr;  // 2 MB aligned inside the mapping
  void* region_ = nullptr;
  size_t region_bytes_ = 0, size_ = 0;
};

}  // namespace efim
