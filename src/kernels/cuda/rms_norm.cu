// rms_norm(): fp32 residual (+= delta, or += rmsnorm(delta) * delta_weight: Gemma 3's sandwich
// norm) -> RMSNorm -> bf16, one thread block per row (model_ops.h).
//
// A row is held in registers: thread j of the block owns the chunks j, j + blockDim.x, ... of
// kVec elements (kVec = 8: two 16-byte loads of fp32, one 16-byte store of bf16), at most kPer
// of them, so the residual is read once, written once (with delta) and the output written once.
// The launch shape (threads, kPer, kVec) depends only on hidden and the pointers' alignment,
// never on num_rows, and the block reduction is a fixed tree (block_sum), so a row's output is
// the same bits whichever batch it is in.

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/model_ops_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace strata::cuda {
namespace {

// Threads per block when the row allows it; wider rows use up to 1024 threads of kMaxPer chunks.
constexpr int kPreferredThreads = 256;
constexpr int kMaxThreads = 1024;
constexpr int kMaxPer = 8;
constexpr int kMaxDeltaNormValues = 32;  // per thread, for rms_norm's delta_weight

struct RmsNormArgs {
  float* residual;
  const float* delta;
  const float* delta_weight;
  const void* weight;
  const int32_t* rows;
  __nv_bfloat16* out;
  int32_t hidden;
  float inv_hidden;
  float eps;
};

template <int kVec>
__device__ __forceinline__ void load_f32(const float* p, float (&f)[kVec]) {
  if constexpr (kVec == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
    f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
    f[0] = *p;
  }
}

template <int kVec>
__device__ __forceinline__ void store_f32(float* p, const float (&f)[kVec]) {
  if constexpr (kVec == 8) {
    reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
  } else {
    *p = f[0];
  }
}

template <DType kWeight, int kVec, int kPer>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_kernel(const __grid_constant__ RmsNormArgs a) {
  detail::pdl_launch_dependents();
  // Before the wait: what no kernel of the step writes (the row list is a step input, the weight
  // constant), so the weight's load from memory is off the path from the wait to the output.
  // Wider rows (kPer x kVec > 16) load it after the sum as before, for their registers.
  constexpr bool kEarlyWeight = kPer * kVec <= 16;
  float w_early[kEarlyWeight ? kPer : 1][kVec];
  if constexpr (kEarlyWeight) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int32_t col = (threadIdx.x + j * blockDim.x) * kVec;
      if (col < a.hidden) detail::load_n<kWeight, kVec>(a.weight, col, w_early[j]);
    }
  }
  __shared__ float scratch[33];
  const int32_t r = blockIdx.x;
  const int64_t src_row = a.rows != nullptr ? a.rows[r] : r;
  detail::pdl_wait();
  float* x_row = a.residual + src_row * a.hidden;
  const float* d_row = a.delta != nullptr ? a.delta + static_cast<int64_t>(r) * a.hidden : nullptr;

  float x[kPer][kVec];
  float ss = 0.0f;
  // The normed delta only in shapes of up to 32 values per thread (hidden <= 8192; the launcher
  // refuses wider): compiled into the 64-value shape it would add to that shape's spills (ptxas:
  // 160 bytes without it, 750 with).
  constexpr bool kDeltaNorm = kPer * kVec <= kMaxDeltaNormValues;
  if (kDeltaNorm && d_row != nullptr && a.delta_weight != nullptr) {
    // The delta normed first (its own mean square, the same fixed tree), times delta_weight, then
    // added: x = residual + (delta * rsqrt(mean(delta^2) + eps)) * delta_weight.
    float dss = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int32_t col = (threadIdx.x + j * blockDim.x) * kVec;
      if (col < a.hidden) {
        load_f32<kVec>(d_row + col, x[j]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) dss = fmaf(x[j][e], x[j][e], dss);
      }
    }
    dss = detail::block_sum(dss, scratch);
    const float d_scale = rsqrtf(dss * a.inv_hidden + a.eps);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int32_t col = (threadIdx.x + j * blockDim.x) * kVec;
      if (col < a.hidden) {
        float res[kVec];
        float dw[kVec];
        load_f32<kVec>(x_row + col, res);
        load_f32<kVec>(a.delta_weight + col, dw);
#pragma unroll
        for (int e = 0; e < kVec; ++e) x[j][e] = res[e] + (x[j][e] * d_scale) * dw[e];
        store_f32<kVec>(x_row + col, x[j]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) ss = fmaf(x[j][e], x[j][e], ss);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int32_t col = (threadIdx.x + j * blockDim.x) * kVec;
      if (col < a.hidden) {
        load_f32<kVec>(x_row + col, x[j]);
        if (d_row != nullptr) {
          float d[kVec];
          load_f32<kVec>(d_row + col, d);
#pragma unroll
          for (int e = 0; e < kVec; ++e) x[j][e] += d[e];
          store_f32<kVec>(x_row + col, x[j]);
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) ss = fmaf(x[j][e], x[j][e], ss);
      }
    }
  }
  ss = detail::block_sum(ss, scratch);
  const float scale = rsqrtf(ss * a.inv_hidden + a.eps);

  __nv_bfloat16* out_row = a.out + static_cast<int64_t>(r) * a.hidden;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int32_t col = (threadIdx.x + j * blockDim.x) * kVec;
    if (col < a.hidden) {
      float w[kVec];
      if constexpr (kEarlyWeight) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) w[e] = w_early[j][e];
      } else {
        detail::load_n<kWeight, kVec>(a.weight, col, w);
      }
      float y[kVec];
      // Hugging Face's order: (x * inv_rms) first, then the weight.
#pragma unroll
      for (int e = 0; e < kVec; ++e) y[e] = (x[j][e] * scale) * w[e];
      detail::store_bf16_n<kVec>(out_row, col, y);
    }
  }
}

// The launch shape for a row of `units` chunks: kPer, then threads (a multiple of 32).
struct Shape {
  int per;
  int threads;
};
Shape choose_shape(int64_t units) {
  int per = 1;
  while (per < kMaxPer && units > static_cast<int64_t>(per) * kPreferredThreads) per *= 2;
  const int64_t threads = detail::ceil_div(detail::ceil_div(units, per), 32) * 32;
  return {per, static_cast<int>(threads)};
}

template <DType kWeight, int kVec>
void launch_vec(const RmsNormArgs& a, int32_t num_rows, Shape s, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(num_rows));
  switch (s.per) {
    case 1:
      detail::launch_pdl(rms_norm_kernel<kWeight, kVec, 1>, grid, dim3(s.threads), 0, stream, a);
      break;
    case 2:
      detail::launch_pdl(rms_norm_kernel<kWeight, kVec, 2>, grid, dim3(s.threads), 0, stream, a);
      break;
    case 4:
      detail::launch_pdl(rms_norm_kernel<kWeight, kVec, 4>, grid, dim3(s.threads), 0, stream, a);
      break;
    default:
      detail::launch_pdl(rms_norm_kernel<kWeight, kVec, kMaxPer>, grid, dim3(s.threads), 0, stream, a);
      break;
  }
}

template <DType kWeight>
void launch_weight(const RmsNormArgs& a, int32_t num_rows, bool vec, Shape s, cudaStream_t stream) {
  if (vec) {
    launch_vec<kWeight, 8>(a, num_rows, s, stream);
  } else {
    launch_vec<kWeight, 1>(a, num_rows, s, stream);
  }
}

Status validate(const RmsNormParams& p) {
  if (p.weight_dtype != DType::kBF16 && p.weight_dtype != DType::kF16 &&
      p.weight_dtype != DType::kF32) {
    return Status::Unsupported("rms_norm weight dtype " + std::string(dtype_name(p.weight_dtype)) +
                               " (supported: BF16, F16, F32)");
  }
  if (p.num_rows < 0 || p.hidden <= 0 || !(p.eps >= 0.0f)) {
    return Status::InvalidArgument("rms_norm needs num_rows >= 0, hidden > 0 and eps >= 0");
  }
  if (p.num_rows > 0 && (p.residual == nullptr || p.weight == nullptr || p.out == nullptr)) {
    return Status::InvalidArgument("rms_norm needs residual, weight and out");
  }
  if (p.rows != nullptr && p.delta != nullptr) {
    return Status::InvalidArgument("rms_norm: a row gather (rows) cannot add a delta");
  }
  if (p.delta_weight != nullptr && p.delta == nullptr) {
    return Status::InvalidArgument("rms_norm: delta_weight norms a delta, and there is none");
  }
  return Status::Ok();
}

}  // namespace

Status rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(validate(p));
  if (p.num_rows == 0) return Status::Ok();
  const bool vec = p.hidden % 8 == 0 && detail::aligned_to(p.residual, 16) &&
                   detail::aligned_to(p.out, 16) && detail::aligned_to(p.weight, 16) &&
                   (p.delta == nullptr || detail::aligned_to(p.delta, 16)) &&
                   (p.delta_weight == nullptr || detail::aligned_to(p.delta_weight, 16));
  const int64_t units = vec ? p.hidden / 8 : p.hidden;
  if (units > int64_t{kMaxPer} * kMaxThreads) {
    return Status::Unsupported("rms_norm: hidden = " + std::to_string(p.hidden) +
                               " is wider than one block holds");
  }
  const Shape s = choose_shape(units);
  if (p.delta_weight != nullptr && s.per * (vec ? 8 : 1) > kMaxDeltaNormValues) {
    return Status::Unsupported("rms_norm: hidden = " + std::to_string(p.hidden) +
                               " is wider than a normed delta (delta_weight) takes");
  }
  const RmsNormArgs a{p.residual,
                      p.delta,
                      p.delta_weight,
                      p.weight,
                      p.rows,
                      static_cast<__nv_bfloat16*>(p.out),
                      p.hidden,
                      1.0f / static_cast<float>(p.hidden),
                      p.eps};
  if (p.weight_dtype == DType::kBF16) {
    launch_weight<DType::kBF16>(a, p.num_rows, vec, s, stream);
  } else if (p.weight_dtype == DType::kF16) {
    launch_weight<DType::kF16>(a, p.num_rows, vec, s, stream);
  } else {
    launch_weight<DType::kF32>(a, p.num_rows, vec, s, stream);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
