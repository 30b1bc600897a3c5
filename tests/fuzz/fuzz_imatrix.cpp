// libFuzzer target for the importance-matrix reader (GGUF and legacy .dat): any input must parse
// or throw efim::Error; a parsed matrix's entries must be whole rows of finite values >= 0.
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "base/error.h"
#include "format/imatrix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const efim::ImportanceMatrix m = efim::parse_imatrix(data, size, "fuzz");
    for (const auto& [name, e] : m.entries) {
      if (e.n_mat <= 0 || e.values.size() % static_cast<size_t>(e.n_mat) != 0) std::abort();
      for (float v : e.values)
        if (!std::isfinite(v) || v < 0) std::abort();
    }
  } catch (const efim::Error&) {
  }
  return 0;
}
