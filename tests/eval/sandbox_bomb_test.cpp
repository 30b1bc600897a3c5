// The sandbox against a fork bomb. Its own binary, run alone (RUN_SERIAL in CMakeLists.txt):
// while it holds the user's process limit, any other test that starts a process fails.
#include <gtest/gtest.h>

#include "eval/sandbox.h"
#include "sandbox_test_util.h"

namespace efim::eval {
namespace {

using test::fast;

TEST(Sandbox, ForkBombFails) {
  auto r = run_python(
      "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
      fast());
  EXPECT_FALSE(r.passed());
  EXPECT_LT(r.wall_s, 3.5);
  // RLIMIT_NPROC bounds it: a fork fails, which the program may observe.
  auto r2 = run_python(
      "import os\npids = []\nfor i in range(200):\n    pids.append(os.fork())\n"
      "    if pids[-1] == 0:\n        import time\n        time.sleep(30)\n", fast());
  EXPECT_FALSE(r2.passed());
  EXPECT_NE(r2.output.find("BlockingIOError"), std::string::npos) << r2.output;
}

}  // namespace
}  // namespace efim::eval
