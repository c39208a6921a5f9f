// Prefill attention instance: BF16 KV, head dim 64; also the newest-blocks half of INT4
// launches (declared extern in prefill_bf16_i4_hd64.cu).
#include "kernels/cuda/prefill_attention_run.cuh"

namespace strata::cuda::detail {
template Status run_prefill_attention<DType::kBF16, DType::kBF16, 64>(
    const PrefillAttentionParams&, PrefillWsVariant, cudaStream_t);
STRATA_PREFILL_NEWEST_PART(template, DType::kBF16, 64);
}  // namespace strata::cuda::detail
