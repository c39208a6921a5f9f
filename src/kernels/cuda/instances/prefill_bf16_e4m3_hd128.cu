// Prefill attention instance: BF16 queries over an FP8 E4M3 KV cache, head dim 128.
#include "kernels/cuda/prefill_attention_run.cuh"

namespace strata::cuda::detail {
template Status run_prefill_attention<DType::kBF16, DType::kF8E4M3, 128>(
    const PrefillAttentionParams&, PrefillWsVariant, cudaStream_t);
}  // namespace strata::cuda::detail
