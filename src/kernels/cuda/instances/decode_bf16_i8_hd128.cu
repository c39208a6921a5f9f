// Decode attention instance: BF16 queries over an INT8 KV cache, head dim 128.
#include "kernels/cuda/decode_attention_launch.cuh"

namespace strata::cuda::detail {
template Status run_decode_attention<DType::kBF16, DType::kI8, 128>(const DecodeAttentionParams&,
                                                                    cudaStream_t);
}  // namespace strata::cuda::detail
