// tests/cpu/thread_pool_test.cpp: the worker pool behind apply() and apply_cos_sin()
// (src/cpu/thread_pool.hpp): parallel_rows covers every row exactly once in contiguous chunks,
// uses as many threads as the call is worth, propagates exceptions, and serves concurrent
// callers one after another; set_num_threads and $ROTARY_NUM_THREADS are checked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "cpu/kernels.hpp"
#include "cpu/thread_pool.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// Restores the thread count a test changes.
struct RestoreThreads {
  int saved = num_threads();
  ~RestoreThreads() { set_num_threads(saved); }
};

constexpr int64_t kLarge = int64_t{1} << 24;  // elements: worth every thread (2^19 per thread)

TEST(ThreadPool, ParallelRowsCoversEveryRowOnceInContiguousChunks) {
  RestoreThreads restore;
  for (int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{1000}}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(rows));
      std::mutex mutex;
      std::vector<std::pair<int64_t, int64_t>> chunks;
      std::set<std::thread::id> workers;
      cpu::parallel_rows(rows, kLarge, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) seen[static_cast<size_t>(r)].fetch_add(1);
        std::lock_guard<std::mutex> lock(mutex);
        chunks.emplace_back(begin, end);
        workers.insert(std::this_thread::get_id());
      });
      for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(seen[static_cast<size_t>(r)].load(), 1) << "row " << r;
      EXPECT_EQ(static_cast<int64_t>(chunks.size()), std::min<int64_t>(threads, rows)) << threads << " threads";
      for (const auto& [begin, end] : chunks) EXPECT_LT(begin, end);
      EXPECT_LE(static_cast<int64_t>(workers.size()), threads);
    }
  }
}

TEST(ThreadPool, SmallCallsRunOnTheCallingThread) {
  RestoreThreads restore;
  set_num_threads(4);
  std::vector<std::thread::id> ran;
  // 2^19 elements per thread is the threshold: a call of 2^19 elements is worth one thread.
  cpu::parallel_rows(64, int64_t{1} << 19, [&](int64_t, int64_t) { ran.push_back(std::this_thread::get_id()); });
  ASSERT_EQ(ran.size(), 1u);
  EXPECT_EQ(ran[0], std::this_thread::get_id());
}

TEST(ThreadPool, ExceptionsReachTheCallerAndThePoolStaysUsable) {
  RestoreThreads restore;
  set_num_threads(3);
  EXPECT_THAT([] {
    cpu::parallel_rows(30, kLarge, [](int64_t begin, int64_t) {
      if (begin > 0) throw Error("a worker failed");
    });
  }, ThrowsMessage<Error>(HasSubstr("a worker failed")));
  std::atomic<int64_t> total{0};
  cpu::parallel_rows(30, kLarge, [&](int64_t begin, int64_t end) { total += end - begin; });
  EXPECT_EQ(total.load(), 30);
}

TEST(ThreadPool, ConcurrentCallersEachGetEveryRow) {
  RestoreThreads restore;
  set_num_threads(2);
  constexpr int kCallers = 4;
  constexpr int64_t kRows = 512;
  std::vector<std::atomic<int64_t>> sums(kCallers);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 20; ++round) {
        cpu::parallel_rows(kRows, kLarge, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) sums[static_cast<size_t>(c)] += r;
        });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(sums[static_cast<size_t>(c)].load(), 20 * kRows * (kRows - 1) / 2);
}

TEST(ThreadPool, ThreadCountIsChecked) {
  RestoreThreads restore;
  EXPECT_THAT([] { set_num_threads(0); }, ThrowsMessage<Error>(HasSubstr("set_num_threads: n must be in [1, 256] (got 0)")));
  EXPECT_THAT([] { set_num_threads(257); },
              ThrowsMessage<Error>(HasSubstr("set_num_threads: n must be in [1, 256] (got 257)")));
  set_num_threads(5);
  EXPECT_EQ(num_threads(), 5);
}

TEST(ThreadPool, DefaultThreadsReadsRotaryNumThreads) {
  const char* saved = std::getenv("ROTARY_NUM_THREADS");
  const std::string saved_value = saved != nullptr ? saved : "";
  setenv("ROTARY_NUM_THREADS", "3", 1);
  EXPECT_EQ(cpu::default_threads(), 3);
  for (const char* bad : {"0", "257", "2x", "-1"}) {
    setenv("ROTARY_NUM_THREADS", bad, 1);
    EXPECT_THAT([] { cpu::default_threads(); },
                ThrowsMessage<Error>(HasSubstr(std::string("ROTARY_NUM_THREADS must be an integer in [1, 256] (got \"") +
                                               bad + "\")")));
  }
  if (saved != nullptr) {
    setenv("ROTARY_NUM_THREADS", saved_value.c_str(), 1);
  } else {
    unsetenv("ROTARY_NUM_THREADS");
  }
  EXPECT_GE(cpu::default_threads(), 1);
}

}  // namespace
}  // namespace rotary
