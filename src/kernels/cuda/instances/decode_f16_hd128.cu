// Decode attention instance: F16 KV, head dim 128.
#include "kernels/cuda/decode_attention_launch.cuh"

namespace strata::cuda::detail {
template Status run_decode_attention<DType::kF16, DType::kF16, 128>(const DecodeAttentionParams&,
                                                                    cudaStream_t);
}  // namespace strata::cuda::detail
