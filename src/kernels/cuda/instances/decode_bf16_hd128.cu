// Decode attention instance: BF16 KV, head dim 128; also the newest-blocks half of INT4
// launches (declared extern in decode_bf16_i4_hd128.cu).
#include "kernels/cuda/decode_attention_launch.cuh"

namespace strata::cuda::detail {
template Status run_decode_attention<DType::kBF16, DType::kBF16, 128>(const DecodeAttentionParams&,
                                                                      cudaStream_t);
STRATA_DECODE_NEWEST_PART(template, DType::kBF16, 128, 8);
STRATA_DECODE_NEWEST_PART(template, DType::kBF16, 128, 16);
}  // namespace strata::cuda::detail
