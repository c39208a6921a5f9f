#include "bench/stats.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata::bench {
namespace {

TEST(PercentileTest, LinearInterpolationBetweenRanks) {
  const std::vector<double> v = {4, 1, 3, 2, 5};  // sorted 1..5
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 3);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 4.6);   // rank 3.6
  EXPECT_DOUBLE_EQ(percentile(v, 25), 2);     // rank 1
  EXPECT_DOUBLE_EQ(percentile(v, 99), 4.96);  // rank 3.96
}

TEST(PercentileTest, MatchesNumpyOnAHundredValues) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  // numpy.percentile(range(1, 101), [50, 90, 99]) = 50.5, 90.1, 99.01
  EXPECT_DOUBLE_EQ(percentile(v, 50), 50.5);
  EXPECT_NEAR(percentile(v, 90), 90.1, 1e-12);
  EXPECT_NEAR(percentile(v, 99), 99.01, 1e-12);
}

TEST(PercentileTest, EmptyAndSingle) {
  EXPECT_EQ(percentile(std::vector<double>{}, 50), 0.0);
  EXPECT_EQ(percentile(std::vector<double>{7}, 99), 7.0);
}

TEST(SummarizeTest, MeanPercentilesAndMax) {
  std::vector<double> v = {10, 0, 5, 5};
  const Distribution d = summarize(v);
  EXPECT_EQ(d.count, 4);
  EXPECT_DOUBLE_EQ(d.mean, 5);
  EXPECT_DOUBLE_EQ(d.p50, 5);
  EXPECT_DOUBLE_EQ(d.p90, 8.5);  // rank 2.7: 5 + 0.7 x 5
  EXPECT_DOUBLE_EQ(d.max, 10);
  std::vector<double> none;
  EXPECT_EQ(summarize(none).count, 0);
}

}  // namespace
}  // namespace strata::bench
