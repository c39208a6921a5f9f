// Prefill attention instance: F16 KV, head dim 128.
#include "kernels/cuda/prefill_attention_run.cuh"

namespace strata::cuda::detail {
template Status run_prefill_attention<DType::kF16, DType::kF16, 128>(
    const PrefillAttentionParams&, PrefillWsVariant, cudaStream_t);
}  // namespace strata::cuda::detail
