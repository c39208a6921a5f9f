// silu_and_mul() and gelu_tanh_and_mul(): the gated MLP's activations, bf16 in and out; and
// logit_softcap() on fp32 logits (model_ops.h).

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/model_ops_common.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGridY = 65535;

struct SiluAndMulArgs {
  const __nv_bfloat16* gate_up;
  __nv_bfloat16* out;
  int32_t num_tokens;
  int32_t intermediate;
};

// GeGLU's gelu_pytorch_tanh times up in fp32 (the caller rounds to bf16 once). tanhf (not the
// tanh.approx instruction): the CPU engine's and transformers' tanh to float precision.
__device__ __forceinline__ float gelu_tanh_mul(float gate, float up) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const float inner = kSqrt2OverPi * (gate + 0.044715f * gate * gate * gate);
  return 0.5f * gate * (1.0f + tanhf(inner)) * up;
}

enum class Activation { kSilu, kGeluTanh };

// Grid: x covers one output row in chunks of kThreads * kVec elements, y strides over tokens.
// kVec = 8: two 16-byte loads (gate, up) and one 16-byte store per thread; kVec = 1 otherwise.
// SiLU: each element is silu_mul.cuh's, which the GEMV's SiLU-and-mul epilogue forms the same
// way.
template <Activation kAct, int kVec>
__global__ void __launch_bounds__(kThreads)
    gated_act_kernel(const __grid_constant__ SiluAndMulArgs a) {
  detail::pdl_launch_dependents();
  detail::pdl_wait();
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  if (col >= a.intermediate) return;
  for (int32_t t = blockIdx.y; t < a.num_tokens; t += gridDim.y) {
    const __nv_bfloat16* gate = a.gate_up + static_cast<int64_t>(t) * 2 * a.intermediate + col;
    const __nv_bfloat16* up = gate + a.intermediate;
    __nv_bfloat16* out = a.out + static_cast<int64_t>(t) * a.intermediate + col;
    if constexpr (kAct == Activation::kGeluTanh && kVec == 8) {
      float g[8], u[8], y[8];
      detail::unpack8<DType::kBF16>(detail::load_stream16(gate), g);
      detail::unpack8<DType::kBF16>(detail::load_stream16(up), u);
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = gelu_tanh_mul(g[e], u[e]);
      detail::store_bf16_n<8>(out, 0, y);
    } else if constexpr (kAct == Activation::kGeluTanh) {
      *out = __float2bfloat16_rn(gelu_tanh_mul(__bfloat162float(*gate), __bfloat162float(*up)));
    } else if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(out) =
          detail::silu_mul8_bf16(detail::load_stream16(gate), detail::load_stream16(up));
    } else {
      *out = detail::silu_mul_bf16(__bfloat162float(*gate), __bfloat162float(*up));
    }
  }
}

template <Activation kAct, int kVec>
void launch(const SiluAndMulArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(detail::ceil_div(a.intermediate, int64_t{kThreads} * kVec)),
                  static_cast<unsigned>(std::min(a.num_tokens, kMaxGridY)));
  detail::launch_pdl(gated_act_kernel<kAct, kVec>, grid, dim3(kThreads), 0, stream, a);
}

template <Activation kAct>
Status gated_act(const SiluAndMulParams& p, const char* name, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.intermediate <= 0) {
    return Status::InvalidArgument(std::string(name) +
                                   " needs num_tokens >= 0 and intermediate > 0");
  }
  if (p.num_tokens == 0) return Status::Ok();
  if (p.gate_up == nullptr || p.out == nullptr) {
    return Status::InvalidArgument(std::string(name) + " needs gate_up and out");
  }
  const SiluAndMulArgs a{static_cast<const __nv_bfloat16*>(p.gate_up),
                         static_cast<__nv_bfloat16*>(p.out), p.num_tokens, p.intermediate};
  if (p.intermediate % 8 == 0 && detail::aligned_to(p.gate_up, 16) &&
      detail::aligned_to(p.out, 16)) {
    launch<kAct, 8>(a, stream);
  } else {
    launch<kAct, 1>(a, stream);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

// cap * tanh(x / cap) in double, as the CPU engine forms it (Model::soft_cap), rounded to fp32.
__global__ void __launch_bounds__(kThreads)
    logit_softcap_kernel(float* logits, int64_t n, double cap) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    logits[i] = static_cast<float>(cap * tanh(static_cast<double>(logits[i]) / cap));
  }
}

}  // namespace

Status silu_and_mul(const SiluAndMulParams& p, cudaStream_t stream) {
  return gated_act<Activation::kSilu>(p, "silu_and_mul", stream);
}

Status gelu_tanh_and_mul(const SiluAndMulParams& p, cudaStream_t stream) {
  return gated_act<Activation::kGeluTanh>(p, "gelu_tanh_and_mul", stream);
}

Status logit_softcap(float* logits, int64_t n, float cap, cudaStream_t stream) {
  if (n < 0 || !(cap > 0.0f && cap < INFINITY)) {
    return Status::InvalidArgument("logit_softcap needs n >= 0 and a positive finite cap");
  }
  if (n == 0) return Status::Ok();
  if (logits == nullptr) return Status::InvalidArgument("logit_softcap needs logits");
  const int64_t blocks = std::min<int64_t>(detail::ceil_div(n, int64_t{kThreads}), 65535);
  logit_softcap_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(logits, n, cap);
  STRATA_CUDA_CHECK_LAUNCH();
  return Status::Ok();
}

}  // namespace strata::cuda
