// MaskThread: a step's masks are made off the step thread, and the signal the device waits on
// moves only once they are written -- on every path out of a step.

#include "model/mask_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace strata::model {
namespace {

uint32_t load(const uint32_t& word) {
  return std::atomic_ref<const uint32_t>(word).load(std::memory_order_acquire);
}

TEST(MaskThreadTest, TheSignalMovesOnlyAfterTheFillHasWrittenEveryMask) {
  uint32_t signal[2] = {99, 99};
  MaskThread t(signal);
  EXPECT_EQ(load(signal[0]), 0u);
  EXPECT_EQ(load(signal[1]), 0u);
  std::vector<uint64_t> a(4, 0), b(4, 0);
  std::vector<uint64_t*> masks{a.data(), b.data()};
  std::atomic<bool> go{false};
  std::thread::id filler;
  t.arm();
  EXPECT_EQ(load(signal[0]), 1u) << "the step's number, before any launch";
  EXPECT_EQ(load(signal[1]), 0u);
  t.start(
      [&](std::span<uint64_t* const> m) {
        filler = std::this_thread::get_id();
        while (!go.load()) std::this_thread::yield();
        for (size_t i = 0; i < m.size(); ++i) m[i][0] = i + 1;
      },
      masks);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(load(signal[1]), 0u) << "signalled before the fill returned";
  go = true;
  t.finish();
  EXPECT_EQ(load(signal[1]), 1u);
  EXPECT_EQ(a[0], 1u);
  EXPECT_EQ(b[0], 2u);
  EXPECT_NE(filler, std::this_thread::get_id()) << "the fill must not run on the step thread";
}

TEST(MaskThreadTest, AStepWithoutMasksOrThatNeverStartsStillSignals) {
  uint32_t signal[2] = {0, 0};
  MaskThread t(signal);
  t.arm();
  t.release();
  EXPECT_EQ(load(signal[1]), 1u);
  t.finish();
  t.arm();  // an error before the masks were handed over: finish() alone signals
  EXPECT_EQ(load(signal[1]), 1u);
  t.finish();
  EXPECT_EQ(load(signal[0]), 2u);
  EXPECT_EQ(load(signal[1]), 2u);
  t.arm();  // and a step that never finishes is signalled by the next arm()
  t.arm();
  EXPECT_EQ(load(signal[0]), 4u);
  EXPECT_EQ(load(signal[1]), 3u);
}

TEST(MaskThreadTest, DestroyingWithAFillUnderWayWaitsForItAndSignals) {
  uint32_t signal[2] = {0, 0};
  std::vector<uint64_t> a(1, 0);
  std::vector<uint64_t*> masks{a.data()};
  {
    MaskThread t(signal);
    t.arm();
    t.start(
        [](std::span<uint64_t* const> m) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          m[0][0] = 7;
        },
        masks);
  }
  EXPECT_EQ(a[0], 7u);
  EXPECT_EQ(load(signal[1]), 1u);
}

TEST(MaskThreadTest, ManyStepsInARowEachSignalTheirOwnNumber) {
  uint32_t signal[2] = {0, 0};
  MaskThread t(signal);
  std::vector<uint64_t> a(1, 0);
  std::vector<uint64_t*> masks{a.data()};
  for (uint32_t step = 1; step <= 200; ++step) {
    t.arm();
    if (step % 3 == 0) {
      t.release();
    } else {
      t.start([step](std::span<uint64_t* const> m) { m[0][0] = step; }, masks);
    }
    t.finish();
    ASSERT_EQ(load(signal[0]), step);
    ASSERT_EQ(load(signal[1]), step);
    if (step % 3 != 0) {
      ASSERT_EQ(a[0], step);
    }
  }
}

}  // namespace
}  // namespace strata::model
