// Decode attention instance: BF16 queries over an INT4 (KIVI) KV cache, head dim 64. The
// newest-blocks half runs in decode_bf16_hd64.cu's instance.
#include "kernels/cuda/decode_attention_launch.cuh"

namespace strata::cuda::detail {
STRATA_DECODE_NEWEST_PART(extern template, DType::kBF16, 64, 8);
STRATA_DECODE_NEWEST_PART(extern template, DType::kBF16, 64, 16);
template Status run_decode_attention<DType::kBF16, DType::kI4, 64>(const DecodeAttentionParams&,
                                                                   cudaStream_t);
}  // namespace strata::cuda::detail
