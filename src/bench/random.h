#pragma once
// BenchRng: the bench's one source of randomness. A splitmix64 stream with the distributions the
// workloads draw from, written out here instead of taken from <random> so a seed gives the same
// workload under libstdc++ and libc++ (the standard leaves std::*_distribution's algorithms to
// the implementation). Not thread-safe; cheap to copy.

#include <cmath>
#include <cstdint>
#include <numbers>

namespace strata::bench {

class BenchRng {
 public:
  explicit BenchRng(uint64_t seed) : state_(seed) {}
  // A stream of its own for (seed, stream): a workload derives one per request or session so that
  // adding a request does not shift every later one.
  BenchRng(uint64_t seed, uint64_t stream) : state_(mix(seed ^ mix(stream + 0x51ed27))) {}

  uint64_t next_u64() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix(state_);
  }
  // Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi] (lo <= hi). Lemire's multiply-shift; the bias is below 2^-32 for
  // the ranges a bench uses.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    const auto span = static_cast<uint64_t>(hi - lo) + 1;
    if (span == 0) return static_cast<int64_t>(next_u64());  // the whole 64-bit range
    const auto r = static_cast<unsigned __int128>(next_u64()) * span;
    return lo + static_cast<int64_t>(r >> 64);
  }
  // Standard normal (Box-Muller, one value per call).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  // exp(N(mu, sigma^2)): median e^mu, mean e^(mu + sigma^2 / 2).
  double lognormal(double mu, double sigma) { return std::exp(mu + sigma * normal()); }
  // Exponential with the given rate (> 0): the gaps of a Poisson process.
  double exponential(double rate) { return -std::log(1.0 - uniform()) / rate; }

 private:
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

}  // namespace strata::bench
