#include "tensor/tensor.h"

#include <sstream>

namespace efim {

std::string TensorView::shape_str() const {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

}  // namespace efim
