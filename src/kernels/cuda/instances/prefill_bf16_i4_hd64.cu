// Prefill attention instance: BF16 queries over an INT4 (KIVI) KV cache, head dim 64. The
// newest-blocks half runs in prefill_bf16_hd64.cu's instance.
#include "kernels/cuda/prefill_attention_run.cuh"

namespace strata::cuda::detail {
STRATA_PREFILL_NEWEST_PART(extern template, DType::kBF16, 64);
template Status run_prefill_attention<DType::kBF16, DType::kI4, 64>(
    const PrefillAttentionParams&, PrefillWsVariant, cudaStream_t);
}  // namespace strata::cuda::detail
