// Decode attention instance: BF16 queries over an FP8 E4M3 KV cache, head dim 128.
#include "kernels/cuda/decode_attention_launch.cuh"

namespace strata::cuda::detail {
template Status run_decode_attention<DType::kBF16, DType::kF8E4M3, 128>(
    const DecodeAttentionParams&, cudaStream_t);
}  // namespace strata::cuda::detail
