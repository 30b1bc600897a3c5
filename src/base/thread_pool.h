// A fixed pool of worker threads for data-parallel loops over [0, n).
//
// A decode step of a small model issues ~100 parallel loops of a few microseconds each, so the
// hand-off must be cheap: workers spin on the job counter for a short while (kSpinMicros) after
// each job before they sleep on a condition variable, and the caller spins the same way while
// it waits for stragglers. An idle pool sleeps and costs nothing. Chunks are handed out
// dynamically and the caller only waits for workers that joined the job before it closed: on
// a busy machine a worker that is not scheduled in time is simply not waited for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace efim {

class ThreadPool {
 public:
  // n_threads counts the calling thread: a pool of 1 runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, begin, end) on disjoint chunks covering [0, n); chunks are handed
  // out dynamically in units of `grain`. Blocks until all chunks are done. Not re-entrant, and
  // fn must not throw (an exception on a worker thread ends the process).
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int, int64_t, int64_t)>& fn);

  // Calls fn(i) exactly once for each i in [0, size()), in parallel where threads are free.
  void run_on_all(const std::function<void(int)>& fn);

  // Threads to use by default: EFIM_THREADS, else the number of online CPUs.
  static int default_threads();

  // How long a worker (or the caller) spins before sleeping.
  static constexpr int kSpinMicros = 200;

 private:
  void worker(int index);
  void run_chunks(int index);
  // Spins up to kSpinMicros until pred() holds; returns pred().
  template <typename Pred>
  static bool spin_until(Pred pred);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};  // bumped once per job
  std::atomic<bool> job_open_{false};    // workers may still join the current job
  std::atomic<int> active_{0};           // workers inside a job
  std::atomic<int> sleepers_{0};         // workers waiting on start_cv_
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  // The current job (written before generation_ is bumped, read after it is observed).
  const std::function<void(int, int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
};

}  // namespace efim
