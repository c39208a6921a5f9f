#pragma once
// RemoteReadCost: whether reading a queued request's missing prefix from the remote tier beats
// computing it, from what this instance measured (docs/kv.md, "The remote tier"). A read costs
// its queue -- the fetcher reads one job after another -- plus its own blocks; computing costs the
// tokens queued before the request plus its own. With both measured, a read that would end after
// the compute is not started, and a request that waits on a read past the moment its compute
// would have ended is admitted without it. Until both are measured, every read is made and
// waited for.
//
// Each cost is a line fitted to recent samples, seconds = fixed + per_unit * units (LinearCost):
// a step's fixed part (its decode rows, launches) is paid whether or not a prompt rides along, so
// a prompt costs the steps' marginal seconds per token -- on a GPU a step of a hundred tokens
// takes nearly as long as one of a thousand, and seconds / tokens of the small steps would price
// a long prompt several times too high. A read costs its round trip plus its blocks at the
// marginal seconds per block. Not thread-safe (the scheduler thread's). Cost: O(1) per call.

#include <cstdint>

namespace strata::kv {

// seconds = fixed + per_unit * units, fitted by least squares to exponentially weighted samples
// (the last few dozen count). With one sample, or samples of one size, the line goes through the
// origin and the mean (per_unit = mean seconds / mean units), as it does when the fit's slope
// would not be positive.
class LinearCost {
 public:
  void observe(double units, double seconds);
  bool known() const { return samples_ > 0; }
  double per_unit() const;
  double fixed() const;

 private:
  double mx_ = 0.0, my_ = 0.0, mxx_ = 0.0, mxy_ = 0.0;  // weighted means of x, y, x^2, x*y
  int64_t samples_ = 0;
};

class RemoteReadCost {
 public:
  // A step's forward pass: tokens computed in seconds (a step with prefill tokens).
  void observe_step(int64_t tokens, double seconds);
  // A remote read of blocks (found or not) in seconds.
  void observe_read(int64_t blocks, double seconds);
  bool known() const { return step_.known() && read_.known(); }

  // Seconds to compute tokens (the request's and those queued before it): their marginal cost.
  double compute_seconds(int64_t tokens) const;
  // Seconds until a read of blocks ends, with queued_blocks read before them (in one more round
  // trip).
  double read_seconds(int64_t blocks, int64_t queued_blocks) const;
  // Whether a read of blocks, after queued_blocks, ends before computing tokens would.
  bool read_pays(int64_t blocks, int64_t queued_blocks, int64_t tokens) const {
    return !known() || read_seconds(blocks, queued_blocks) <= compute_seconds(tokens);
  }

  // How long a block lived in the host tier before it was taken for another (the age of the
  // tier's victims). A block read for a request that is admitted later than that is likely gone
  // before it is used, and read again.
  void observe_residence(double seconds);
  // Whether blocks read now for a request behind tokens_ahead prompt tokens would still be in the
  // host tier when it is admitted; true until the steps and the residence are measured.
  bool lands_in_time(int64_t tokens_ahead) const {
    return residence_samples_ == 0 || !step_.known() ||
           compute_seconds(tokens_ahead) <= residence_seconds_;
  }

  // Weight of the newest sample in the means.
  static constexpr double kWeight = 1.0 / 16;

 private:
  LinearCost step_;
  LinearCost read_;
  double residence_seconds_ = 0.0;
  int64_t residence_samples_ = 0;
};

}  // namespace strata::kv
