#include "base/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace efim {

namespace {

// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
size_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// Reads size bytes of fd into dst; false on a read error or a short file.
bool read_all(int fd, uint8_t* dst, size_t size) {
  size_t done = 0;
  errno = 0;
  while (done < size) {
    const ssize_t r = ::pread(fd, dst + done, size - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

MappedFile::MappedFile(const std::string& path, MapMode mode) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EFIM_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot stat '", path, "': ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'", path, "' is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0 && mode == MapMode::kPrivateHugePages && size_ <= mem_available_bytes() / 2) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t len = (size_ + kHuge - 1) / kHuge * kHuge;
    void* region =
        ::mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region != MAP_FAILED) {
      const uintptr_t base = reinterpret_cast<uintptr_t>(region);
      auto* aligned = reinterpret_cast<uint8_t*>((base + kHuge - 1) / kHuge * kHuge);
      ::madvise(aligned, len, MADV_HUGEPAGE);  // advice only: 4 KB pages still work
      if (!read_all(fd, aligned, size_)) {
        const int e = errno;
        ::munmap(region, len + kHuge);
        ::close(fd);
        fail("cannot read '", path, "' (", size_, " bytes): ", e ? std::strerror(e) : "short read");
      }
      ::mprotect(aligned, len, PROT_READ);
      ::close(fd);
      region_ = region;
      region_size_ = len + kHuge;
      data_ = aligned;
      return;
    }
  }
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    ::close(fd);
    EFIM_CHECK(p != MAP_FAILED, "cannot mmap '", path, "' (", size_, " bytes): ", std::strerror(e));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  reset();
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(o.data_),
      size_(o.size_),
      region_(o.region_),
      region_size_(o.region_size_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.region_ = nullptr;
  o.region_size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    region_ = o.region_;
    region_size_ = o.region_size_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.region_ = nullptr;
    o.region_size_ = 0;
  }
  return *this;
}

void MappedFile::reset() {
  if (region_)
    ::munmap(region_, region_size_);
  else if (data_)
    ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  region_ = nullptr;
  region_size_ = 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EFIM_CHECK(in, "cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  EFIM_CHECK(!in.bad(), "error reading '", path, "'");
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  EFIM_CHECK(out, "cannot create '", path, "': ", std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EFIM_CHECK(out.good(), "error writing '", path, "'");
}

bool MappedFile::protect(int prot) {
  if (region_ == nullptr) return false;
  const size_t len = region_size_ - static_cast<size_t>(data_ - static_cast<uint8_t*>(region_));
  return ::mprotect(const_cast<uint8_t*>(data_), len, prot) == 0;
}

bool MappedFile::make_writable() { return protect(PROT_READ | PROT_WRITE); }

void MappedFile::make_read_only() { protect(PROT_READ); }

size_t MappedFile::discard(const uint8_t* p, size_t n) {
  if (region_ == nullptr || p < data_ || n > size_ || static_cast<size_t>(p - data_) > size_ - n) return 0;
  // Whole 2 MB pages only: giving back part of a huge page splits it, and the weights beside
  // the part then take 4 KB TLB entries (1.5B Q4_K_M decode 44-47 -> 39-45 tok/s measured).
  const auto page = static_cast<uintptr_t>(size_t{2} << 20);
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (end <= begin) return 0;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) return 0;
  return end - begin;
}

}  // namespace efim
