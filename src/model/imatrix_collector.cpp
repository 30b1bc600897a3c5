#include "model/imatrix_collector.h"

#include "base/error.h"
#include "model/weights.h"

namespace efim {

using Site = Model::MatmulSite;

void ImatrixCollector::add(Site site, int64_t layer, int64_t expert, const float* x, int64_t m,
                           int64_t cols) {
  const bool experts = site == Site::kExpertIn || site == Site::kExpertDownIn;
  const int64_t n_mat = experts ? config_.n_experts : 1, mat = experts ? expert : 0;
  EFIM_CHECK(mat >= 0 && mat < n_mat, "imatrix: expert ", expert, " of ", n_mat);
  Acc& a = acc_[{static_cast<int>(site), layer}];
  if (a.sums.empty()) {
    a.cols = cols;
    a.sums.assign(static_cast<size_t>(n_mat * cols), 0.0);
    a.counts.assign(static_cast<size_t>(n_mat), 0);
  }
  EFIM_CHECK(a.cols == cols, "imatrix: site ", static_cast<int>(site), " of layer ", layer,
             " had ", a.cols, " columns, now ", cols);
  double* s = &a.sums[static_cast<size_t>(mat * cols)];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double v = x[i * cols + j];
      s[j] += v * v;
    }
  a.counts[static_cast<size_t>(mat)] += m;
  if (site == Site::kAttnIn && layer == 0) tokens_ += m;
}

std::vector<std::string> ImatrixCollector::names(Site site, int64_t l) const {
  const auto g = WeightNaming::GGUF;
  auto layer = [&](const char* role) { return TensorNames::layer(g, l, role); };
  switch (site) {
    case Site::kAttnIn:
      return {layer("q"), layer("k"), layer("v")};
    case Site::kAttnOut:
      return {layer("o")};
    case Site::kFfnIn:
      if (config_.moe_layer(l)) return {layer("router")};
      if (config_.mlp == MlpKind::Gelu) return {layer("fc")};
      return {layer("gate"), layer("up")};
    case Site::kFfnDownIn:
      return {layer(config_.mlp == MlpKind::Gelu ? "proj" : "down")};
    case Site::kExpertIn:
      return {TensorNames::expert(g, l, 0, "gate"), TensorNames::expert(g, l, 0, "up")};
    case Site::kExpertDownIn:
      return {TensorNames::expert(g, l, 0, "down")};
    case Site::kOutput:
      return {config_.tied_embeddings ? TensorNames::embed(g) : TensorNames::output(g)};
  }
  return {};
}

ImportanceMatrix ImatrixCollector::result() const {
  ImportanceMatrix m;
  for (const auto& [key, a] : acc_) {
    ImportanceMatrix::Entry e;
    e.n_mat = static_cast<int64_t>(a.counts.size());
    e.values.resize(a.sums.size());
    for (int64_t k = 0; k < e.n_mat; ++k)
      for (int64_t j = 0; j < a.cols; ++j) {
        const size_t at = static_cast<size_t>(k * a.cols + j);
        const int64_t c = a.counts[static_cast<size_t>(k)];
        e.values[at] = c > 0 ? static_cast<float>(a.sums[at] / static_cast<double>(c)) : 1.0f;
      }
    for (const std::string& name : names(static_cast<Site>(key.first), key.second))
      m.entries[name] = e;
  }
  return m;
}

}  // namespace efim
