// Decode attention instance: BF16 KV, head dim 128.
#include "kernels/cuda/decode_attention_launch.cuh"

namespace strata::cuda::detail {
template Status run_decode_attention<DType::kBF16, DType::kBF16, 128>(const DecodeAttentionParams&,
                                                                      cudaStream_t);
}  // namespace strata::cuda::detail
