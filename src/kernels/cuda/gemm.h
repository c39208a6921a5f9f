#pragma once
// Gemm: the decoder's matrix products through cuBLASLt (docs/gpu-engine.md).
//
//   d[m, n] = sum_k a[m, k] * w[n, k]  (+ bias[n])  (+ d[m, n] when accumulate)
//
// a and w are BF16, row-major (w is the checkpoint's [out_features, in_features] layout, so this
// is a * w^T); accumulation is fp32; d is BF16 or F32. `accumulate` adds into d (beta = 1), which
// the runner uses to add o_proj and down_proj outputs straight into the fp32 residual. Precision:
// an F32 d is rounded once; a BF16 d once for a plain product, but cuBLASLt may round the product
// to bf16 before adding d (accumulate) or the bias (seen at m 7, n 1030): two roundings, up to
// 1 ulp. Accumulate into F32.
// The bias goes through cuBLASLt's bias epilogue; for an F32 d, whose bf16 bias cuBLASLt 13.0
// does not take there, a small kernel adds it after the product (one more launch).
//
// Products of at most gemv_max_rows rows whose k is a multiple of 8 (decode steps of small
// batches) run on Strata's GEMV kernel instead (gemv.h: fp32 sums, one rounding, the same bits
// for a row in any batch of up to that many rows), which streams the weights at a higher share of
// the bandwidth than cuBLASLt's tiles there; 0 sends every product to cuBLASLt.
//
// FP8 weights (w_dtype F8E4M3): w holds e4m3 codes with one fp32 scale per output feature
// (w_scale, fp8_quantize.h), so w[j, :] = code[j, :] * w_scale[j]. Few-row products run the GEMV
// on the codes with bf16 activations; the others quantize a to e4m3 per row (fp8_quantize_rows,
// one scale per token, into the Gemm's scratch) and multiply on the FP8 tensor cores through
// cuBLASLt with both scale vectors applied in its epilogue (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F:
// d[i, j] = a_scale[i] * w_scale[j] * sum_k code_a[i, k] code_w[j, k], fp32 accumulation). k must
// be a multiple of 16 and ldw of 16 bytes. Where cuBLASLt offers no vector scales, the product of
// the bare codes goes to a bf16 scratch and a kernel applies both scales. The scratch grows on
// the first product of a larger shape (outside any graph capture, as for the algorithm choice),
// keeping the smaller buffers for the graphs captured with them.
//
// SiLU-and-mul epilogue (GemmEpilogue::kSiluAndMul), for the gated MLP: the product is gate | up
// (n = 2 * inter; w's rows are gate_proj's then up_proj's, the bias likewise) and d receives
// act[m, inter] = silu_and_mul(gate | up) (model_ops.h), bit for bit. Products on the few-row
// GEMV form it in their epilogue (gemv.h: no gate | up in memory, no silu_and_mul launch); the
// others write gate | up to the caller's product_scratch and run silu_and_mul from there. Which
// path a call takes depends only on its shape (takes_gemv), so a CUDA graph captures the same one
// that ran eagerly.
//
// Owns one cuBLASLt handle and its workspace, and caches the chosen algorithm per problem shape
// (m, n, k, lda, ldw, ldd, d dtype, bias, accumulate), so a steady-state step costs no heuristic
// queries. m = 0 is an OK no-op.
// Not thread-safe: one Gemm per stream. Calls are capturable into a CUDA graph once the shape's
// algorithm is cached (the first call with a shape must run outside capture).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::cuda {

enum class GemmEpilogue {
  kNone,        // d = a w^T (+ bias) (+ d)
  kSiluAndMul,  // d[m, n / 2] = silu_and_mul(a w^T (+ bias)), the product being gate | up
};

struct GemmParams {
  const void* a = nullptr;  // [m, k] bf16, row stride lda elements
  int64_t lda = 0;
  // [n, k] bf16 (or e4m3 codes, w_dtype), row stride ldw elements. Must not be written by the kernel before this one on
  // the stream: the few-row path (gemv.h) reads it before its grid-dependency wait.
  const void* w = nullptr;
  int64_t ldw = 0;
  DType w_dtype = DType::kBF16;    // BF16, or F8E4M3 codes (ldw then counts bytes)
  const float* w_scale = nullptr;  // F8E4M3: [n] fp32 per output feature
  const void* bias = nullptr;  // nullable, [n] bf16
  void* d = nullptr;           // [m, n] d_dtype, row stride ldd elements
  int64_t ldd = 0;
  DType d_dtype = DType::kBF16;  // BF16 or F32
  bool accumulate = false;       // d += a w^T (+ bias) instead of d = ...
  int64_t m = 0, n = 0, k = 0;
  // kSiluAndMul: n even; d is BF16 [m, n / 2] with ldd = n / 2; no accumulate; and
  // product_scratch ([m, n] bf16, rows of n elements, 16-byte aligned) is required, whether or
  // not this shape goes through it (it holds gate | up where the GEMV does not take the product).
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  void* product_scratch = nullptr;
};

class Gemm {
 public:
  static constexpr int64_t kDefaultGemvMaxRows = 2;
  // Creates the handle and a workspace of workspace_bytes (32 MiB is cuBLAS's advice for Hopper).
  // gemv_max_rows is clamped to 0..8.
  static Result<Gemm> create(size_t workspace_bytes = size_t{32} << 20,
                             int64_t gemv_max_rows = kDefaultGemvMaxRows);
  Gemm(Gemm&&) noexcept;
  Gemm& operator=(Gemm&&) noexcept;
  ~Gemm();

  // Allocates the FP8 scratch for products of up to max_rows rows, max_k inputs and max_n
  // outputs (a product cuBLASLt cannot scale itself goes through it in fp32), so that later
  // products need not grow it (each growth keeps the old buffer alive for the graphs that use
  // it). Returns the scratch's bytes.
  Result<int64_t> reserve_fp8(int64_t max_rows, int64_t max_k, int64_t max_n,
                              cudaStream_t stream);

  // How many of the cached FP8 plans take cuBLASLt's vector scales, and how many scale in a
  // kernel after it (reported by tests and benchmarks).
  struct Fp8PlanCounts {
    int64_t vector_scaled = 0, unscaled = 0;
  };
  Fp8PlanCounts fp8_plan_counts() const;

  // Whether a product of m rows, n outputs and k inputs with w_dtype weights runs on the few-row
  // GEMV (m <= gemv_max_rows and the GEMV takes the sizes) rather than cuBLASLt: there a
  // kSiluAndMul epilogue costs no launch of its own.
  bool takes_gemv(int64_t m, int64_t n, int64_t k, DType w_dtype) const;

  // InvalidArgument for null pointers, non-positive sizes, strides smaller than a row or
  // misaligned (16-byte) pointers, FP8 weights without scales or with k not a multiple of 16,
  // and a kSiluAndMul epilogue outside its contract (above); Unsupported for another d or w
  // dtype; Internal when cuBLASLt finds no algorithm. Asynchronous on stream.
  Status run(const GemmParams& params, cudaStream_t stream);

 private:
  struct Impl;
  explicit Gemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::cuda
