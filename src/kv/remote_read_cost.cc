#include "kv/remote_read_cost.h"

#include <algorithm>

namespace strata::kv {
namespace {

// The first sample sets the mean; later ones move it by kWeight.
void update(double& mean, int64_t samples, double value) {
  mean = samples == 0 ? value : mean + RemoteReadCost::kWeight * (value - mean);
}

}  // namespace

void LinearCost::observe(double units, double seconds) {
  update(mx_, samples_, units);
  update(my_, samples_, seconds);
  update(mxx_, samples_, units * units);
  update(mxy_, samples_, units * seconds);
  ++samples_;
}

double LinearCost::per_unit() const {
  if (mx_ <= 0.0) return 0.0;
  const double var = mxx_ - mx_ * mx_;
  // Sizes that hardly vary (relative to their mean) leave the slope to noise.
  if (var > 1e-6 * mx_ * mx_) {
    const double slope = (mxy_ - mx_ * my_) / var;
    if (slope > 0.0 && my_ - slope * mx_ >= 0.0) return slope;
  }
  return my_ / mx_;
}

double LinearCost::fixed() const { return std::max(0.0, my_ - per_unit() * mx_); }

void RemoteReadCost::observe_step(int64_t tokens, double seconds) {
  if (tokens <= 0 || seconds <= 0.0) return;
  step_.observe(static_cast<double>(tokens), seconds);
}

void RemoteReadCost::observe_read(int64_t blocks, double seconds) {
  if (blocks <= 0 || seconds <= 0.0) return;
  read_.observe(static_cast<double>(blocks), seconds);
}

void RemoteReadCost::observe_residence(double seconds) {
  if (seconds < 0.0) return;
  update(residence_seconds_, residence_samples_, seconds);
  ++residence_samples_;
}

double RemoteReadCost::compute_seconds(int64_t tokens) const {
  return step_.per_unit() * static_cast<double>(tokens);
}

double RemoteReadCost::read_seconds(int64_t blocks, int64_t queued_blocks) const {
  const double trips = queued_blocks > 0 ? 2.0 : 1.0;
  return trips * read_.fixed() + read_.per_unit() * static_cast<double>(blocks + queued_blocks);
}

}  // namespace strata::kv
