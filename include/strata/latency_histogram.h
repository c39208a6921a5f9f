#pragma once
// LatencyHistogram: how long calls took, in fixed log-spaced buckets (50 us to 10 s in 1-2-5
// steps, and one past 10 s), with their count and sum -- what a Prometheus histogram exports, and
// enough to estimate percentiles without keeping every sample. The remote KV tier records its
// get and put round trips in two (EngineTotals); /metrics exports them and strata bench prints
// their p50 / p99.
//
// A value type: not thread-safe (its owner locks). Cost: observe() is a scan of 17 bounds.

#include <array>
#include <cstddef>
#include <cstdint>

namespace strata {

class LatencyHistogram {
 public:
  // Upper bounds of the buckets, seconds; bucket i holds (kBounds[i-1], kBounds[i]], the last
  // (index kBounds.size()) what is above 10 s.
  static constexpr std::array<double, 17> kBounds = {50e-6,  100e-6, 200e-6, 500e-6, 1e-3,   2e-3,
                                                     5e-3,   10e-3,  20e-3,  50e-3,  100e-3, 200e-3,
                                                     500e-3, 1.0,    2.0,    5.0,    10.0};
  static constexpr size_t kNumBuckets = kBounds.size() + 1;

  // A negative or NaN duration counts as 0.
  void observe(double seconds);
  // Adds other's observations.
  void merge(const LatencyHistogram& other);
  // Adds observations as a Prometheus histogram exports them: le[i] at or below kBounds[i]
  // (non-decreasing in i; a decrease counts as none), count in all, their sum. How a client of
  // /metrics rebuilds one (or the difference of two scrapes).
  void add_cumulative(const std::array<int64_t, kBounds.size()>& le, int64_t count, double sum);

  int64_t count() const { return count_; }
  double sum_seconds() const { return sum_; }
  // Observations in bucket i (< kNumBuckets).
  int64_t bucket(size_t i) const { return counts_.at(i); }
  // Observations at or below kBounds[i] (i < kBounds.size()): Prometheus's `le` bucket.
  int64_t cumulative(size_t i) const;

  // The q-quantile (q in [0, 1], clamped), estimated as Prometheus's histogram_quantile does:
  // linearly within the bucket that holds it (the first from 0); 10 s when it lies past the last
  // bound; 0 when empty.
  double quantile(double q) const;

 private:
  std::array<int64_t, kNumBuckets> counts_{};
  int64_t count_ = 0;
  double sum_ = 0.0;
};

}  // namespace strata
