// The sandbox: a good program passes; every kind of misbehaviour fails cleanly and quickly.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>

#include "eval/sandbox.h"
#include "sandbox_test_util.h"

namespace efim::eval {
namespace {

using test::fast;

TEST(Sandbox, PassingProgramPasses) {
  auto r = run_python("def add(a, b):\n    return a + b\nassert add(2, 3) == 5\n", fast());
  EXPECT_EQ(r.status, SandboxStatus::passed) << r.output;
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_LT(r.wall_s, 2.0);
}

TEST(Sandbox, WorkingDirectoryIsWritableAndRemoved) {
  auto r = run_python(
      "import os\nopen('x.txt', 'w').write('hi')\nassert open('x.txt').read() == 'hi'\n"
      "print(os.getcwd())\n", fast());
  ASSERT_EQ(r.status, SandboxStatus::passed) << r.output;
  std::string dir = r.output.substr(0, r.output.find('\n'));
  EXPECT_NE(dir.find("efim-eval-"), std::string::npos) << dir;
  EXPECT_FALSE(std::filesystem::exists(dir)) << "the temporary directory is removed";
}

TEST(Sandbox, FailingAssertFails) {
  auto r = run_python("assert 1 + 1 == 3, 'wrong'\n", fast());
  EXPECT_EQ(r.status, SandboxStatus::failed);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("AssertionError"), std::string::npos) << r.output;
}

TEST(Sandbox, SyntaxErrorFails) {
  EXPECT_EQ(run_python("def f(:\n", fast()).status, SandboxStatus::failed);
}

TEST(Sandbox, InfiniteLoopTimesOut) {
  auto r = run_python("while True:\n    pass\n", fast());
  EXPECT_EQ(r.status, SandboxStatus::timeout);
  EXPECT_FALSE(r.passed());
  EXPECT_LT(r.wall_s, 3.5);
}

TEST(Sandbox, SleepingTimesOutOnTheWallClock) {  // no CPU used: RLIMIT_CPU would not fire
  auto r = run_python("import time\ntime.sleep(60)\n", fast());
  EXPECT_EQ(r.status, SandboxStatus::timeout);
  EXPECT_LT(r.wall_s, 3.5);
}

TEST(Sandbox, MemoryBombFails) {
  // One large allocation: RLIMIT_AS refuses it at once.
  auto r = run_python("x = bytearray(4 << 30)\nprint('allocated')\n", fast());
  EXPECT_EQ(r.status, SandboxStatus::failed);
  EXPECT_NE(r.output.find("MemoryError"), std::string::npos) << r.output;
  EXPECT_LT(r.wall_s, 2.0);
  // Growing until refused (touching every page is slow on a busy machine: the wall-clock
  // limit may end it first; either way it fails within the limit).
  auto r2 = run_python("a = []\nwhile True:\n    a.append(bytearray(50 << 20))\n", fast());
  EXPECT_FALSE(r2.passed());
  EXPECT_LT(r2.wall_s, 3.5);
}

TEST(Sandbox, HugeFileFails) {
  auto r = run_python("with open('big', 'wb') as f:\n    for i in range(64):\n"
                      "        f.write(b'x' * (1 << 20))\n", fast());
  EXPECT_FALSE(r.passed());
  EXPECT_LT(r.wall_s, 2.0);
}

TEST(Sandbox, StdinIsClosed) {
  auto r = run_python("import sys\ndata = sys.stdin.read()\n", fast());
  EXPECT_EQ(r.status, SandboxStatus::failed) << r.output;
  auto r2 = run_python("x = input()\n", fast());
  EXPECT_EQ(r2.status, SandboxStatus::failed) << r2.output;
  EXPECT_LT(r2.wall_s, 2.0);
}

TEST(Sandbox, NoNetwork) {
  // A listener on the host's loopback: reachable from any process outside the sandbox.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  const std::string prog = "import socket\ns = socket.create_connection(('127.0.0.1', " +
                           std::to_string(port) + "), timeout=1)\nprint('connected')\n";
  auto r = run_python(prog, fast());
  close(fd);
  EXPECT_TRUE(r.network_isolated);
  EXPECT_EQ(r.status, SandboxStatus::failed) << r.output;
  EXPECT_EQ(r.output.find("connected"), std::string::npos);
  auto dns = run_python("import socket\nsocket.getaddrinfo('example.com', 80)\n", fast());
  EXPECT_FALSE(dns.passed());
}

TEST(Sandbox, BadOptionsAreErrors) {
  SandboxOptions o;
  o.timeout_s = 0;
  EXPECT_THROW(run_python("pass\n", o), std::exception);
  o = fast();
  o.python = "/nonexistent/python3";
  EXPECT_EQ(run_python("pass\n", o).status, SandboxStatus::failed);  // exec fails: 127
}

}  // namespace
}  // namespace efim::eval
