// qk_norm_rope(): optional per-head RMSNorm (Qwen3) and rotate_half RoPE, in place on the q and
// k heads of a fused bf16 qkv buffer (model_ops.h).
//
// One thread block per token. The block computes the token's cos / sin table once (half
// entries; the angle in float64, see reduce_angle) into shared memory while its first loads are
// in flight. A group of `lanes` threads takes one head: each
// thread holds kVec elements of the head's low half and the matching kVec of its high half
// (channel i pairs with i + head_dim / 2), so the rotation needs no exchange between threads and
// only the norm's sum of squares is reduced, by a butterfly inside the group (a fixed order).
// kVec is 8 (16-byte loads) when the head dim, token stride and pointers allow it, else 2 or 1;
// lanes is the power of two at or above half / kVec, at most 32 (then each thread takes up to
// kChunks chunks).
//
// Fused KV append (params.slot_mapping set, 16-byte vectors): the block also takes the token's V
// heads, and each K head (after RoPE) and V head is written to the paged cache at the token's
// slot as kv_append() writes it -- the bf16 value copied, or quantized from that bf16 value by
// kv_encode.cuh's rules (INT8's row maximum reduced over the head's lane group) -- saving a
// launch per layer. Other shapes run the plain kernel and then kv_append().

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/kv_encode.cuh"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/model_ops_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace strata::cuda {
namespace {

constexpr int kMaxHalf = 128;  // head_dim <= 256
constexpr int kMaxThreads = 512;

struct QkNormRopeArgs {
  __nv_bfloat16* qkv;
  int64_t token_stride;
  const int32_t* positions;
  const float* inv_freq;
  const void* q_norm;
  const void* k_norm;
  float eps;
  float inv_head_dim;
  float attention_scaling;
  int32_t num_q_heads;
  int32_t num_heads;  // q + k heads: the ones rotated
  int32_t head_dim;
  int32_t half;
  int32_t lanes;  // threads per head, a power of two <= 32
  // The fused append (kAppend): the V heads follow, all_heads = num_heads + kv heads.
  int32_t all_heads;
  const int64_t* slot_mapping;
  detail::KvDest dst;
};

// Max of x over an aligned group of `width` lanes (every lane of the warp takes part).
__device__ __forceinline__ float group_max(float x, int width) {
  for (int offset = width / 2; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset, width));
  }
  return x;
}

template <DType kCache>
__device__ __forceinline__ uint2 encode8(const float (&x)[8], float scale) {
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t code = kCache == DType::kI8 ? detail::encode_int8(x[e], scale)
                                               : detail::encode_fp8<kCache>(x[e], scale);
    w[e / 4] |= code << (8 * (e % 4));
  }
  return make_uint2(w[0], w[1]);
}

// Writes this thread's kC chunks of 8 channels (and their high-half partners) of one K or V row
// to the cache; `x` already rounded to bf16. amax: the row's largest magnitude (INT8).
template <int kC>
__device__ __forceinline__ void append_row(const QkNormRopeArgs& a, bool v_part, int32_t kv_head,
                                           int64_t slot, int lane, const float (&lo)[kC][8],
                                           const float (&hi)[kC][8], float amax) {
  const detail::KvDest& d = a.dst;
  const int64_t row = d.row(slot, kv_head);
  uint8_t* base = v_part ? d.v_cache : d.k_cache;
  float scale = v_part ? d.v_scale : d.k_scale;
  if (d.dtype == DType::kI8) {
    const __half s16 = detail::int8_row_scale(amax);
    scale = __half2float(s16);
    if (lane == 0) {
      uint16_t* scales = v_part ? d.v_scales : d.k_scales;
      scales[d.scale(slot, kv_head)] = __half_as_ushort(s16);
    }
  }
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    const int i0 = (lane + c * a.lanes) * 8;
    if (i0 >= a.half) continue;
    if (d.dtype == DType::kBF16) {
      detail::store_bf16_n<8>(base, row + i0, lo[c]);
      detail::store_bf16_n<8>(base, row + a.half + i0, hi[c]);
      continue;
    }
    uint8_t* codes = static_cast<uint8_t*>(base) + row;
    uint2 wl, wh;
    if (d.dtype == DType::kF8E4M3) {
      wl = encode8<DType::kF8E4M3>(lo[c], scale);
      wh = encode8<DType::kF8E4M3>(hi[c], scale);
    } else if (d.dtype == DType::kF8E5M2) {
      wl = encode8<DType::kF8E5M2>(lo[c], scale);
      wh = encode8<DType::kF8E5M2>(hi[c], scale);
    } else {
      wl = encode8<DType::kI8>(lo[c], scale);
      wh = encode8<DType::kI8>(hi[c], scale);
    }
    *reinterpret_cast<uint2*>(codes + i0) = wl;
    *reinterpret_cast<uint2*>(codes + a.half + i0) = wh;
  }
}

// angle reduced to [-pi, pi] in float64 (two-term Cody-Waite), then rounded to fp32: exact to
// ~1e-10 for any angle a position up to 2^31 gives, so the hardware sine / cosine (absolute error
// <= 2^-21.4 on [-pi, pi]) is accurate at long positions too. (The float64 sincos this replaces
// took 54 registers and a stack frame, which held the kernel to 3 blocks per SM.)
__device__ __forceinline__ float reduce_angle(double angle) {
  constexpr double kInvTwoPi = 0.15915494309189535;
  constexpr double kTwoPiHi = 6.283185307179586;
  constexpr double kTwoPiLo = 2.4492935982947064e-16;
  const double k = rint(angle * kInvTwoPi);
  return static_cast<float>(fma(-k, kTwoPiLo, fma(-k, kTwoPiHi, angle)));
}

// Chunks of kVec elements per thread and half: lanes <= 32 threads cover up to kMaxHalf.
template <int kVec>
constexpr int kChunks = kMaxHalf / (32 * kVec) > 0 ? kMaxHalf / (32 * kVec) : 1;

template <DType kNorm, int kVec, bool kAppend>
__global__ void __launch_bounds__(kMaxThreads)
    qk_norm_rope_kernel(const __grid_constant__ QkNormRopeArgs a) {
  static_assert(!kAppend || kVec == 8);
  detail::pdl_launch_dependents();
  constexpr int kC = kChunks<kVec>;
  __shared__ float cos_t[kMaxHalf];
  __shared__ float sin_t[kMaxHalf];
  const int32_t t = blockIdx.x;
  // The token's cos / sin table and its slot, before the wait: positions and slots are step
  // inputs and inv_freq is constant (no kernel of the step writes them), so only the heads'
  // loads are left between the wait and the output.
  {
    const double position = a.positions[t];
    for (int i = threadIdx.x; i < a.half; i += blockDim.x) {
      float s;
      float c;
      __sincosf(reduce_angle(position * static_cast<double>(a.inv_freq[i])), &s, &c);
      cos_t[i] = c * a.attention_scaling;
      sin_t[i] = s * a.attention_scaling;
    }
    __syncthreads();
  }
  const int64_t slot = kAppend ? a.slot_mapping[t] : -1;
  detail::pdl_wait();
  const bool any_norm = a.q_norm != nullptr || a.k_norm != nullptr;
  const int group = threadIdx.x / a.lanes;
  const int groups = blockDim.x / a.lanes;
  const int lane = threadIdx.x % a.lanes;
  __nv_bfloat16* token = a.qkv + static_cast<int64_t>(t) * a.token_stride;
  const int32_t heads = kAppend ? a.all_heads : a.num_heads;
  // Every thread runs the same number of iterations (the group sums shuffle across the warp).
  for (int base = 0; base < heads; base += groups) {
    const int h = base + group;
    const bool head_active = h < heads;
    const bool is_v = h >= a.num_heads;  // fused append only: a V head, not rotated
    __nv_bfloat16* head = token + static_cast<int64_t>(h) * a.head_dim;
    // Chunk c of this thread: elements [i0, i0 + kVec) and [half + i0, half + i0 + kVec).
    float lo[kC][kVec] = {};
    float hi[kC][kVec] = {};
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int i0 = (lane + c * a.lanes) * kVec;
      if (head_active && i0 < a.half) {
        detail::load_n<DType::kBF16, kVec>(head, i0, lo[c]);
        detail::load_n<DType::kBF16, kVec>(head, a.half + i0, hi[c]);
      }
    }
    if (any_norm) {
      const void* w = h < a.num_q_heads ? a.q_norm : a.k_norm;
      float ss = 0.0f;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) ss = fmaf(lo[c][e], lo[c][e], ss);
#pragma unroll
        for (int e = 0; e < kVec; ++e) ss = fmaf(hi[c][e], hi[c][e], ss);
      }
      ss = detail::group_sum(ss, a.lanes);
      if (head_active && !is_v && w != nullptr) {
        const float scale = rsqrtf(ss * a.inv_head_dim + a.eps);
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const int i0 = (lane + c * a.lanes) * kVec;
          if (i0 < a.half) {
            float w_lo[kVec];
            float w_hi[kVec];
            detail::load_n<kNorm, kVec>(w, i0, w_lo);
            detail::load_n<kNorm, kVec>(w, a.half + i0, w_hi);
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              lo[c][e] = (lo[c][e] * scale) * w_lo[e];
              hi[c][e] = (hi[c][e] * scale) * w_hi[e];
            }
          }
        }
      }
    }
    float out_lo[kC][kVec] = {};
    float out_hi[kC][kVec] = {};
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int i0 = (lane + c * a.lanes) * kVec;
      if (head_active && !is_v && i0 < a.half) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const float cs = cos_t[i0 + e];
          const float sn = sin_t[i0 + e];
          out_lo[c][e] = lo[c][e] * cs - hi[c][e] * sn;
          out_hi[c][e] = hi[c][e] * cs + lo[c][e] * sn;
        }
        detail::store_bf16_n<kVec>(head, i0, out_lo[c]);
        detail::store_bf16_n<kVec>(head, a.half + i0, out_hi[c]);
      }
    }
    if constexpr (kAppend) {
      // K rows are appended as stored (rounded to bf16), V rows as loaded (exact bf16).
      float amax = 0.0f;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          if (is_v) {
            out_lo[c][e] = lo[c][e];
            out_hi[c][e] = hi[c][e];
          } else {
            out_lo[c][e] = __bfloat162float(__float2bfloat16_rn(out_lo[c][e]));
            out_hi[c][e] = __bfloat162float(__float2bfloat16_rn(out_hi[c][e]));
          }
          amax = fmaxf(amax, fmaxf(fabsf(out_lo[c][e]), fabsf(out_hi[c][e])));  // NaN ignored
        }
      }
      amax = group_max(amax, a.lanes);
      if (head_active && h >= a.num_q_heads && slot >= 0) {
        const int32_t kv_head = is_v ? h - a.num_heads : h - a.num_q_heads;
        append_row<kC>(a, is_v, kv_head, slot, lane, out_lo, out_hi, amax);
      }
    }
  }
}

template <DType kNorm, int kVec, bool kAppend = false>
void launch(const QkNormRopeArgs& a, int32_t num_tokens, int threads, cudaStream_t stream) {
  detail::launch_pdl(qk_norm_rope_kernel<kNorm, kVec, kAppend>,
                     dim3(static_cast<unsigned>(num_tokens)), dim3(threads), 0, stream, a);
}

template <DType kNorm>
void launch_norm(const QkNormRopeArgs& a, int32_t num_tokens, int vec, int threads,
                 cudaStream_t stream) {
  if (a.slot_mapping != nullptr) {
    launch<kNorm, 8, true>(a, num_tokens, threads, stream);
  } else if (vec == 8) {
    launch<kNorm, 8>(a, num_tokens, threads, stream);
  } else if (vec == 2) {
    launch<kNorm, 2>(a, num_tokens, threads, stream);
  } else {
    launch<kNorm, 1>(a, num_tokens, threads, stream);
  }
}

Status validate(const QkNormRopeParams& p) {
  const bool any_norm = p.q_norm != nullptr || p.k_norm != nullptr;
  if (any_norm && p.norm_dtype != DType::kBF16 && p.norm_dtype != DType::kF16 &&
      p.norm_dtype != DType::kF32) {
    return Status::Unsupported("qk_norm_rope norm dtype " + std::string(dtype_name(p.norm_dtype)) +
                               " (supported: BF16, F16, F32)");
  }
  if (p.num_tokens < 0 || p.num_q_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 ||
      p.head_dim % 2 != 0 || p.head_dim > 2 * kMaxHalf || !(p.eps >= 0.0f)) {
    return Status::InvalidArgument(
        "qk_norm_rope needs num_tokens >= 0, positive head counts, an even head_dim <= 256 and "
        "eps >= 0");
  }
  const int64_t row = (static_cast<int64_t>(p.num_q_heads) + 2 * p.num_kv_heads) * p.head_dim;
  if (p.token_stride < row) {
    return Status::InvalidArgument("qk_norm_rope: token_stride " + std::to_string(p.token_stride) +
                                   " is smaller than a qkv row of " + std::to_string(row));
  }
  if (p.num_tokens > 0 && (p.qkv == nullptr || p.positions == nullptr || p.inv_freq == nullptr)) {
    return Status::InvalidArgument("qk_norm_rope needs qkv, positions and inv_freq");
  }
  return Status::Ok();
}

// The widest per-thread vector (8, 2 or 1 elements) that the shapes and pointers allow.
int choose_vec(const QkNormRopeParams& p) {
  const int half = p.head_dim / 2;
  const int64_t norm_elem = dtype_size(p.norm_dtype);
  auto fits = [&](int vec) {
    const uintptr_t bytes = static_cast<uintptr_t>(vec) * 2;
    const auto norm_ok = [&](const void* w) {
      return w == nullptr || detail::aligned_to(w, static_cast<uintptr_t>(vec * norm_elem));
    };
    return half % vec == 0 && p.token_stride % vec == 0 && detail::aligned_to(p.qkv, bytes) &&
           norm_ok(p.q_norm) && norm_ok(p.k_norm);
  };
  if (fits(8)) return 8;
  if (fits(2)) return 2;
  return 1;
}

// The kv_append() equivalent of p's fused append.
KvAppendParams append_params(const QkNormRopeParams& p) {
  KvAppendParams a;
  a.cache = p.cache;
  const auto* qkv = static_cast<const __nv_bfloat16*>(p.qkv);
  a.k = qkv + static_cast<int64_t>(p.num_q_heads) * p.head_dim;
  a.v = qkv + static_cast<int64_t>(p.num_q_heads + p.num_kv_heads) * p.head_dim;
  a.src_dtype = DType::kBF16;
  a.k_token_stride = p.token_stride;
  a.v_token_stride = p.token_stride;
  a.slot_mapping = p.slot_mapping;
  a.num_tokens = p.num_tokens;
  return a;
}

}  // namespace

Status qk_norm_rope(const QkNormRopeParams& p, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(validate(p));
  const bool append = p.slot_mapping != nullptr;
  if (append) {
    if (p.cache.num_kv_heads != p.num_kv_heads || p.cache.head_dim != p.head_dim) {
      return Status::InvalidArgument("qk_norm_rope: the cache's KV heads / head dim differ");
    }
    STRATA_RETURN_IF_ERROR(validate_kv_append(append_params(p)));
  }
  if (p.num_tokens == 0) return Status::Ok();
  const int vec = choose_vec(p);
  // Fused: 16-byte vectors and a cache dtype the kernel encodes (validate_kv_append has checked
  // the cache's alignment, and every cache row offset of a head is a multiple of 8 channels).
  const bool fuse = append && vec == 8 &&
                    (p.cache.dtype == DType::kBF16 || p.cache.dtype == DType::kF8E4M3 ||
                     p.cache.dtype == DType::kF8E5M2 || p.cache.dtype == DType::kI8);
  const int half = p.head_dim / 2;
  const int lanes =
      std::min(32, static_cast<int>(std::bit_ceil(static_cast<unsigned>(half / vec))));
  const int32_t num_heads = p.num_q_heads + p.num_kv_heads;
  const int32_t all_heads = num_heads + (fuse ? p.num_kv_heads : 0);
  const int threads = static_cast<int>(std::clamp<int64_t>(
      detail::ceil_div(static_cast<int64_t>(all_heads) * lanes, 32) * 32, 32, kMaxThreads));
  QkNormRopeArgs a{};
  a.qkv = static_cast<__nv_bfloat16*>(p.qkv);
  a.token_stride = p.token_stride;
  a.positions = p.positions;
  a.inv_freq = p.inv_freq;
  a.q_norm = p.q_norm;
  a.k_norm = p.k_norm;
  a.eps = p.eps;
  a.inv_head_dim = 1.0f / static_cast<float>(p.head_dim);
  a.attention_scaling = p.attention_scaling;
  a.num_q_heads = p.num_q_heads;
  a.num_heads = num_heads;
  a.head_dim = p.head_dim;
  a.half = half;
  a.lanes = lanes;
  a.all_heads = all_heads;
  if (fuse) {
    a.slot_mapping = p.slot_mapping;
    a.dst = detail::kv_dest(p.cache);
  }
  if (p.norm_dtype == DType::kF16) {
    launch_norm<DType::kF16>(a, p.num_tokens, vec, threads, stream);
  } else if (p.norm_dtype == DType::kF32) {
    launch_norm<DType::kF32>(a, p.num_tokens, vec, threads, stream);
  } else {
    launch_norm<DType::kBF16>(a, p.num_tokens, vec, threads, stream);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  if (append && !fuse) return kv_append(append_params(p), stream);
  return Status::Ok();
}

}  // namespace strata::cuda
