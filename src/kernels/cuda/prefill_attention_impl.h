#pragma once
// Internal interface between the prefill-attention launcher (prefill_attention.cc) and its
// per-(dtype x head dim) instances (instances/prefill_*.cu). Host-only.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/prefill_attention.h"

namespace strata::cuda::detail {

// Runs prefill attention for validated params (q/o kQDType, cache kKvDType, head_dim kHeadDim).
template <DType kQDType, DType kKvDType, int32_t kHeadDim>
Status run_prefill_attention(const PrefillAttentionParams& params, cudaStream_t stream);

}  // namespace strata::cuda::detail
