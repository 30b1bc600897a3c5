// Errors: one exception type that carries a message built from the values that explain it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace efim {

// Error is thrown for every failure a caller can report (bad files, bad input, bad options).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// str(a, b, c): concatenates values with operator<<, e.g. str("offset ", off, " > size ", n).
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str(std::forward<Args>(args)...));
}

}  // namespace efim

// EFIM_CHECK(cond, parts...): throws efim::Error("parts...") when cond is false.
#define EFIM_CHECK(cond, ...)                 \
  do {                                        \
    if (!(cond)) ::efim::fail(__VA_ARGS__);   \
  } while (0)
