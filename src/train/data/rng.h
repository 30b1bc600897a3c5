// A small seeded PRNG whose output is identical on every platform and standard library (the
// std:: distributions are not: libstdc++ and libc++ draw differently), so that a data build is
// a function of its seed alone.
#pragma once

#include <cmath>
#include <cstdint>

namespace efim::train {

// SplitMix64's finalizer: a bijective mix of 64 bits (used to derive independent seeds).
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Seed for one stream (e.g. one document) of a run: independent of every other stream.
inline uint64_t stream_seed(uint64_t seed, uint64_t stream) {
  return mix64(mix64(seed) ^ (stream + 0x9e3779b97f4a7c15ULL));
}

// FNV-1a over bytes: a stable key for a document path.
inline uint64_t fnv1a64(const char* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(data[i])) * 0x100000001b3ULL;
  return h;
}

// SplitMix64 (Steele, Lea, Flood 2014): passes BigCrush, one add and a mix per draw.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ULL); }
  // Uniform in [0, n), unbiased (Lemire's multiply-shift with rejection); n > 0.
  uint64_t uniform(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = -n % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool bernoulli(double p) { return uniform01() < p; }
  // Exponential with the given mean by inverse CDF (log1p comes from the C library).
  double exponential(double mean) { return -mean * std::log1p(-uniform01()); }

 private:
  uint64_t state_;
};

}  // namespace efim::train
