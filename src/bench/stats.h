#pragma once
// Percentiles and distribution summaries for bench metrics.
//
// percentile() interpolates linearly between the two closest ranks (numpy's default, "linear"):
// for sorted x[0..n-1] and p in [0, 100], rank = p / 100 x (n - 1), and the result is
// x[floor(rank)] + frac(rank) x (x[ceil(rank)] - x[floor(rank)]).

#include <cstdint>
#include <span>
#include <vector>

namespace strata::bench {

// values need not be sorted; empty -> 0. p outside [0, 100] is a programmer error.
double percentile(std::span<const double> values, double p);
// The same on already sorted values (no copy).
double percentile_sorted(std::span<const double> sorted, double p);

struct Distribution {
  int64_t count = 0;
  double mean = 0.0;
  double p50 = 0.0;
  double p90 = 0.0;
  double p99 = 0.0;
  double max = 0.0;
};

// Sorts values in place. Empty -> count 0 and zeros.
Distribution summarize(std::vector<double>& values);

}  // namespace strata::bench
