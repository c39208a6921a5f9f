// Prefill attention instance: F16 KV, head dim 64.
#include "kernels/cuda/prefill_attention_run.cuh"

namespace strata::cuda::detail {
template Status run_prefill_attention<DType::kF16, DType::kF16, 64>(
    const PrefillAttentionParams&, PrefillWsVariant, cudaStream_t);
}  // namespace strata::cuda::detail
