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
  // Where the source holds its bytes in a private copy (not a shared mapping of the file), a
  // writable pointer to [p, p + n) of them, for rewriting weights in place (interleaving);
  // nullptr otherwise. seal() ends the writing: the bytes are read-only again.
  virtual uint8_t* writable(const void* p, size_t n) {
    (void)p;
    (void)n;
    return nullptr;
  }
  virtual void seal() {}
  // Bytes [p, p + n) of a tensor that is no longer read (the model fused a copy of it): where
  // the source holds a private copy, its whole pages are given back to the system and read as
  // zeros afterwards. Returns the bytes released (0 for a shared mapping of the file).
  virtual size_t discard(const void* p, size_t n) {
    (void)p;
    (void)n;
    return 0;
  }
};

}  // namespace efim
