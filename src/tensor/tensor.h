// Non-owning views of typed, row-major tensors (shape listed outermost first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace efim {

// A read-only view: shape {rows, cols} means `rows` rows of `cols` contiguous elements.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // outermost first (PyTorch order; GGUF stores it reversed)
  const void* data = nullptr;
  uint64_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  std::string shape_str() const;
};

}  // namespace efim
