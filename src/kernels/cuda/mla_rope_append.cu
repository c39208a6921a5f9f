// mla_rope_append(): the latent row's norm and RoPE, its write to the pool, and the queries' rope
// part (mla_ops.h). One block of kThreads threads per token: the norm's sum of squares is
// reduced in a fixed order (per-thread strided sums, then the warps' butterflies, then warp 0),
// so a token's row has the same bits in any batch.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/mla_ops.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kHalf = kMlaRopeDim / 2;

struct Args {
  MlaRopeAppendParams p;
};

__global__ void __launch_bounds__(kThreads) mla_rope_append_kernel(const __grid_constant__ Args a) {
  const MlaRopeAppendParams& p = a.p;
  const int32_t t = blockIdx.x;
  __shared__ float cos_t[kHalf];
  __shared__ float sin_t[kHalf];
  __shared__ float warp_sums[kThreads / 32];
  const float* kv = p.kv_a + t * p.kv_a_stride;
  if (threadIdx.x < kHalf) {
    const double angle =
        static_cast<double>(p.positions[t]) * static_cast<double>(p.inv_freq[threadIdx.x]);
    double s = 0.0, c = 0.0;
    sincos(angle, &s, &c);
    cos_t[threadIdx.x] = static_cast<float>(c * static_cast<double>(p.attention_scaling));
    sin_t[threadIdx.x] = static_cast<float>(s * static_cast<double>(p.attention_scaling));
  }
  float sum = 0.0f;
  for (int i = threadIdx.x; i < kMlaValueDim; i += kThreads) sum += kv[i] * kv[i];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) w += __shfl_xor_sync(0xffffffffu, w, offset);
    if (threadIdx.x == 0) warp_sums[0] = w;
  }
  __syncthreads();
  const float inv_rms = rsqrtf(warp_sums[0] / static_cast<float>(kMlaValueDim) + p.eps);
  const int64_t slot = p.slot_mapping[t];
  auto* cache = static_cast<__nv_bfloat16*>(p.cache.k_data);
  auto pair = [&](int i, int& lo, int& hi) {
    lo = p.interleave ? 2 * i : i;
    hi = p.interleave ? 2 * i + 1 : i + kHalf;
  };
  if (slot >= 0) {
    const PagedKvCacheView& c = p.cache;
    __nv_bfloat16* row =
        cache + (slot / c.block_size) * c.block_stride + (slot % c.block_size) * c.token_stride;
    for (int i = threadIdx.x; i < kMlaValueDim; i += kThreads) {
      row[i] = __float2bfloat16(kv[i] * inv_rms * p.kv_norm[i]);
    }
    if (threadIdx.x < kHalf) {
      int lo = 0, hi = 0;
      pair(threadIdx.x, lo, hi);
      const float x0 = kv[kMlaValueDim + lo], x1 = kv[kMlaValueDim + hi];
      const float c = cos_t[threadIdx.x], s = sin_t[threadIdx.x];
      row[kMlaValueDim + lo] = __float2bfloat16(x0 * c - x1 * s);
      row[kMlaValueDim + hi] = __float2bfloat16(x1 * c + x0 * s);
    }
  }
  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + t * p.q_stride;
  auto* ql = static_cast<__nv_bfloat16*>(p.q_latent) + t * p.q_latent_stride;
  const int nope = p.q_head_dim - kMlaRopeDim;
  for (int j = threadIdx.x; j < p.num_heads * kHalf; j += kThreads) {
    const int h = j / kHalf, i = j % kHalf;
    int lo = 0, hi = 0;
    pair(i, lo, hi);
    const __nv_bfloat16* src = q + h * p.q_head_dim + nope;
    const float x0 = __bfloat162float(src[lo]), x1 = __bfloat162float(src[hi]);
    const float c = cos_t[i], s = sin_t[i];
    __nv_bfloat16* dst = ql + h * kMlaLatentDim + kMlaValueDim;
    dst[lo] = __float2bfloat16(x0 * c - x1 * s);
    dst[hi] = __float2bfloat16(x1 * c + x0 * s);
  }
}

}  // namespace

Status mla_rope_append(const MlaRopeAppendParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return Status::Ok();
  if (p.kv_a == nullptr || p.kv_norm == nullptr || p.q == nullptr || p.q_latent == nullptr ||
      p.positions == nullptr || p.inv_freq == nullptr || p.slot_mapping == nullptr ||
      p.cache.k_data == nullptr || p.num_tokens < 0 || p.num_heads < 1) {
    return Status::InvalidArgument("mla_rope_append: a missing pointer or an empty shape");
  }
  if (p.cache.dtype != DType::kBF16 || p.cache.num_kv_heads != 1 ||
      p.cache.head_dim != kMlaLatentDim || p.q_head_dim <= kMlaRopeDim ||
      p.kv_a_stride < kMlaLatentDim || p.q_stride < int64_t{p.num_heads} * p.q_head_dim ||
      p.q_latent_stride < int64_t{p.num_heads} * kMlaLatentDim) {
    return Status::InvalidArgument(
        "mla_rope_append: the cache must be a bf16 latent of 576 per token and the strides "
        "must hold a row");
  }
  mla_rope_append_kernel<<<p.num_tokens, kThreads, 0, stream>>>(Args{p});
  STRATA_CUDA_CHECK(cudaGetLastError());
  return Status::Ok();
}

}  // namespace strata::cuda
