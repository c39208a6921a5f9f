#include "kernels/cuda/kv_append.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/kv_encode.cuh"
#include "kernels/cuda/vec.cuh"

namespace strata::cuda {
namespace {

struct KvAppendArgs {
  const uint4* k;
  const uint4* v;
  int64_t k_token_stride;  // in 16-byte vectors
  int64_t v_token_stride;
  const int64_t* slot_mapping;
  uint4* k_cache;
  uint4* v_cache;
  int64_t block_stride;  // in 16-byte vectors
  int64_t head_stride;
  int64_t token_stride;
  int32_t block_size;
  int32_t num_kv_heads;
  int32_t vecs_per_head;
  int64_t total_vecs;  // num_tokens * num_kv_heads * vecs_per_head
};

// One 16-byte vector per thread; consecutive threads cover one head's row, then the next head, so
// both the source row and each destination row are read and written coalesced.
__global__ void kv_append_kernel(const __grid_constant__ KvAppendArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.total_vecs;
       i += stride) {
    const int64_t per_token = static_cast<int64_t>(a.num_kv_heads) * a.vecs_per_head;
    const int64_t token = i / per_token;
    const int32_t rest = static_cast<int32_t>(i - token * per_token);
    const int32_t head = rest / a.vecs_per_head;
    const int32_t vec = rest - head * a.vecs_per_head;
    const int64_t slot = a.slot_mapping[token];
    if (slot < 0) continue;
    const int64_t block = slot / a.block_size;
    const int64_t dst = block * a.block_stride + head * a.head_stride +
                        (slot - block * a.block_size) * a.token_stride + vec;
    a.k_cache[dst] = a.k[token * a.k_token_stride + rest];
    a.v_cache[dst] = a.v[token * a.v_token_stride + rest];
  }
}

// Quantizing append: one warp per (token, KV head) row, K then V; lane l holds the row's
// channels [l * per_lane, (l + 1) * per_lane).
struct KvQuantArgs {
  const void* k;
  const void* v;
  int64_t k_token_stride;  // in source elements
  int64_t v_token_stride;
  const int64_t* slot_mapping;
  detail::KvDest dst;
  int32_t num_kv_heads;
  int32_t head_dim;
  int64_t num_rows;  // num_tokens * num_kv_heads
};

constexpr int kMaxChannelsPerLane = 8;  // head_dim <= 256

template <DType kSrc>
__device__ __forceinline__ float load_src(const void* p, int64_t i) {
  if constexpr (kSrc == DType::kBF16) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  } else {
    return __half2float(static_cast<const __half*>(p)[i]);
  }
}

template <DType kSrc, DType kCache>
__device__ void quantize_row(const void* src, uint8_t* dst, uint16_t* scale_dst,
                             float static_scale, int lane, int per_lane) {
  float x[kMaxChannelsPerLane];
#pragma unroll
  for (int j = 0; j < kMaxChannelsPerLane; ++j) {
    x[j] = j < per_lane ? load_src<kSrc>(src, lane * per_lane + j) : 0.0f;
  }
  if constexpr (kCache == DType::kI8) {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxChannelsPerLane; ++j) amax = fmaxf(amax, fabsf(x[j]));  // NaN ignored
#pragma unroll
    for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const __half s16 = detail::int8_row_scale(amax);
    const float s = __half2float(s16);
#pragma unroll
    for (int j = 0; j < kMaxChannelsPerLane; ++j) {
      if (j >= per_lane) break;
      dst[lane * per_lane + j] = detail::encode_int8(x[j], s);
    }
    if (lane == 0) *scale_dst = __half_as_ushort(s16);
  } else {
#pragma unroll
    for (int j = 0; j < kMaxChannelsPerLane; ++j) {
      if (j >= per_lane) break;
      dst[lane * per_lane + j] = detail::encode_fp8<kCache>(x[j], static_scale);
    }
  }
}

template <DType kSrc, DType kCache>
__global__ void kv_append_quant_kernel(const __grid_constant__ KvQuantArgs a) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int per_lane = a.head_dim / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       row < a.num_rows; row += warps) {
    const int64_t token = row / a.num_kv_heads;
    const int32_t head = static_cast<int32_t>(row - token * a.num_kv_heads);
    const int64_t slot = a.slot_mapping[token];
    if (slot < 0) continue;  // the whole warp skips together
    const int64_t dst = a.dst.row(slot, head);
    const int64_t sdst = a.dst.scale(slot, head);
    const int64_t src_off = static_cast<int64_t>(head) * a.head_dim;
    constexpr int64_t kSrcBytes = 2;  // bf16 or f16
    const auto* k = static_cast<const char*>(a.k) + (token * a.k_token_stride + src_off) * kSrcBytes;
    const auto* v = static_cast<const char*>(a.v) + (token * a.v_token_stride + src_off) * kSrcBytes;
    quantize_row<kSrc, kCache>(k, a.dst.k_cache + dst,
                               a.dst.k_scales ? a.dst.k_scales + sdst : nullptr, a.dst.k_scale,
                               lane, per_lane);
    quantize_row<kSrc, kCache>(v, a.dst.v_cache + dst,
                               a.dst.v_scales ? a.dst.v_scales + sdst : nullptr, a.dst.v_scale,
                               lane, per_lane);
  }
}

Status kv_append_quantized(const KvAppendParams& p, cudaStream_t stream) {
  const PagedKvCacheView& c = p.cache;
  KvQuantArgs a{};
  a.k = p.k;
  a.v = p.v;
  a.k_token_stride = p.k_token_stride;
  a.v_token_stride = p.v_token_stride;
  a.slot_mapping = p.slot_mapping;
  a.dst = detail::kv_dest(c);
  a.num_kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
  a.num_rows = static_cast<int64_t>(p.num_tokens) * c.num_kv_heads;
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(
      std::min<int64_t>(detail::ceil_div(a.num_rows, kThreads / 32), 65536));
  auto launch = [&]<DType kSrc>() -> Status {
    switch (c.dtype) {
      case DType::kF8E4M3:
        kv_append_quant_kernel<kSrc, DType::kF8E4M3><<<blocks, kThreads, 0, stream>>>(a);
        break;
      case DType::kF8E5M2:
        kv_append_quant_kernel<kSrc, DType::kF8E5M2><<<blocks, kThreads, 0, stream>>>(a);
        break;
      default:
        kv_append_quant_kernel<kSrc, DType::kI8><<<blocks, kThreads, 0, stream>>>(a);
        break;
    }
    STRATA_CUDA_CHECK_LAUNCH();
    return Status::Ok();
  };
  return p.src_dtype == DType::kBF16 ? launch.template operator()<DType::kBF16>()
                                     : launch.template operator()<DType::kF16>();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// INT4: the rows go to the newest-blocks group's pool, a 16-bit append.
KvAppendParams newest_append(const KvAppendParams& p) {
  KvAppendParams r = p;
  r.cache = p.newest;
  r.slot_mapping = p.newest_slot_mapping;
  r.newest = PagedKvCacheView{};
  r.newest_slot_mapping = nullptr;
  return r;
}

}  // namespace

Status validate_kv_append(const KvAppendParams& p) {
  const PagedKvCacheView& c = p.cache;
  if (c.dtype == kInt4KvDType) {
    const PagedKvCacheView& r = p.newest;
    if (r.dtype != p.src_dtype || r.num_kv_heads != c.num_kv_heads || r.head_dim != c.head_dim ||
        r.block_size != c.block_size || (p.num_tokens > 0 && p.newest_slot_mapping == nullptr)) {
      return Status::InvalidArgument(
          "kv_append into an int4 cache needs a newest-blocks view of the source dtype and the "
          "cache's shape, and newest_slot_mapping");
    }
    return validate_kv_append(newest_append(p));
  }
  const bool quantized = contains(kQuantizedKvDTypes, c.dtype);
  if (!quantized && !contains(kKvDTypes, c.dtype)) {
    return Status::Unsupported("KV dtype " + std::string(dtype_name(c.dtype)) +
                               " has no CUDA append kernel");
  }
  if (p.num_tokens < 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || c.block_size <= 0) {
    return Status::InvalidArgument("kv_append needs num_tokens >= 0 and a complete cache view");
  }
  if (p.num_tokens == 0) return Status::Ok();
  if (!quantized && p.src_dtype != c.dtype) {
    return Status::InvalidArgument("kv_append into a " + std::string(dtype_name(c.dtype)) +
                                   " cache copies rows of the same dtype");
  }
  const int64_t elem = dtype_size(c.dtype);
  const int64_t src_elem = dtype_size(p.src_dtype);
  const int64_t row_bytes = c.head_dim * elem;
  if (row_bytes % 16 != 0) {
    return Status::Unsupported("kv_append needs head_dim * element size to be a multiple of 16");
  }
  if (p.k == nullptr || p.v == nullptr || p.slot_mapping == nullptr || c.k_data == nullptr ||
      c.v_data == nullptr) {
    return Status::InvalidArgument("kv_append needs k, v, slot_mapping and the cache");
  }
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  if (p.k_token_stride < row || p.v_token_stride < row) {
    return Status::InvalidArgument("k/v token stride smaller than num_kv_heads * head_dim");
  }
  if (!aligned16(p.k) || !aligned16(p.v) || !aligned16(c.k_data) || !aligned16(c.v_data) ||
      (p.k_token_stride * src_elem) % 16 != 0 || (p.v_token_stride * src_elem) % 16 != 0 ||
      (c.block_stride * elem) % 16 != 0 || (c.head_stride * elem) % 16 != 0 ||
      (c.token_stride * elem) % 16 != 0) {
    return Status::InvalidArgument("kv_append pointers and strides must be 16-byte aligned");
  }
  if (quantized) {
    if (p.src_dtype != DType::kBF16 && p.src_dtype != DType::kF16) {
      return Status::Unsupported("kv_append quantizes bf16 or f16 rows");
    }
    if (c.head_dim % 32 != 0 || c.head_dim > 32 * kMaxChannelsPerLane) {
      return Status::Unsupported("quantizing kv_append needs head_dim a multiple of 32, at most 256");
    }
    STRATA_RETURN_IF_ERROR(validate_kv_scales(c));
  }
  return Status::Ok();
}

Status kv_append(const KvAppendParams& p, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(validate_kv_append(p));
  if (p.num_tokens == 0) return Status::Ok();
  const PagedKvCacheView& c = p.cache;
  if (c.dtype == kInt4KvDType) {
    STRATA_RETURN_IF_ERROR(kv_append(newest_append(p), stream));
    return kv_int4_quantize_filled(
        KvInt4QuantizeParams{.cache = c,
                             .newest = p.newest,
                             .slot_mapping = p.slot_mapping,
                             .newest_slot_mapping = p.newest_slot_mapping,
                             .num_tokens = p.num_tokens},
        stream);
  }
  if (contains(kQuantizedKvDTypes, c.dtype)) return kv_append_quantized(p, stream);
  const int64_t elem = dtype_size(c.dtype);
  const int64_t row_bytes = c.head_dim * elem;
  const int64_t vec_elems = 16 / elem;
  KvAppendArgs a{};
  a.k = static_cast<const uint4*>(p.k);
  a.v = static_cast<const uint4*>(p.v);
  a.k_token_stride = p.k_token_stride / vec_elems;
  a.v_token_stride = p.v_token_stride / vec_elems;
  a.slot_mapping = p.slot_mapping;
  a.k_cache = static_cast<uint4*>(c.k_data);
  a.v_cache = static_cast<uint4*>(c.v_data);
  a.block_stride = c.block_stride / vec_elems;
  a.head_stride = c.head_stride / vec_elems;
  a.token_stride = c.token_stride / vec_elems;
  a.block_size = c.block_size;
  a.num_kv_heads = c.num_kv_heads;
  a.vecs_per_head = static_cast<int32_t>(row_bytes / 16);
  a.total_vecs = static_cast<int64_t>(p.num_tokens) * c.num_kv_heads * a.vecs_per_head;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>(detail::ceil_div(a.total_vecs, kThreads), 65536);
  kv_append_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
