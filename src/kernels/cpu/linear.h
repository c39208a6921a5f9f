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
// register tiles inside, linear.cc).

#include <cstdint>

#include "core/status.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"

namespace strata::cpu {

// x:      [m, k] fp32, row-major, k = weight.dim(1).
// weight: [n, k], rank 2, dtype F32, BF16 or F16.
// bias:   [n] (rank 1) in F32, BF16 or F16, or empty (data == nullptr) for no bias.
// out:    [m, n] fp32; must not overlap x, weight or bias.
// m >= 0; m == 0 writes nothing. Errors (nothing is written): InvalidArgument for null pointers or
// shapes that do not match; Unsupported for a weight or bias dtype outside F32/BF16/F16.
Status linear(const float* x, TensorView weight, TensorView bias, float* out, int64_t m,
              ThreadPool& pool);

namespace detail {
// linear on a chosen path (tests and benchmarks compare paths); Unsupported when the running CPU
// lacks it. linear() calls this with best_cpu_isa().
Status linear_with_isa(CpuIsa isa, const float* x, TensorView weight, TensorView bias, float* out,
                       int64_t m, ThreadPool& pool);
}  // namespace detail

}  // namespace strata::cpu
