// Prefill attention instance: F16 KV, head dim 256 (the mma.sync kernel over the whole key
// range; prefill_attention_run.cuh).
#include "kernels/cuda/prefill_attention_run.cuh"

namespace strata::cuda::detail {
template Status run_prefill_attention<DType::kF16, DType::kF16, 256>(
    const PrefillAttentionParams&, PrefillWsVariant, cudaStream_t);
}  // namespace strata::cuda::detail
