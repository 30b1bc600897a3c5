// Activation statistics for an importance matrix (efim imatrix): the mean square of every input
// column of every weight matrix over the tokens of a calibration text, as llama-imatrix
// computes it, keyed by the matrices' GGUF names (format/imatrix.h). Fed by the forward pass's
// matmul observer (Model::set_matmul_observer); pure bookkeeping, no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "format/imatrix.h"
#include "model/config.h"
#include "model/model.h"

namespace efim {

class ImatrixCollector {
 public:
  explicit ImatrixCollector(const ModelConfig& config) : config_(config) {}

  // x: [m, cols] rows that entered the matrices of `site` (Model::MatmulSite) in `layer`; for
  // the experts' sites, `expert`'s matrices.
  void add(Model::MatmulSite site, int64_t layer, int64_t expert, const float* x, int64_t m,
           int64_t cols);

  // Every matrix seen so far: mean of x^2 per column (1 for an expert no token reached, as
  // llama-quantize reads such a column). Inputs shared by several matrices (q, k and v; gate and
  // up) give each of them the same entry.
  ImportanceMatrix result() const;
  int64_t tokens_seen() const { return tokens_; }

 private:
  struct Acc {
    int64_t cols = 0;
    std::vector<double> sums;     // [n_mat, cols]
    std::vector<int64_t> counts;  // [n_mat] rows seen
  };
  // GGUF names of the matrices that read the site's input.
  std::vector<std::string> names(Model::MatmulSite site, int64_t layer) const;

  ModelConfig config_;
  std::map<std::pair<int, int64_t>, Acc> acc_;  // (site, layer)
  int64_t tokens_ = 0;
};

}  // namespace efim
