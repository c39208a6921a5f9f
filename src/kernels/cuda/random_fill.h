#pragma once
// Deterministic uniform random fill of a device tensor (benchmarks, tests and synthetic weights):
// element i is a hash of (seed, i) mapped to [lo, hi), so the same call always writes the same
// values and a host can recompute any element without copying it back.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::cuda {

struct RandomFillParams {
  void* data = nullptr;        // [num_elements] of dtype, device
  DType dtype = DType::kBF16;  // kF32, kBF16 or kF16
  int64_t num_elements = 0;
  uint64_t seed = 0;
  float lo = -1.0f;
  float hi = 1.0f;
};

// The value (before rounding to dtype) that random_fill writes at index i.
float random_fill_value(uint64_t seed, int64_t i, float lo, float hi);

Status random_fill(const RandomFillParams& params, cudaStream_t stream);

}  // namespace strata::cuda
