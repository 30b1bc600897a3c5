#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "tensor/dtype.h"

using namespace efim;

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  for (int rep = 0; rep < 20; ++rep) {
    pool.parallel_for(1000, 7, [&](int, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
  }
  for (auto& h : hits) EXPECT_EQ(h.load(), 20);
}

TEST(ThreadPool, RunOnAllGivesEachIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> seen(4);
  pool.run_on_all([&](int i) { seen[i]++; });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
}

TEST(DType, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(DType, BF16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
}

TEST(DType, RowBytesChecksBlocks) {
  EXPECT_EQ(dtype_row_bytes(DType::Q8_0, 64), 68u);
  EXPECT_EQ(dtype_row_bytes(DType::BF16, 3), 6u);
  EXPECT_THROW(dtype_row_bytes(DType::Q4_0, 33), Error);
  EXPECT_THROW(dtype_from_name("q9"), Error);
}

TEST(ThreadPool, ManyTinyJobsBackToBack) {
  // The spin/sleep hand-off must neither lose a wake-up nor run a job twice, also when jobs
  // are separated by pauses longer than the spin window (workers asleep).
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 3000; ++rep) {
    pool.parallel_for(8, 1, [&](int, int64_t b, int64_t e) { sum += e - b; });
    if (rep % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(sum.load(), 3000 * 8);
}
