#include "strata/latency_histogram.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>

namespace strata {
namespace {

TEST(LatencyHistogramTest, ObservationsLandInTheBucketWhoseBoundHoldsThem) {
  LatencyHistogram h;
  h.observe(10e-6);  // bucket 0: (0, 50 us]
  h.observe(50e-6);  // bucket 0: a bound is inclusive
  h.observe(51e-6);  // bucket 1: (50, 100 us]
  h.observe(0.003);  // bucket 6: (2, 5 ms]
  h.observe(11.0);   // past 10 s
  EXPECT_EQ(h.count(), 5);
  EXPECT_EQ(h.bucket(0), 2);
  EXPECT_EQ(h.bucket(1), 1);
  EXPECT_EQ(h.bucket(6), 1);
  EXPECT_EQ(h.bucket(LatencyHistogram::kNumBuckets - 1), 1);
  EXPECT_EQ(h.cumulative(0), 2);
  EXPECT_EQ(h.cumulative(6), 4);
  EXPECT_EQ(h.cumulative(LatencyHistogram::kBounds.size() - 1), 4) << "le=10 leaves out 11 s";
  EXPECT_NEAR(h.sum_seconds(), 10e-6 + 50e-6 + 51e-6 + 0.003 + 11.0, 1e-12);
}

TEST(LatencyHistogramTest, QuantilesInterpolateWithinTheBucketAsPrometheusDoes) {
  LatencyHistogram h;
  EXPECT_EQ(h.quantile(0.5), 0.0) << "empty";
  // 100 observations in (1, 2 ms]: the median is halfway through the bucket.
  for (int i = 0; i < 100; ++i) h.observe(0.0015);
  EXPECT_NEAR(h.quantile(0.5), 0.0015, 1e-12);
  EXPECT_NEAR(h.quantile(0.99), 0.001 + 0.99 * 0.001, 1e-12);
  EXPECT_NEAR(h.quantile(1.0), 0.002, 1e-12);
  // One slow call in (100, 200 ms] is the p100 but not the p99.
  h.observe(0.15);
  EXPECT_LT(h.quantile(0.99), 0.002);
  EXPECT_GT(h.quantile(1.0), 0.1);
  EXPECT_LE(h.quantile(1.0), 0.2);
  // The first bucket interpolates from 0.
  LatencyHistogram fast;
  for (int i = 0; i < 4; ++i) fast.observe(1e-6);
  EXPECT_NEAR(fast.quantile(0.5), 25e-6, 1e-12);
}

TEST(LatencyHistogramTest, PastTheLastBoundIsTheLastBound) {
  LatencyHistogram h;
  h.observe(60.0);
  EXPECT_EQ(h.quantile(0.5), 10.0);
}

TEST(LatencyHistogramTest, BadInputNeverBreaksIt) {
  LatencyHistogram h;
  h.observe(-1.0);
  h.observe(std::numeric_limits<double>::quiet_NaN());
  h.observe(std::numeric_limits<double>::infinity());
  EXPECT_EQ(h.count(), 3);
  EXPECT_EQ(h.bucket(0), 2) << "negative and NaN count as 0";
  EXPECT_EQ(h.bucket(LatencyHistogram::kNumBuckets - 1), 1);
  EXPECT_TRUE(std::isfinite(h.sum_seconds()));
  EXPECT_EQ(h.quantile(std::numeric_limits<double>::quiet_NaN()), 0.0);
  EXPECT_EQ(h.quantile(-3.0), 0.0);
  EXPECT_EQ(h.quantile(7.0), 10.0);
}

TEST(LatencyHistogramTest, MergeAddsBucketsCountsAndSums) {
  LatencyHistogram a, b;
  a.observe(0.001);
  b.observe(0.001);
  b.observe(2.0);
  a.merge(b);
  EXPECT_EQ(a.count(), 3);
  EXPECT_EQ(a.bucket(4), 2);
  EXPECT_EQ(a.bucket(14), 1);
  EXPECT_NEAR(a.sum_seconds(), 2.002, 1e-12);
}

// What /metrics exports (cumulative buckets, count, sum) rebuilds the histogram, and the
// difference of two scrapes rebuilds what was observed between them.
TEST(LatencyHistogramTest, CumulativeBucketsRebuildItAndTheirDifferenceTheObservationsBetween) {
  LatencyHistogram before, after;
  for (const double s : {0.0002, 0.003, 0.003}) {
    before.observe(s);
    after.observe(s);
  }
  for (const double s : {0.04, 0.04, 0.04, 30.0}) after.observe(s);
  auto scrape = [](const LatencyHistogram& h) {
    std::array<int64_t, LatencyHistogram::kBounds.size()> le{};
    for (size_t i = 0; i < le.size(); ++i) le[i] = h.cumulative(i);
    return le;
  };
  LatencyHistogram rebuilt;
  rebuilt.add_cumulative(scrape(after), after.count(), after.sum_seconds());
  for (size_t i = 0; i < LatencyHistogram::kNumBuckets; ++i) {
    EXPECT_EQ(rebuilt.bucket(i), after.bucket(i)) << i;
  }
  EXPECT_EQ(rebuilt.quantile(0.5), after.quantile(0.5));
  std::array<int64_t, LatencyHistogram::kBounds.size()> delta{};
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = scrape(after)[i] - scrape(before)[i];
  LatencyHistogram between;
  between.add_cumulative(delta, after.count() - before.count(),
                         after.sum_seconds() - before.sum_seconds());
  EXPECT_EQ(between.count(), 4);
  EXPECT_EQ(between.bucket(9), 3) << "(20 ms, 50 ms]";
  EXPECT_EQ(between.bucket(LatencyHistogram::kNumBuckets - 1), 1) << "past 10 s";
  EXPECT_NEAR(between.sum_seconds(), 30.12, 1e-9);
  // A bucket that went down (a server restarted between scrapes) counts as none.
  delta.fill(0);
  delta[3] = -2;
  LatencyHistogram odd;
  odd.add_cumulative(delta, 0, 0.0);
  EXPECT_EQ(odd.count(), 0);
}

}  // namespace
}  // namespace strata
