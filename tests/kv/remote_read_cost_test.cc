// RemoteReadCost: a read is made while nothing is measured; once steps and reads are, a read pays
// when its queue and its own blocks at the reads' seconds per block end before the tokens queued
// before the request and its own would be computed at the steps' seconds per token; the means
// follow later samples.

#include "kv/remote_read_cost.h"

#include <gtest/gtest.h>

namespace strata::kv {
namespace {

TEST(RemoteReadCostTest, ReadsPayUntilMeasuredThenWhenTheyEndBeforeTheCompute) {
  RemoteReadCost c;
  EXPECT_TRUE(c.read_pays(1000, 1000, 1));  // nothing measured: read
  c.observe_step(1000, 0.1);                // 100 us a token
  EXPECT_FALSE(c.known());
  EXPECT_TRUE(c.read_pays(1000, 1000, 1));
  c.observe_read(10, 0.01);  // 1 ms a block
  ASSERT_TRUE(c.known());
  EXPECT_DOUBLE_EQ(c.compute_seconds(16), 16 * 1e-4);
  EXPECT_DOUBLE_EQ(c.read_seconds(2, 3), 5 * 1e-3);
  // 4 blocks of 16 tokens: reading them takes 4 ms, computing them 6.4 ms.
  EXPECT_TRUE(c.read_pays(4, 0, 64));
  // Behind 4 other blocks the read ends at 8 ms: computing is sooner...
  EXPECT_FALSE(c.read_pays(4, 4, 64));
  // ...unless 64 tokens queued before the request make the compute end at 12.8 ms.
  EXPECT_TRUE(c.read_pays(4, 4, 128));
}

TEST(RemoteReadCostTest, TheMeansFollowLaterSamplesAndIgnoreEmptyOnes) {
  RemoteReadCost c;
  c.observe_step(100, 1.0);
  c.observe_read(1, 1.0);
  c.observe_step(0, 5.0);  // nothing computed: no sample
  c.observe_read(4, 0.0);  // not timed: no sample
  EXPECT_DOUBLE_EQ(c.compute_seconds(100), 1.0);
  EXPECT_DOUBLE_EQ(c.read_seconds(1, 0), 1.0);
  for (int i = 0; i < 200; ++i) {
    c.observe_step(100, 0.01);
    c.observe_read(1, 3.0);
  }
  EXPECT_NEAR(c.compute_seconds(100), 0.01, 1e-4);
  EXPECT_NEAR(c.read_seconds(1, 0), 3.0, 1e-3);
}

}  // namespace
}  // namespace strata::kv
