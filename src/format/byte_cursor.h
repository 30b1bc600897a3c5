// Bounds-checked little-endian reader over an untrusted byte image (internal to format/).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "base/error.h"

namespace efim {

static_assert(std::endian::native == std::endian::little,
              "file formats are little-endian; big-endian hosts would need byte swaps");

// Every read checks the remaining bytes first and throws Error naming `what`, the offset and the
// sizes, so a truncated or lying file can never make us read past the image.
class ByteCursor {
 public:
  // `prefix` starts every message, e.g. "gguf 'model.gguf'".
  ByteCursor(const uint8_t* data, size_t size, std::string prefix)
      : data_(data), size_(size), prefix_(std::move(prefix)) {}

  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - pos_; }
  const std::string& prefix() const { return prefix_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail(prefix_, ": truncated ", what, " at offset ", pos_, ": need ", n, " bytes, only ",
           remaining(), " left (file size ", size_, ")");
  }

  template <typename T>
  T read(const std::string& what) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // u64 length + bytes; the length is checked against the remaining bytes before allocating.
  std::string read_string(const std::string& what) {
    uint64_t n = read<uint64_t>(what + " length");
    if (n > remaining())
      fail(prefix_, ": ", what, " at offset ", pos_ - 8, " claims length ", n, " but only ",
           remaining(), " bytes remain (file size ", size_, ")");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string prefix_;
};

}  // namespace efim
