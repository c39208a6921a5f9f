#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace strata {
namespace {

struct Chunk {
  int64_t begin;
  int64_t end;
  std::thread::id thread;
};

// Runs one parallel_for and returns the chunks fn was called with, sorted by begin.
std::vector<Chunk> record_chunks(ThreadPool& pool, int64_t n, int64_t min_chunk,
                                 std::vector<int>* hits = nullptr) {
  std::mutex mu;
  std::vector<Chunk> chunks;
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        if (hits != nullptr) {
          // Each index belongs to exactly one chunk, so these plain writes never race.
          for (int64_t i = begin; i < end; ++i) ++(*hits)[static_cast<size_t>(i)];
        }
        std::lock_guard<std::mutex> lock(mu);
        chunks.push_back({begin, end, std::this_thread::get_id()});
      },
      min_chunk);
  std::sort(chunks.begin(), chunks.end(),
            [](const Chunk& a, const Chunk& b) { return a.begin < b.begin; });
  return chunks;
}

TEST(ThreadPoolTest, NumThreadsCountsTheCaller) {
  for (int t = 1; t <= 4; ++t) {
    ThreadPool pool(t);
    EXPECT_EQ(pool.num_threads(), t);
  }
}

TEST(ThreadPoolTest, ZeroThreadsMeansHardwareConcurrency) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.num_threads(),
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(ThreadPoolTest, ParallelForCoversEveryIndexExactlyOnce) {
  const std::vector<int64_t> sizes = {1,  2,  3,  4,  5,  7,   8,    9,    15,
                                      16, 17, 31, 64, 97, 100, 1000, 1023, 4097};
  const std::vector<int64_t> min_chunks = {1, 2, 3, 7, 16, 64, 1000, 5000};
  for (int t = 1; t <= 4; ++t) {
    ThreadPool pool(t);
    for (const int64_t n : sizes) {
      for (const int64_t min_chunk : min_chunks) {
        SCOPED_TRACE(testing::Message()
                     << "threads " << t << " n " << n << " min_chunk " << min_chunk);
        std::vector<int> hits(static_cast<size_t>(n), 0);
        const std::vector<Chunk> chunks = record_chunks(pool, n, min_chunk, &hits);
        ASSERT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
        // Contiguous, non-empty, disjoint chunks tiling [0, n), at most one per participant.
        ASSERT_FALSE(chunks.empty());
        ASSERT_LE(chunks.size(), static_cast<size_t>(t));
        int64_t expected_begin = 0;
        for (const Chunk& c : chunks) {
          ASSERT_EQ(c.begin, expected_begin);
          ASSERT_LT(c.begin, c.end);
          expected_begin = c.end;
        }
        ASSERT_EQ(expected_begin, n);
      }
    }
  }
}

TEST(ThreadPoolTest, ChunksAreAtLeastMinChunkExceptTheLast) {
  for (int t = 1; t <= 4; ++t) {
    ThreadPool pool(t);
    for (int64_t n = 1; n <= 200; ++n) {
      for (const int64_t min_chunk : {1, 3, 10, 33, 64}) {
        const std::vector<Chunk> chunks = record_chunks(pool, n, min_chunk);
        for (size_t i = 0; i + 1 < chunks.size(); ++i) {
          ASSERT_GE(chunks[i].end - chunks[i].begin, min_chunk)
              << "threads " << t << " n " << n << " min_chunk " << min_chunk;
        }
        if (n <= min_chunk) {
          ASSERT_EQ(chunks.size(), 1u) << "a loop no longer than min_chunk is one chunk";
        }
      }
    }
  }
}

TEST(ThreadPoolTest, LoopNoLongerThanMinChunkRunsInlineOnTheCaller) {
  ThreadPool pool(4);
  const std::vector<Chunk> chunks = record_chunks(pool, 50, 64);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].begin, 0);
  EXPECT_EQ(chunks[0].end, 50);
  EXPECT_EQ(chunks[0].thread, std::this_thread::get_id());
}

TEST(ThreadPoolTest, SingleThreadPoolRunsEverythingInlineAsOneChunk) {
  ThreadPool pool(1);
  const std::vector<Chunk> chunks = record_chunks(pool, 1000, 1);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].begin, 0);
  EXPECT_EQ(chunks[0].end, 1000);
  EXPECT_EQ(chunks[0].thread, std::this_thread::get_id());
}

TEST(ThreadPoolTest, ChunksRunOnPoolThreadsOnly) {
  // Which participant claims which chunk is not fixed (a worker that is late claims nothing and
  // the caller runs its chunk), but every chunk runs on the caller or on one of the workers.
  for (int t = 2; t <= 4; ++t) {
    ThreadPool pool(t);
    std::set<std::thread::id> threads;
    for (int call = 0; call < 200; ++call) {
      const std::vector<Chunk> chunks = record_chunks(pool, 1000, 1);
      ASSERT_EQ(chunks.size(), static_cast<size_t>(t));
      for (const Chunk& c : chunks) threads.insert(c.thread);
    }
    EXPECT_LE(threads.size(), static_cast<size_t>(t));
    EXPECT_EQ(threads.count(std::this_thread::get_id()), 1u) << "the caller always takes part";
  }
}

TEST(ThreadPoolTest, ACallerExceptionIsRethrownAfterClaimedChunksFinish) {
  ThreadPool pool(3);
  const std::thread::id caller = std::this_thread::get_id();
  for (int call = 0; call < 200; ++call) {
    std::atomic<int> running{0};
    bool caller_ran = false;  // workers may claim every chunk before the caller claims one
    bool thrown = false;
    try {
      pool.parallel_for(300, [&](int64_t, int64_t) {
        ++running;
        if (std::this_thread::get_id() == caller) {
          caller_ran = true;
          --running;
          throw std::runtime_error("caller chunk");
        }
        volatile int spin = 2000;
        while (spin > 0) spin = spin - 1;
        --running;
      });
    } catch (const std::runtime_error&) {
      thrown = true;
    }
    EXPECT_EQ(thrown, caller_ran);
    EXPECT_EQ(running.load(), 0) << "parallel_for returned while a chunk was running";
  }
  // The pool still works afterwards.
  std::vector<int> hits(100, 0);
  record_chunks(pool, 100, 1, &hits);
  EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
}

TEST(ThreadPoolTest, NonPositiveSizeNeverCallsFn) {
  ThreadPool pool(3);
  int calls = 0;
  pool.parallel_for(0, [&](int64_t, int64_t) { ++calls; });
  pool.parallel_for(-5, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPoolTest, NonPositiveMinChunkActsAsOne) {
  ThreadPool pool(2);
  for (const int64_t min_chunk : {0, -3}) {
    std::vector<int> hits(10, 0);
    const std::vector<Chunk> chunks = record_chunks(pool, 10, min_chunk, &hits);
    EXPECT_EQ(chunks.size(), 2u);
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  }
}

TEST(ThreadPoolTest, ManyConsecutiveCallsEachSeeAllTheirWork) {
  // Alternates parallel and inline-sized loops so every worker sees many generations, including
  // calls in which it has no chunk.
  ThreadPool pool(4);
  for (int call = 0; call < 3000; ++call) {
    const int64_t n = 1 + (call * 37) % 61;
    const int64_t min_chunk = 1 + call % 5;
    std::vector<int64_t> out(static_cast<size_t>(n), 0);
    pool.parallel_for(
        n,
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) out[static_cast<size_t>(i)] = i * 2 + call;
        },
        min_chunk);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[static_cast<size_t>(i)], i * 2 + call) << "call " << call << " index " << i;
    }
  }
}

TEST(ThreadPoolTest, ResultsDoNotDependOnThreadCount) {
  std::vector<double> reference;
  for (int t = 1; t <= 4; ++t) {
    ThreadPool pool(t);
    std::vector<double> out(777, 0.0);
    pool.parallel_for(777, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        out[static_cast<size_t>(i)] = static_cast<double>(i) * 0.5 - 3.0;
      }
    });
    if (t == 1) {
      reference = out;
    } else {
      EXPECT_EQ(out, reference) << "threads " << t;
    }
  }
}

TEST(ThreadPoolTest, DestructionWithIdleWorkersJoins) {
  // Workers that never got a job, and workers idle after jobs, both shut down promptly.
  for (int round = 0; round < 50; ++round) {
    ThreadPool never_used(4);
    (void)never_used;
  }
  for (int round = 0; round < 50; ++round) {
    auto pool = std::make_unique<ThreadPool>(1 + round % 4);
    std::atomic<int64_t> sum{0};
    pool->parallel_for(100, [&](int64_t begin, int64_t end) {
      int64_t local = 0;
      for (int64_t i = begin; i < end; ++i) local += i;
      sum += local;
    });
    EXPECT_EQ(sum.load(), 4950);
    pool.reset();
  }
}

TEST(ThreadPoolTest, BackToBackCallsHandOffWithoutLosingAJob) {
  // Calls a few microseconds apart (workers still polling) and uneven chunks (the caller or a
  // worker finishes first and waits): every call must see every index exactly once, none may hang.
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::vector<int64_t> hits(64, 0);
    for (int call = 0; call < 4000; ++call) {
      pool.parallel_for(64, [&](int64_t begin, int64_t end) {
        volatile int64_t spin = (begin == 0 && call % 7 == 0) ? 2000 : 0;
        while (spin > 0) spin = spin - 1;
        for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
      });
    }
    for (int64_t h : hits) EXPECT_EQ(h, 4000) << threads << " threads";
  }
}

}  // namespace
}  // namespace strata
