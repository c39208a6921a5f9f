// engine::CompactionCopier: jobs run on its thread in submission order, wait() returns once all
// have run with the first error since the last wait(), and the destructor runs what is queued.
// The copy function is a fake that records the jobs (no pool, no sleep): a gate holds the first
// job so that later ones queue behind it.

#include "engine/compaction_copier.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <vector>

namespace strata::engine {
namespace {

struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;           // the gate: a job waits while it is closed
  std::vector<int64_t> seen;  // each job's first src
  Status copy(std::span<const kv::SlotCopy> copies) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return open; });
    seen.push_back(copies.front().src);
    return copies.front().src < 0 ? Status::Internal("bad slot") : Status::Ok();
  }
  void set_open(bool o) {
    {
      const std::lock_guard<std::mutex> lock(mu);
      open = o;
    }
    cv.notify_all();
  }
};

std::vector<kv::SlotCopy> job(int64_t src) { return {kv::SlotCopy{src, src + 1}}; }

TEST(CompactionCopierTest, RunsJobsInOrderAndWaitReturnsOnceAllHaveRun) {
  Recorder r;
  CompactionCopier copier([&](std::span<const kv::SlotCopy> c) { return r.copy(c); });
  EXPECT_FALSE(copier.busy());
  r.set_open(false);
  for (int64_t i = 0; i < 5; ++i) copier.submit(job(i));
  copier.submit({});  // nothing to copy: not a job
  EXPECT_TRUE(copier.busy());
  r.set_open(true);
  EXPECT_TRUE(copier.wait().ok());
  EXPECT_FALSE(copier.busy());
  EXPECT_EQ(r.seen, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(CompactionCopierTest, WaitReturnsTheFirstErrorOnceAndTheLaterJobsStillRun) {
  Recorder r;
  CompactionCopier copier([&](std::span<const kv::SlotCopy> c) { return r.copy(c); });
  copier.submit(job(-1));
  copier.submit(job(-2));
  copier.submit(job(3));
  const Status s = copier.wait();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(r.seen, (std::vector<int64_t>{-1, -2, 3}));
  EXPECT_TRUE(copier.wait().ok()) << "reported once";
}

TEST(CompactionCopierTest, TheDestructorRunsWhatIsQueued) {
  Recorder r;
  {
    CompactionCopier copier([&](std::span<const kv::SlotCopy> c) { return r.copy(c); });
    r.set_open(false);
    copier.submit(job(7));
    copier.submit(job(8));
    r.set_open(true);
  }
  EXPECT_EQ(r.seen, (std::vector<int64_t>{7, 8}));
}

}  // namespace
}  // namespace strata::engine
