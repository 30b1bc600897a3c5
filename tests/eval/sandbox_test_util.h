// Shared by the sandbox tests.
#pragma once

#include "eval/sandbox.h"

namespace efim::eval::test {

// Sandbox options with a 2 s wall-clock limit: every misbehaving program must fail quickly.
inline SandboxOptions fast() {
  SandboxOptions o;
  o.timeout_s = 2.0;
  return o;
}

}  // namespace efim::eval::test
