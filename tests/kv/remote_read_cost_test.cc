// RemoteReadCost: a read is made while nothing is measured; once steps and reads are, a read pays
// when its queue and its own blocks end before the tokens queued before the request and its own
// would be computed; the fits follow later samples, and price a long prompt at the steps'
// marginal seconds per token, not at the small steps' seconds / tokens.

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

// A GPU's steps: 10 ms of decode rows and launches in each, 25 us a prompt token. Steps of 100
// and of 2,048 tokens alternate; a prompt of 8,000 tokens costs 0.2 s, where the steps' mean
// seconds / tokens (62.5 us) would have said 0.62 s and read a prefix that computes sooner.
// Reads: 2 ms a round trip, 1.5 ms a block.
TEST(RemoteReadCostTest, ALongPromptCostsTheStepsMarginalSecondsPerToken) {
  RemoteReadCost c;
  for (int i = 0; i < 100; ++i) {
    for (const int64_t tokens : {int64_t{100}, int64_t{2048}}) {
      c.observe_step(tokens, 0.010 + 25e-6 * static_cast<double>(tokens));
    }
    for (const int64_t blocks : {int64_t{1}, int64_t{30}}) {
      c.observe_read(blocks, 0.002 + 1.5e-3 * static_cast<double>(blocks));
    }
  }
  EXPECT_NEAR(c.compute_seconds(8000), 0.2, 1e-3);
  EXPECT_NEAR(c.read_seconds(10, 0), 0.017, 1e-4);
  EXPECT_NEAR(c.read_seconds(10, 20), 2 * 0.002 + 30 * 1.5e-3, 1e-4) << "the queue's round trip";
  // 500 blocks (8,000 tokens): 0.75 s to read against 0.2 s to compute.
  EXPECT_FALSE(c.read_pays(500, 0, 8000));
  // Behind 40,000 tokens queued before it, the read ends first.
  EXPECT_TRUE(c.read_pays(500, 0, 48000));
}

TEST(RemoteReadCostTest, ALineThroughTheMeanWhenTheSizesDoNotVaryOrTheFitIsNotPositive) {
  LinearCost same;
  same.observe(10, 1.0);
  same.observe(10, 3.0);
  const double w = RemoteReadCost::kWeight;
  EXPECT_NEAR(same.per_unit(), (1.0 + w * (3.0 - 1.0)) / 10.0, 1e-12)
      << "the mean seconds over the mean units";
  EXPECT_DOUBLE_EQ(same.fixed(), 0.0);
  LinearCost falling;  // the bigger sample took less: no line with a positive slope
  falling.observe(10, 2.0);
  falling.observe(20, 1.0);
  EXPECT_NEAR(falling.per_unit(), (2.0 + w * (1.0 - 2.0)) / (10.0 + w * (20.0 - 10.0)), 1e-12);
  EXPECT_DOUBLE_EQ(falling.fixed(), 0.0);
}

// Blocks live 2 s in the host tier before they are taken for others: a request behind 10,000
// tokens (1 s of compute) finds what is read for it now, one behind 30,000 (3 s) would not.
TEST(RemoteReadCostTest, AReadLandsInTimeWhenTheRequestComesUpBeforeItsBlocksAreEvicted) {
  RemoteReadCost c;
  EXPECT_TRUE(c.lands_in_time(1'000'000)) << "nothing measured";
  c.observe_residence(2.0);
  EXPECT_TRUE(c.lands_in_time(1'000'000)) << "the steps not measured";
  c.observe_step(1000, 0.1);
  EXPECT_TRUE(c.lands_in_time(10'000));
  EXPECT_FALSE(c.lands_in_time(30'000));
  for (int i = 0; i < 200; ++i) c.observe_residence(4.0);  // the tier churns less now
  EXPECT_TRUE(c.lands_in_time(30'000));
}

}  // namespace
}  // namespace strata::kv
