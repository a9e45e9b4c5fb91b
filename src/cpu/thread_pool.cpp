// src/cpu/thread_pool.cpp: the process-wide worker pool and parallel_rows (src/cpu/thread_pool.hpp).
#include "cpu/thread_pool.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "cpu/kernels.hpp"

namespace rotary {

namespace {

// A small persistent pool (Highway 1.0.3 has none). run(n, fn) calls fn(0..n-1), the caller
// taking tasks too; it returns when every task is done and rethrows the first exception.
class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    work_ready_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(int64_t tasks, const std::function<void(int64_t)>& fn) {
    if (tasks <= 0) return;
    if (tasks == 1 || workers_.empty()) {
      for (int64_t t = 0; t < tasks; ++t) fn(t);
      return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = &fn;
    num_tasks_ = tasks;
    next_task_ = 0;
    done_tasks_ = 0;
    error_ = nullptr;
    ++generation_;
    lock.unlock();
    work_ready_.notify_all();
    take_tasks();
    lock.lock();
    work_done_.wait(lock, [&] { return done_tasks_ == num_tasks_; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void take_tasks() {
    for (;;) {
      int64_t task = 0;
      const std::function<void(int64_t)>* job = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (job_ == nullptr || next_task_ >= num_tasks_) return;
        task = next_task_++;
        job = job_;
      }
      try {
        (*job)(task);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (++done_tasks_ == num_tasks_) work_done_.notify_all();
    }
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_ready_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      take_tasks();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t num_tasks_ = 0;
  int64_t next_task_ = 0;
  int64_t done_tasks_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace

int cpu::default_threads() {
  if (const char* env = std::getenv("ROTARY_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 256) return static_cast<int>(n);
    throw Error(detail::concat("ROTARY_NUM_THREADS must be an integer in [1, 256] (got \"", env, "\")"));
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(std::min(hardware, 256u));
}

namespace {

std::mutex g_pool_mutex;
std::unique_ptr<ThreadPool> g_pool;  // guarded by g_pool_mutex; created on first use
int g_threads = 0;                   // 0 = not yet decided

ThreadPool& pool_locked() {
  if (g_threads == 0) g_threads = cpu::default_threads();
  if (!g_pool || g_pool->size() != g_threads) {
    g_pool.reset();
    g_pool = std::make_unique<ThreadPool>(g_threads);
  }
  return *g_pool;
}


// A call is split only when each worker gets at least this many elements (q + k): waking a
// pool thread costs tens of microseconds on this VM, about what 2^19 float32 elements
// (4 MiB of traffic at ~20 GB/s) take. A decode step (64 sequences x 48 heads x 128 = 393k
// elements) therefore runs on the calling thread: `rotary bench` measured it slower on 2
// threads than on 1 with the earlier 2^16 threshold.
constexpr int64_t kMinElementsPerThread = int64_t{1} << 19;


}  // namespace

void set_num_threads(int n) {
  if (n < 1 || n > 256) throw Error(detail::concat("set_num_threads: n must be in [1, 256] (got ", n, ")"));
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  g_threads = n;
}

int num_threads() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (g_threads == 0) g_threads = cpu::default_threads();
  return g_threads;
}

void cpu::parallel_rows(int64_t rows, int64_t elements, const std::function<void(int64_t, int64_t)>& range) {
  if (rows <= 0) return;
  std::unique_lock<std::mutex> pool_lock(g_pool_mutex);
  ThreadPool& pool = pool_locked();
  const int64_t useful = std::max<int64_t>(1, std::min<int64_t>(pool.size(), elements / kMinElementsPerThread));
  const int64_t chunks = std::min(useful, rows);
  if (chunks <= 1) {
    pool_lock.unlock();
    range(0, rows);
    return;
  }
  // The pool runs one call at a time; concurrent callers wait for it.
  pool.run(chunks, [&](int64_t chunk) { range(rows * chunk / chunks, rows * (chunk + 1) / chunks); });
}

}  // namespace rotary
