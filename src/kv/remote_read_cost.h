#pragma once
// RemoteReadCost: whether reading a queued request's missing prefix from the remote tier beats
// computing it, from what this instance measured (docs/kv.md, "The remote tier"). A read costs
// its queue -- the fetcher reads one job after another -- plus its own blocks at the recent reads'
// seconds per block; computing costs the tokens queued before the request plus its own at the
// recent steps' seconds per token. With both measured, a read that would end after the compute
// is not started, and a request that waits on a read past the moment its compute would have
// ended is admitted without it. Until both are measured, every read is made and waited for.
//
// Exponentially weighted means over the last few dozen samples. Not thread-safe (the scheduler
// thread's). Cost: O(1) per call.

#include <cstdint>

namespace strata::kv {

class RemoteReadCost {
 public:
  // A step's forward pass: tokens computed in seconds (a step with prefill tokens).
  void observe_step(int64_t tokens, double seconds);
  // A remote read of blocks (found or not) in seconds.
  void observe_read(int64_t blocks, double seconds);
  bool known() const { return step_samples_ > 0 && read_samples_ > 0; }

  // Seconds to compute tokens (the request's and those queued before it).
  double compute_seconds(int64_t tokens) const;
  // Seconds until a read of blocks ends, with queued_blocks read before them.
  double read_seconds(int64_t blocks, int64_t queued_blocks) const;
  // Whether a read of blocks, after queued_blocks, ends before computing tokens would.
  bool read_pays(int64_t blocks, int64_t queued_blocks, int64_t tokens) const {
    return !known() || read_seconds(blocks, queued_blocks) <= compute_seconds(tokens);
  }

  // Weight of the newest sample in the means.
  static constexpr double kWeight = 1.0 / 16;

 private:
  double seconds_per_token_ = 0.0;
  double seconds_per_block_ = 0.0;
  int64_t step_samples_ = 0;
  int64_t read_samples_ = 0;
};

}  // namespace strata::kv
