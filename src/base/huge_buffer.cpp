#include "base/huge_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace efim {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}

HugePageBuffer::HugePageBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  // One huge page more than asked, so the data can start on a 2 MB boundary.
  region_bytes_ = bytes + kHugePage;
  void* p = ::mmap(nullptr, region_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  EFIM_CHECK(p != MAP_FAILED, "cannot map ", bytes, " bytes: ", std::strerror(errno));
  region_ = p;
  const auto base = reinterpret_cast<uintptr_t>(p);
  data_ = reinterpret_cast<uint8_t*>((base + kHugePage - 1) / kHugePage * kHugePage);
  ::madvise(data_, bytes, MADV_HUGEPAGE);  // advice only: 4 KB pages still work
}

HugePageBuffer::~HugePageBuffer() { release(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& o) noexcept { *this = std::move(o); }

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& o) noexcept {
  if (this == &o) return *this;
  release();
  data_ = std::exchange(o.data_, nullptr);
  region_ = std::exchange(o.region_, nullptr);
  region_bytes_ = std::exchange(o.region_bytes_, 0);
  size_ = std::exchange(o.size_, 0);
  return *this;
}

void HugePageBuffer::release() {
  if (region_) ::munmap(region_, region_bytes_);
  region_ = nullptr;
  data_ = nullptr;
  region_bytes_ = size_ = 0;
}

}  // namespace efim
