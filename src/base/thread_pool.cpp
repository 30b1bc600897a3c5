#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EFIM_CPU_RELAX() _mm_pause()
#else
#define EFIM_CPU_RELAX() std::this_thread::yield()
#endif

namespace efim {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::default_threads() {
  if (const char* env = std::getenv("EFIM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

template <typename Pred>
bool ThreadPool::spin_until(Pred pred) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 0;; ++i) {
    if (pred()) return true;
    // Pause first (a hand-off within microseconds); later yield, so that on an oversubscribed
    // machine the thread we wait for gets the core instead of a spinner.
    if (i < 1024) {
      EFIM_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
    if ((i & 63) == 63 && Clock::now() > deadline) return pred();
  }
}

void ThreadPool::run_chunks(int index) {
  for (;;) {
    int64_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= n_) break;
    (*fn_)(index, begin, std::min(n_, begin + grain_));
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto started = [&] { return stop_.load() || generation_.load() != seen; };
    if (!spin_until(started)) {
      std::unique_lock<std::mutex> lock(mu_);
      // sleepers_ is raised under the lock before the predicate is re-checked, and the caller
      // bumps generation_ before it reads sleepers_: one of the two sees the other (seq_cst).
      sleepers_.fetch_add(1);
      start_cv_.wait(lock, started);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load();
    // Join, then check the job is still open: the caller closes it before it waits for
    // active_ == 0, so either it waits for us or we see it closed (seq_cst on both sides).
    // A job opened after that one has its fields written before job_open_ is set again.
    active_.fetch_add(1);
    if (job_open_.load()) run_chunks(index);
    if (active_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, 0, n);
    return;
  }
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  next_.store(0, std::memory_order_relaxed);
  job_open_.store(true);
  generation_.fetch_add(1);  // publishes the job
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    start_cv_.notify_all();
  }
  run_chunks(0);
  job_open_.store(false);  // every chunk is handed out; late workers skip this job
  auto done = [&] { return active_.load() == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_.store(true);
    done_cv_.wait(lock, done);
    caller_sleeping_.store(false);
  }
  fn_ = nullptr;
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  // Dynamic hand-out may give one thread two chunks, so fn receives the chunk index
  // (0..n_threads-1), each exactly once, not the thread index.
  std::function<void(int, int64_t, int64_t)> by_chunk = [&](int, int64_t b, int64_t) {
    fn(static_cast<int>(b));
  };
  parallel_for(n_threads_, 1, by_chunk);
}

}  // namespace efim
