// Decode attention instance: BF16 queries over an FP8 E5M2 KV cache, head dim 64.
#include "kernels/cuda/decode_attention_launch.cuh"

namespace strata::cuda::detail {
template Status run_decode_attention<DType::kBF16, DType::kF8E5M2, 64>(const DecodeAttentionParams&,
                                                                       cudaStream_t);
}  // namespace strata::cuda::detail
