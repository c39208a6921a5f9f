// INT4 (KIVI) block quantization on the GPU: kv_int4_quantize_filled (kv_append.h). The encoding
// is the CPU's (src/kernels/cpu/kv_quant.h, docs/kv-quant.md "INT4") operation for operation in
// IEEE fp32 with explicit roundings, so the codes and statistics are bit for bit the same.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/kv_append.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 128;
constexpr float kF16Max = 65504.0f;

struct Int4QuantArgs {
  const void* newest_k;  // the layer's K of block 0 in the newest-blocks pool (bf16 / f16)
  const void* newest_v;
  int64_t newest_block_stride;  // elements
  int64_t newest_head_stride;
  int64_t newest_token_stride;
  uint8_t* k_codes;  // I4 layer's K of block 0
  uint8_t* v_codes;
  int64_t block_stride;  // bytes
  int64_t head_stride;
  int64_t token_stride;
  uint16_t* k_scales;
  uint16_t* k_zeros;
  uint16_t* v_scales;
  uint16_t* v_zeros;
  int64_t scale_block_stride;  // fp16 units
  int64_t scale_head_stride;   // V's (= block_size)
  int64_t k_stat_head_stride;  // K's (= head_dim)
  const int64_t* slot_mapping;
  const int64_t* newest_slot_mapping;
  int32_t block_size;
  int32_t head_dim;
};

template <DType kSrc>
__device__ __forceinline__ float load(const void* p, int64_t i) {
  if constexpr (kSrc == DType::kBF16) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  } else {
    return __half2float(static_cast<const __half*>(p)[i]);
  }
}

struct MinMax {
  float mn = INFINITY;
  float mx = -INFINITY;
  __device__ void add(float v) {
    if (v != v) return;  // NaN ignored
    mn = fminf(mn, v);
    mx = fmaxf(mx, v);
  }
};

// int4_params: z = the largest fp16 <= min (never -0), s = the smallest fp16 >= (max - z) / 15;
// both 0 when no value counts.
__device__ __forceinline__ void group_params(MinMax m, uint16_t& scale, uint16_t& zero) {
  if (m.mn > m.mx) {
    scale = 0;
    zero = 0;
    return;
  }
  zero = __half_as_ushort(__float2half_rd(fminf(fmaxf(m.mn, -kF16Max), kF16Max)));
  if (zero == 0x8000u) zero = 0;
  const float z = __half2float(__ushort_as_half(zero));
  float t = __fdiv_rn(__fsub_rn(m.mx, z), 15.0f);
  if (!(t >= 0.0f)) t = 0.0f;
  scale = __half_as_ushort(__float2half_ru(fminf(t, kF16Max)));
}

// int4_code: clamp(rint((x - z) / s), 0, 15); 0 when s == 0 or x is NaN.
__device__ __forceinline__ uint32_t code_of(float x, float s, float z) {
  float r = s > 0.0f ? rintf(__fdiv_rn(__fsub_rn(x, z), s)) : 0.0f;
  if (!(r == r)) r = 0.0f;
  return static_cast<uint32_t>(fminf(fmaxf(r, 0.0f), 15.0f));
}

// One thread block per (token, KV head); only a token in its block's last slot does work. K: a
// thread per channel (groups over the block's tokens); V: a warp per token (groups over
// head_dim). Two neighbouring lanes hold the two channels of a code byte; the even one writes it.
template <DType kSrc>
__global__ void __launch_bounds__(kThreads) int4_quantize_kernel(const __grid_constant__ Int4QuantArgs a) {
  const int64_t slot = a.slot_mapping[blockIdx.x];
  const int32_t bs = a.block_size;
  if (slot < 0 || slot % bs != bs - 1) return;
  const int64_t block = slot / bs;
  const int64_t newest_block = a.newest_slot_mapping[blockIdx.x] / bs;
  const int32_t head = blockIdx.y;
  const int32_t d = a.head_dim;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t src0 = newest_block * a.newest_block_stride + head * a.newest_head_stride;
  const int64_t dst0 = block * a.block_stride + head * a.head_stride;

  // K, channel c: the block's tokens.
  const int64_t k_stat = block * a.scale_block_stride + head * a.k_stat_head_stride;
  for (int32_t c0 = 0; c0 < d; c0 += kThreads) {
    const int32_t c = c0 + static_cast<int32_t>(threadIdx.x);
    if (c0 + static_cast<int32_t>(threadIdx.x & ~31u) >= d) break;  // whole warps past head_dim
    MinMax m;
    for (int32_t t = 0; t < bs; ++t) {
      m.add(load<kSrc>(a.newest_k, src0 + t * a.newest_token_stride + c));
    }
    uint16_t scale, zero;
    group_params(m, scale, zero);
    a.k_scales[k_stat + c] = scale;
    a.k_zeros[k_stat + c] = zero;
    const float s = __half2float(__ushort_as_half(scale));
    const float z = __half2float(__ushort_as_half(zero));
    for (int32_t t = 0; t < bs; ++t) {
      const uint32_t code =
          code_of(load<kSrc>(a.newest_k, src0 + t * a.newest_token_stride + c), s, z);
      const uint32_t odd = __shfl_down_sync(0xffffffffu, code, 1);
      if ((c & 1) == 0) a.k_codes[dst0 + t * a.token_stride + c / 2] = static_cast<uint8_t>(code | odd << 4);
    }
  }

  // V, token t: head_dim channels, lane l takes channels l, l + 32, ...
  const int warp = static_cast<int>(threadIdx.x / 32);
  for (int32_t t = warp; t < bs; t += kThreads / 32) {
    const int64_t row = src0 + t * a.newest_token_stride;
    MinMax m;
    for (int32_t c = lane; c < d; c += 32) m.add(load<kSrc>(a.newest_v, row + c));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      m.mn = fminf(m.mn, __shfl_xor_sync(0xffffffffu, m.mn, off));
      m.mx = fmaxf(m.mx, __shfl_xor_sync(0xffffffffu, m.mx, off));
    }
    uint16_t scale, zero;
    group_params(m, scale, zero);
    const int64_t at = block * a.scale_block_stride + head * a.scale_head_stride + t;
    if (lane == 0) {
      a.v_scales[at] = scale;
      a.v_zeros[at] = zero;
    }
    const float s = __half2float(__ushort_as_half(scale));
    const float z = __half2float(__ushort_as_half(zero));
    for (int32_t c = lane; c < d; c += 32) {
      const uint32_t code = code_of(load<kSrc>(a.newest_v, row + c), s, z);
      const uint32_t odd = __shfl_down_sync(0xffffffffu, code, 1);
      if ((c & 1) == 0) a.v_codes[dst0 + t * a.token_stride + c / 2] = static_cast<uint8_t>(code | odd << 4);
    }
  }
}

bool aligned2(const void* p) { return reinterpret_cast<uintptr_t>(p) % 2 == 0; }

}  // namespace

Status kv_int4_quantize_filled(const KvInt4QuantizeParams& p, cudaStream_t stream) {
  const PagedKvCacheView& c = p.cache;
  const PagedKvCacheView& r = p.newest;
  if (c.dtype != kInt4KvDType) {
    return Status::InvalidArgument("kv_int4_quantize_filled writes an int4 cache, not " +
                                   std::string(dtype_name(c.dtype)));
  }
  if (r.dtype != DType::kBF16 && r.dtype != DType::kF16) {
    return Status::Unsupported("kv_int4_quantize_filled reads a bf16 or f16 newest-blocks pool");
  }
  if (p.num_tokens < 0 || c.num_kv_heads <= 0 || c.num_kv_heads > 65535 ||
      c.head_dim % 32 != 0 || c.head_dim <= 0 || !contains(kKvBlockSizes, c.block_size) ||
      r.num_kv_heads != c.num_kv_heads || r.head_dim != c.head_dim ||
      r.block_size != c.block_size) {
    return Status::InvalidArgument(
        "kv_int4_quantize_filled: the newest-blocks view must have the cache's KV heads, head_dim "
        "(a multiple of 32) and block size");
  }
  if (p.num_tokens == 0) return Status::Ok();
  if (p.slot_mapping == nullptr || p.newest_slot_mapping == nullptr || c.k_data == nullptr ||
      c.v_data == nullptr || r.k_data == nullptr || r.v_data == nullptr ||
      c.k_scale_data == nullptr || c.v_scale_data == nullptr || c.k_zero_data == nullptr ||
      c.v_zero_data == nullptr || !aligned2(c.k_scale_data) || !aligned2(c.v_scale_data) ||
      !aligned2(c.k_zero_data) || !aligned2(c.v_zero_data)) {
    return Status::InvalidArgument(
        "kv_int4_quantize_filled needs both slot mappings, the newest-blocks view and the int4 "
        "codes and statistics");
  }
  Int4QuantArgs a{};
  a.newest_k = r.k_data;
  a.newest_v = r.v_data;
  a.newest_block_stride = r.block_stride;
  a.newest_head_stride = r.head_stride;
  a.newest_token_stride = r.token_stride;
  a.k_codes = static_cast<uint8_t*>(c.k_data);
  a.v_codes = static_cast<uint8_t*>(c.v_data);
  a.block_stride = c.block_stride;
  a.head_stride = c.head_stride;
  a.token_stride = c.token_stride;
  a.k_scales = static_cast<uint16_t*>(c.k_scale_data);
  a.k_zeros = static_cast<uint16_t*>(c.k_zero_data);
  a.v_scales = static_cast<uint16_t*>(c.v_scale_data);
  a.v_zeros = static_cast<uint16_t*>(c.v_zero_data);
  a.scale_block_stride = c.scale_block_stride;
  a.scale_head_stride = c.scale_head_stride;
  a.k_stat_head_stride = c.k_stat_head_stride;
  a.slot_mapping = p.slot_mapping;
  a.newest_slot_mapping = p.newest_slot_mapping;
  a.block_size = c.block_size;
  a.head_dim = c.head_dim;
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(c.num_kv_heads));
  if (r.dtype == DType::kBF16) {
    int4_quantize_kernel<DType::kBF16><<<grid, kThreads, 0, stream>>>(a);
  } else {
    int4_quantize_kernel<DType::kF16><<<grid, kThreads, 0, stream>>>(a);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
