#include "strata/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace strata {

void LatencyHistogram::observe(double seconds) {
  if (!(seconds > 0.0)) seconds = 0.0;  // NaN too
  const auto* at = std::lower_bound(kBounds.begin(), kBounds.end(), seconds);
  ++counts_[static_cast<size_t>(at - kBounds.begin())];
  ++count_;
  if (std::isfinite(seconds)) sum_ += seconds;
}

void LatencyHistogram::merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < kNumBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
}

void LatencyHistogram::add_cumulative(const std::array<int64_t, kBounds.size()>& le,
                                      int64_t count, double sum) {
  int64_t below = 0;
  for (size_t i = 0; i < le.size(); ++i) {
    const int64_t n = std::max<int64_t>(0, le[i] - below);
    counts_[i] += n;
    below += n;
  }
  counts_[kBounds.size()] += std::max<int64_t>(0, count - below);
  count_ += std::max<int64_t>(0, count);
  sum_ += sum;
}

int64_t LatencyHistogram::cumulative(size_t i) const {
  int64_t n = 0;
  for (size_t b = 0; b <= i && b < kBounds.size(); ++b) n += counts_[b];
  return n;
}

double LatencyHistogram::quantile(double q) const {
  if (count_ == 0) return 0.0;
  q = std::clamp(std::isnan(q) ? 0.0 : q, 0.0, 1.0);
  // The rank of the observation sought, 1-based, as a fraction: q * count.
  const double rank = q * static_cast<double>(count_);
  int64_t below = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    const int64_t in = counts_[i];
    if (in > 0 && static_cast<double>(below + in) >= rank) {
      const double lo = i == 0 ? 0.0 : kBounds[i - 1];
      const double share = (rank - static_cast<double>(below)) / static_cast<double>(in);
      return lo + (kBounds[i] - lo) * std::clamp(share, 0.0, 1.0);
    }
    below += in;
  }
  return kBounds.back();
}

}  // namespace strata
