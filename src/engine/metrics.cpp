#include "engine/metrics.h"

#include "base/error.h"

namespace efim {

Histogram::Histogram(std::vector<double> bounds) : upper(std::move(bounds)) {
  for (size_t i = 1; i < upper.size(); ++i) {
    EFIM_CHECK(upper[i - 1] < upper[i], "Histogram: bucket bounds must ascend, got ",
               upper[i - 1], " then ", upper[i], " at ", i);
  }
  counts.assign(upper.size() + 1, 0);
}

void Histogram::observe(double x) {
  size_t i = 0;
  while (i < upper.size() && x > upper[i]) ++i;
  ++counts[i];
  sum += x;
  ++count;
}

int64_t Histogram::cumulative(size_t i) const {
  int64_t n = 0;
  for (size_t k = 0; k <= i && k < counts.size(); ++k) n += counts[k];
  return n;
}

std::vector<double> ttft_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
          0.75,  1.0,  2.5,   5.0,  10.0,  30.0, 60.0};
}

std::vector<double> e2e_buckets() {
  return {0.01, 0.025, 0.05, 0.1,  0.25, 0.5,  0.75, 1.0,   1.5,
          2.0,  3.0,   5.0,  10.0, 20.0, 30.0, 60.0, 120.0, 300.0};
}

std::vector<double> heal_bytes_buckets() { return {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64}; }

}  // namespace efim
