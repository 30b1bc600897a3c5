// A named collection of tensors backed by a file (GGUF, safetensors or a sharded folder).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace efim {

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // Names in file order.
  virtual std::vector<std::string> tensor_names() const = 0;
  // The tensor, or nullopt when absent. The view stays valid while the source lives. Shapes are
  // outermost first (PyTorch order) for every format.
  virtual std::optional<TensorView> find(const std::string& name) const = 0;
};

}  // namespace efim
