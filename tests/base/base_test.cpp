#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/mmap_file.h"
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

// Both map modes give the file's exact bytes; the huge-page copy is 2 MB aligned, private, and
// survives moves; errors name the path.
TEST(MappedFile, HugePageCopyEqualsTheFile) {
  const std::string path = ::testing::TempDir() + "/efim_mapped_file_test.bin";
  std::string bytes(3 * 1024 * 1024 + 17, '\0');  // not a multiple of the page size
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131 + 7) % 251);
  efim::write_file(path, bytes);

  efim::MappedFile shared(path);
  efim::MappedFile copy(path, efim::MapMode::kPrivateHugePages);
  ASSERT_EQ(shared.size(), bytes.size());
  ASSERT_EQ(copy.size(), bytes.size());
  EXPECT_FALSE(shared.is_private_copy());
  EXPECT_TRUE(copy.is_private_copy());  // 3 MB is far below half of any test machine's memory
  EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.data()) % (2u << 20), 0u);
  EXPECT_EQ(0, std::memcmp(shared.data(), bytes.data(), bytes.size()));
  EXPECT_EQ(0, std::memcmp(copy.data(), bytes.data(), bytes.size()));

  efim::MappedFile moved(std::move(copy));
  EXPECT_EQ(copy.data(), nullptr);
  EXPECT_TRUE(moved.is_private_copy());
  EXPECT_EQ(0, std::memcmp(moved.data(), bytes.data(), bytes.size()));
  moved = efim::MappedFile(path);  // releases the copy, takes a shared mapping
  EXPECT_FALSE(moved.is_private_copy());
  EXPECT_EQ(0, std::memcmp(moved.data(), bytes.data(), bytes.size()));

  efim::write_file(path, "");
  efim::MappedFile empty(path, efim::MapMode::kPrivateHugePages);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
  std::remove(path.c_str());
  try {
    efim::MappedFile missing(path, efim::MapMode::kPrivateHugePages);
    FAIL() << "no error for a missing file";
  } catch (const efim::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// discard gives back the whole 2 MB pages inside a range of the private copy (they read as
// zeros after), keeps every byte outside them, and does nothing on a shared mapping or outside
// the file.
TEST(MappedFile, DiscardGivesBackWholeHugePagesOnly) {
  const std::string path = ::testing::TempDir() + "/efim_mapped_discard_test.bin";
  const size_t mb2 = size_t{2} << 20;
  std::string bytes(5 * mb2 + 100, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(1 + i % 250);  // no 0
  efim::write_file(path, bytes);
  efim::MappedFile shared(path), copy(path, efim::MapMode::kPrivateHugePages);
  ASSERT_TRUE(copy.is_private_copy());
  EXPECT_EQ(shared.discard(shared.data() + 10, 3 * mb2), 0u);
  EXPECT_EQ(copy.discard(copy.data() + 10, 6 * mb2), 0u);  // past the end
  // [mb2 / 2, 4 mb2 + 7) holds whole pages 1, 2 and 3.
  ASSERT_EQ(copy.discard(copy.data() + mb2 / 2, 3 * mb2 + mb2 / 2 + 7), 3 * mb2);
  for (size_t i = 0; i < bytes.size(); i += 4093) {
    const bool gone = i >= mb2 && i < 4 * mb2;
    EXPECT_EQ(copy.data()[i], gone ? 0 : static_cast<uint8_t>(bytes[i])) << i;
  }
  EXPECT_EQ(copy.data()[mb2 - 1], static_cast<uint8_t>(bytes[mb2 - 1]));
  EXPECT_EQ(copy.data()[4 * mb2], static_cast<uint8_t>(bytes[4 * mb2]));
  EXPECT_EQ(copy.discard(copy.data() + 4 * mb2 + 1, mb2), 0u);  // no whole page inside
  std::remove(path.c_str());
}
