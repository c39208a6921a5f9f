// Prefill attention instance: BF16 KV, head dim 64.
#include "kernels/cuda/prefill_attention_kernel.cuh"

namespace strata::cuda::detail {
template Status run_prefill_attention<DType::kBF16, DType::kBF16, 64>(const PrefillAttentionParams&,
                                                                      cudaStream_t);
}  // namespace strata::cuda::detail
