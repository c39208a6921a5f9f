#include "kv/remote_read_cost.h"

namespace strata::kv {
namespace {

// The first sample sets the mean; later ones move it by kWeight.
void update(double& mean, int64_t& samples, double value) {
  mean = samples == 0 ? value : mean + RemoteReadCost::kWeight * (value - mean);
  ++samples;
}

}  // namespace

void RemoteReadCost::observe_step(int64_t tokens, double seconds) {
  if (tokens <= 0 || seconds <= 0.0) return;
  update(seconds_per_token_, step_samples_, seconds / static_cast<double>(tokens));
}

void RemoteReadCost::observe_read(int64_t blocks, double seconds) {
  if (blocks <= 0 || seconds <= 0.0) return;
  update(seconds_per_block_, read_samples_, seconds / static_cast<double>(blocks));
}

double RemoteReadCost::compute_seconds(int64_t tokens) const {
  return seconds_per_token_ * static_cast<double>(tokens);
}

double RemoteReadCost::read_seconds(int64_t blocks, int64_t queued_blocks) const {
  return seconds_per_block_ * static_cast<double>(blocks + queued_blocks);
}

}  // namespace strata::kv
