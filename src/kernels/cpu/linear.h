#pragma once
// linear: out = x W^T + b on the CPU with fp32 activations and F32/BF16/F16 weights (the layout of
// torch.nn.Linear and of Hugging Face checkpoints: weight [out_features, in_features]).
//
// Determinism: each output element is one dot product over k with a fixed accumulation order,
// then + bias, the same whatever tile the row lands in, the batch size m or the thread count. So a
// token's projection is bit-identical alone or in any batch. The order belongs to the path
// (cpu_isa.h): portable and AVX2 use 8 interleaved partial sums with separate multiply and add
// (bit-identical to each other); AVX-512 uses one 16-lane fused multiply-add chain per output
// (linear_avx512.h). A process runs one path, best_cpu_isa().
//
// Cost: 2 * m * n * k flops. BF16/F16 weights are read as they are and widened in registers on the
// AVX2 and AVX-512 paths, so a decode step reads 2 bytes per weight; the portable fallback widens
// one weight tile to fp32 per (thread, tile), never the whole matrix. Work is split over the
// ThreadPool: tiles of up to 64 rows of x by 16 rows of W (portable, AVX2), or blocks of up to 64
// rows of x by ranges of W's rows that threads claim from a shared counter (AVX-512; 4 x 6
// register tiles inside, linear.cc; a single row of x, a decode step, reads each weight row start
// to end before the next, one sequential stream per thread with its bits unchanged).

#include <cstdint>

#include "core/status.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"

namespace strata::cpu {

// How cpu::linear multiplies BF16 weights (other weight dtypes always take the fp32 path):
//   kF32   activations stay fp32; the exact, order-fixed path of best_cpu_isa() (the default,
//          held to transformers' logits within 1e-4 by the fixture tests).
//   kBf16  activations rounded to BF16 (nearest even) and multiplied on the BF16 dot-product
//          instructions (vdpbf16ps, AVX-512 BF16; gemm_bf16_avx512.h): about twice the fp32
//          peak, at BF16's input rounding (as llama.cpp computes BF16 weights). Every row count
//          takes it, so a request's results are still the same alone or in any batch.
enum class LinearPrecision { kF32, kBf16 };

// Sets the precision of every linear() call in the process, on any thread, until destruction
// (then restores the one before): the model's forward pass opens one, so every projection under
// it -- the MoE block's experts on pool workers included -- follows the engine's setting without
// threading it through each call. Process-wide, so scopes must nest, never overlap from two
// threads: the CPU engine's single step loop opens one per forward pass (the thread pool already
// takes one caller at a time).
class LinearPrecisionScope {
 public:
  explicit LinearPrecisionScope(LinearPrecision precision);
  ~LinearPrecisionScope();
  LinearPrecisionScope(const LinearPrecisionScope&) = delete;
  LinearPrecisionScope& operator=(const LinearPrecisionScope&) = delete;

 private:
  LinearPrecision saved_;
};

// The precision in force (kF32 outside any scope).
LinearPrecision current_linear_precision();
// Whether this CPU runs `precision` (kBf16 needs AVX-512 BF16).
bool linear_precision_supported(LinearPrecision precision);
const char* linear_precision_name(LinearPrecision precision);

// x:      [m, k] fp32, row-major, k = weight.dim(1).
// weight: [n, k], rank 2, dtype F32, BF16 or F16.
// bias:   [n] (rank 1) in F32, BF16 or F16, or empty (data == nullptr) for no bias.
// out:    [m, n] fp32; must not overlap x, weight or bias.
// m >= 0; m == 0 writes nothing. Errors (nothing is written): InvalidArgument for null pointers or
// shapes that do not match; Unsupported for a weight or bias dtype outside F32/BF16/F16, or
// a BF16 weight under LinearPrecision::kBf16 on a CPU without AVX-512 BF16.
Status linear(const float* x, TensorView weight, TensorView bias, float* out, int64_t m,
              ThreadPool& pool);

namespace detail {
// linear on a chosen path (tests and benchmarks compare paths); Unsupported when the running CPU
// lacks it. linear() calls this with best_cpu_isa().
Status linear_with_isa(CpuIsa isa, const float* x, TensorView weight, TensorView bias, float* out,
                       int64_t m, ThreadPool& pool);
// The LinearPrecision::kBf16 path for a BF16 weight (what linear() calls under that scope);
// InvalidArgument for another weight dtype, Unsupported without AVX-512 BF16.
Status linear_bf16(const float* x, TensorView weight, TensorView bias, float* out, int64_t m,
                   ThreadPool& pool);
}  // namespace detail

}  // namespace strata::cpu
