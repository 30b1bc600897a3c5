// Helpers shared by the format tests: a scratch folder and a raw little-endian byte builder for
// hand-made (often deliberately broken) files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

namespace efim::test {

// A fresh folder under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "efim-format-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct Raw {
  std::string b;
  template <typename T>
  Raw& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  Raw& str(const std::string& s) {
    put<uint64_t>(s.size());
    b += s;
    return *this;
  }
  Raw& pad(size_t a) {
    b.append((a - b.size() % a) % a, '\0');
    return *this;
  }
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(b.data()); }
  size_t size() const { return b.size(); }
};

// Deterministic pseudo-random bytes.
inline std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

}  // namespace efim::test

// EXPECT_ERROR(bytes, "part", ...): parsing `bytes` must fail with a message containing every
// part. Each test file defines `std::string error_of(const std::string&)` ("" when it parses).
#define EXPECT_ERROR(bytes, ...)                                          \
  do {                                                                    \
    std::string msg_ = error_of(bytes);                                   \
    EXPECT_FALSE(msg_.empty()) << "parsed without error";                 \
    for (const char* want_ : {__VA_ARGS__})                               \
      EXPECT_NE(msg_.find(want_), std::string::npos) << "'" << want_ << "' not in: " << msg_; \
  } while (0)
