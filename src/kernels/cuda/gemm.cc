#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/cublas_lt_loader.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_quantize.h"
#include "kernels/cuda/gemm_bias.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/model_ops.h"

namespace strata::cuda {
namespace {

// cuBLASLt's entry points (loaded by Gemm::create before any other use).
const detail::CublasLt& lt() { return detail::cublas_lt(); }

Status cublas_error_status(cublasStatus_t s, const char* expr, const char* file, int line) {
  return Status::Internal(std::string(expr) + " failed at " + file + ":" + std::to_string(line) +
                          ": " + lt().GetStatusName(s) + ": " + lt().GetStatusString(s));
}

#define STRATA_CUBLAS_CHECK(expr)                                              \
  do {                                                                         \
    const cublasStatus_t strata_cublas_s_ = (expr);                            \
    if (strata_cublas_s_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {              \
      return cublas_error_status(strata_cublas_s_, #expr, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)

// Every pointer and row stride is 16-byte aligned (checked in validate); the heuristic is told so
// that it never picks an algorithm that needs cuBLASLt's default of 256.
constexpr uint32_t kAlignmentBytes = 16;

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { lt().MatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { lt().MatrixLayoutDestroy(l); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { lt().MatmulPreferenceDestroy(p); }
};
using DescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using LayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using PreferencePtr = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

// What the algorithm choice depends on. Pointers are not part of it: every call's pointers meet
// the alignment the heuristic was told.
struct ShapeKey {
  int64_t m, n, k, lda, ldw, ldd;
  DType d_dtype;
  bool bias, accumulate;
  bool w_fp8 = false;
  bool operator==(const ShapeKey&) const = default;
};
struct ShapeKeyHash {
  size_t operator()(const ShapeKey& s) const {
    size_t h = 0;
    auto mix = [&h](uint64_t v) {
      h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    };
    for (int64_t v : {s.m, s.n, s.k, s.lda, s.ldw, s.ldd}) mix(static_cast<uint64_t>(v));
    mix(static_cast<uint64_t>(s.d_dtype) | (uint64_t{s.bias} << 8) | (uint64_t{s.accumulate} << 9) |
        (uint64_t{s.w_fp8} << 10));
    return h;
  }
};

// One cached problem: descriptors and the chosen algorithm. A call only sets the bias pointer.
//
// Row-major d[m, n] = a[m, k] w[n, k]^T is computed as the column-major d^T[n, m] = w^T a^T:
// cuBLASLt's A operand is w (column-major [k, n], ld = ldw, transposed), its B operand is a
// (column-major [k, m], ld = lda) and C = D is d^T (column-major [n, m], ld = ldd). The bias is
// then per row of D, i.e. per output feature, which is what CUBLASLT_EPILOGUE_BIAS adds.
//
// FP8 weights: A is w's e4m3 codes and B the activations' codes (the Gemm's scratch, ld = k),
// each with a vector of fp32 scales (OUTER_VEC_32F: A's per row of D, i.e. per output feature,
// B's per column of D, i.e. per token; the heuristic is asked with the scale pointers set, without
// which it finds none). Where cuBLASLt has no such algorithm, the product of the
// bare codes goes to an fp32 scratch (unscaled, exact up to fp32 accumulation) and
// finish_product applies both scales, the bias and the add into d; a bf16 scratch (with or
// without the scales) is the last resort, and rounds the product once more.
enum class Via { kNone, kF32, kBf16 };  // where an FP8 product goes before finish_product
struct Plan {
  DescPtr desc;
  LayoutPtr w_layout, a_layout, d_layout;
  cublasLtMatmulAlgo_t algo{};
  bool epilogue_bias = false;  // bias through the epilogue; else a bias kernel afterwards
  Via via = Via::kNone;        // FP8: D is an [m, n] scratch, finished by a kernel
  bool unscaled = false;       // FP8 without vector scales (via a scratch; the kernel scales)
};

cudaDataType_t cuda_type(DType d) { return d == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Status validate(const GemmParams& p) {
  if (p.d_dtype != DType::kBF16 && p.d_dtype != DType::kF32) {
    return Status::Unsupported("gemm output dtype " + std::string(dtype_name(p.d_dtype)) +
                               " (supported: BF16, F32)");
  }
  const bool w_fp8 = p.w_dtype == DType::kF8E4M3;
  if (p.w_dtype != DType::kBF16 && !w_fp8) {
    return Status::Unsupported("gemm weight dtype " + std::string(dtype_name(p.w_dtype)) +
                               " (supported: BF16, F8_E4M3)");
  }
  if (w_fp8 && (p.k % 16 != 0 || (p.m > 0 && p.w_scale == nullptr))) {
    return Status::InvalidArgument("gemm with FP8 weights needs k a multiple of 16 and w_scale");
  }
  if (p.m < 0 || p.n <= 0 || p.k <= 0) {
    return Status::InvalidArgument("gemm needs m >= 0 and n, k > 0");
  }
  const bool silu = p.epilogue == GemmEpilogue::kSiluAndMul;
  if (silu && (p.n % 2 != 0 || p.d_dtype != DType::kBF16 || p.accumulate || p.ldd != p.n / 2 ||
               (p.m > 0 && p.product_scratch == nullptr) || !aligned16(p.product_scratch))) {
    return Status::InvalidArgument(
        "gemm with the SiLU-and-mul epilogue needs an even n, a BF16 d of n / 2 columns "
        "(ldd = n / 2), no accumulate and a 16-byte aligned product_scratch");
  }
  if (p.lda < p.k || p.ldw < p.k || p.ldd < (silu ? p.n / 2 : p.n)) {
    return Status::InvalidArgument("gemm strides must hold a row (lda, ldw >= k, ldd >= n)");
  }
  if (p.m > 0 && (p.a == nullptr || p.w == nullptr || p.d == nullptr)) {
    return Status::InvalidArgument("gemm needs a, w and d");
  }
  const int64_t d_elem = dtype_size(p.d_dtype);
  if (!aligned16(p.a) || !aligned16(p.w) || !aligned16(p.d) ||
      (p.bias != nullptr && !aligned16(p.bias)) || (p.lda * 2) % 16 != 0 ||
      (p.ldw * (w_fp8 ? 1 : 2)) % 16 != 0 || (p.ldd * d_elem) % 16 != 0) {
    return Status::InvalidArgument("gemm pointers and row strides must be 16-byte aligned");
  }
  const int64_t kMaxDim = INT32_MAX;
  if (p.m > kMaxDim || p.n > kMaxDim || p.k > kMaxDim || p.ldd > kMaxDim || p.lda > kMaxDim ||
      p.ldw > kMaxDim) {
    return Status::InvalidArgument("gemm sizes must fit in 32 bits");
  }
  return Status::Ok();
}

// The few-row GEMV's parameters for a product Gemm::run has validated.
detail::GemvParams gemv_params(const GemmParams& p) {
  detail::GemvParams g;
  g.a = p.a;
  g.lda = p.lda;
  g.w = p.w;
  g.ldw = p.ldw;
  g.w_fp8 = p.w_dtype == DType::kF8E4M3;
  g.w_scale = p.w_scale;
  g.bias = p.bias;
  g.d = p.d;
  g.ldd = p.ldd;
  g.d_dtype = p.d_dtype;
  g.accumulate = p.accumulate;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.silu_and_mul = p.epilogue == GemmEpilogue::kSiluAndMul;
  return g;
}

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  int64_t gemv_max_rows = 0;
  std::unordered_map<ShapeKey, Plan, ShapeKeyHash> plans;
  // FP8: the activations' codes [m, k] and scales [m], and a via plan's product [m, n]. A grown
  // scratch keeps the buffers before it (retired): graphs captured earlier still use them.
  DeviceBuffer scratch;
  std::vector<DeviceBuffer> retired;

  // Grows the scratch to `bytes` (never inside a capture: the allocation would not be replayed).
  Status reserve_scratch(size_t bytes, cudaStream_t stream) {
    if (bytes <= scratch.bytes()) return Status::Ok();
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    STRATA_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) {
      return Status::Internal("gemm: the FP8 scratch must grow outside a graph capture");
    }
    auto buffer = DeviceBuffer::allocate(bytes);
    if (!buffer.ok()) return buffer.status();
    if (!scratch.empty()) retired.push_back(std::move(scratch));
    scratch = std::move(buffer).value();
    return Status::Ok();
  }

  Status run_fp8(const GemmParams& p, cudaStream_t stream);

  bool takes_gemv(int64_t m, int64_t n, int64_t k, DType w_dtype) const {
    return m <= gemv_max_rows && detail::gemv_fits(m, n, k, w_dtype == DType::kF8E4M3);
  }

  ~Impl() {
    plans.clear();
    if (handle != nullptr) lt().Destroy(handle);
  }

  // The descriptors of `key` with the bias epilogue (bias type bf16) or without; then the
  // heuristic's first algorithm. NotFound when the heuristic has none. via (FP8 only): D is a
  // contiguous fp32 or bf16 [m, n] scratch instead of d.
  Result<Plan> make_plan(const ShapeKey& key, bool epilogue_bias, Via via = Via::kNone,
                         bool unscaled = false) {
    Plan plan;
    cublasLtMatmulDesc_t desc = nullptr;
    STRATA_CUBLAS_CHECK(lt().MatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    plan.desc.reset(desc);
    const cublasOperation_t trans_w = CUBLAS_OP_T;
    const cublasOperation_t trans_a = CUBLAS_OP_N;
    STRATA_CUBLAS_CHECK(
        lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w, sizeof(trans_w)));
    STRATA_CUBLAS_CHECK(
        lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_a, sizeof(trans_a)));
    if (key.w_fp8 && !unscaled) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                                      &mode, sizeof(mode)));
      STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                                      &mode, sizeof(mode)));
      // The heuristic offers no vector-scaled algorithm while the scale pointers are null (on an
      // H200 with cuBLASLt 13.1, none for any shape): give it a device address, as for the bias;
      // each call then sets the real ones.
      const void* scale_probe = workspace.data();
      STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                      &scale_probe, sizeof(scale_probe)));
      STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                      &scale_probe, sizeof(scale_probe)));
    }
    if (epilogue_bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const int32_t bias_type = CUDA_R_16BF;
      // Not dereferenced by the heuristic, only read for its alignment: 16 bytes, the least that
      // validate() lets a call pass, so the algorithm suits every later bias pointer.
      const void* bias_probe = static_cast<const char*>(workspace.data()) + 16;
      STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                      &epilogue, sizeof(epilogue)));
      STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                      &bias_type, sizeof(bias_type)));
      STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias_probe, sizeof(bias_probe)));
    }
    const cudaDataType_t in_type = key.w_fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    cublasLtMatrixLayout_t layout = nullptr;
    STRATA_CUBLAS_CHECK(lt().MatrixLayoutCreate(&layout, in_type, static_cast<uint64_t>(key.k),
                                                static_cast<uint64_t>(key.n), key.ldw));
    plan.w_layout.reset(layout);
    STRATA_CUBLAS_CHECK(lt().MatrixLayoutCreate(&layout, in_type, static_cast<uint64_t>(key.k),
                                                static_cast<uint64_t>(key.m),
                                                key.w_fp8 ? key.k : key.lda));
    plan.a_layout.reset(layout);
    const cudaDataType_t d_type = via == Via::kF32    ? CUDA_R_32F
                                  : via == Via::kBf16 ? CUDA_R_16BF
                                                      : cuda_type(key.d_dtype);
    STRATA_CUBLAS_CHECK(lt().MatrixLayoutCreate(&layout, d_type, static_cast<uint64_t>(key.n),
                                                static_cast<uint64_t>(key.m),
                                                via == Via::kNone ? key.ldd : key.n));
    plan.d_layout.reset(layout);

    cublasLtMatmulPreference_t pref_raw = nullptr;
    STRATA_CUBLAS_CHECK(lt().MatmulPreferenceCreate(&pref_raw));
    const PreferencePtr pref(pref_raw);
    const uint64_t ws_bytes = workspace.bytes();
    STRATA_CUBLAS_CHECK(lt().MatmulPreferenceSetAttribute(
        pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
    for (const auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      STRATA_CUBLAS_CHECK(lt().MatmulPreferenceSetAttribute(pref_raw, attr, &kAlignmentBytes,
                                                            sizeof(kAlignmentBytes)));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s = lt().MatmulAlgoGetHeuristic(
        handle, desc, plan.w_layout.get(), plan.a_layout.get(), plan.d_layout.get(),
        plan.d_layout.get(), pref_raw, 1, &result, &found);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found == 0)) {
      return Status::NotFound("cuBLASLt has no algorithm");
    }
    STRATA_CUBLAS_CHECK(s);
    STRATA_CUBLAS_CHECK(result.state);
    plan.algo = result.algo;
    plan.epilogue_bias = epilogue_bias;
    plan.via = via;
    plan.unscaled = unscaled;
    return plan;
  }

  // The cached plan of key, made on first use: with a bias, the epilogue when cuBLASLt has an
  // algorithm for it (always for a bf16 output), else a plain product and add_bias_f32.
  Result<Plan*> plan_for(const ShapeKey& key) {
    if (auto it = plans.find(key); it != plans.end()) return &it->second;

    Result<Plan> plan = make_plan(key, key.bias);
    if (!plan.ok() && key.bias && (key.d_dtype == DType::kF32 || key.w_fp8)) {
      // cuBLASLt 13.0 answers CUBLAS_STATUS_INVALID_VALUE (not NOT_SUPPORTED) for a bf16 bias on
      // an fp32 output; any failure of that probe falls back to the separate bias add.
      plan = make_plan(key, false);
    }
    if (!plan.ok() && key.w_fp8) plan = make_plan(key, false, Via::kF32, /*unscaled=*/true);
    if (!plan.ok() && key.w_fp8) plan = make_plan(key, false, Via::kBf16);
    if (!plan.ok() && key.w_fp8) plan = make_plan(key, false, Via::kBf16, /*unscaled=*/true);
    if (!plan.ok()) {
      if (plan.status().code() != StatusCode::kNotFound) return plan.status();
      return Status::Internal("cuBLASLt found no algorithm for gemm m=" + std::to_string(key.m) +
                              " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k));
    }
    return &plans.emplace(key, std::move(plan).value()).first->second;
  }
};

Result<Gemm> Gemm::create(size_t workspace_bytes, int64_t gemv_max_rows) {
  auto impl = std::make_unique<Impl>();
  impl->gemv_max_rows = std::clamp<int64_t>(gemv_max_rows, 0, detail::kGemvMaxRows);
  Result<const detail::CublasLt*> lt = detail::load_cublas_lt();
  if (!lt.ok()) return lt.status();
  STRATA_CUBLAS_CHECK((*lt)->Create(&impl->handle));
  // At least 32 bytes so that the bias probe pointer (workspace + 16) lies inside it.
  auto ws = DeviceBuffer::allocate(std::max<size_t>(workspace_bytes, 256));
  if (!ws.ok()) return ws.status();
  impl->workspace = std::move(ws).value();
  return Gemm(std::move(impl));
}

Gemm::Gemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gemm::Gemm(Gemm&&) noexcept = default;
Gemm& Gemm::operator=(Gemm&&) noexcept = default;
Gemm::~Gemm() = default;

namespace {
size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }
}  // namespace

// The scratch of an FP8 product: codes [m, k], then scales [m], then the product [m, n] of a plan
// that goes via the scratch (room for fp32).
struct Fp8Scratch {
  size_t scales_at, product_at, end_plain, end_via;
};
Fp8Scratch fp8_scratch(int64_t m, int64_t n, int64_t k) {
  const auto mm = static_cast<size_t>(m);
  Fp8Scratch s;
  s.scales_at = align256(mm * static_cast<size_t>(k));
  s.product_at = align256(s.scales_at + mm * 4);
  s.end_plain = s.product_at;
  s.end_via = s.product_at + mm * static_cast<size_t>(n) * 4;
  return s;
}

Gemm::Fp8PlanCounts Gemm::fp8_plan_counts() const {
  Fp8PlanCounts c;
  for (const auto& [key, plan] : impl_->plans) {
    if (!key.w_fp8) continue;
    ++(plan.unscaled ? c.unscaled : c.vector_scaled);
  }
  return c;
}

Result<int64_t> Gemm::reserve_fp8(int64_t max_rows, int64_t max_k, int64_t max_n,
                                  cudaStream_t stream) {
  if (max_rows < 0 || max_k < 0 || max_n < 0) {
    return Status::InvalidArgument("reserve_fp8: negative sizes");
  }
  const Fp8Scratch s = fp8_scratch(max_rows, max_n, max_k);
  STRATA_RETURN_IF_ERROR(impl_->reserve_scratch(s.end_via, stream));
  return static_cast<int64_t>(impl_->scratch.bytes());
}

// FP8 weights: a few rows through the GEMV on the codes; else the activations to e4m3 per token
// (scratch: codes [m, k], then scales [m], then a via plan's product [m, n]) and the FP8 product.
Status Gemm::Impl::run_fp8(const GemmParams& p, cudaStream_t stream) {
  if (takes_gemv(p.m, p.n, p.k, p.w_dtype)) return detail::gemv(gemv_params(p), stream);
  const ShapeKey key{p.m,          p.n, p.k, p.lda, p.ldw, p.ldd, p.d_dtype, p.bias != nullptr,
                     p.accumulate, true};
  Result<Plan*> found = plan_for(key);
  if (!found.ok()) return found.status();
  Plan& plan = *found.value();
  const Fp8Scratch at = fp8_scratch(p.m, p.n, p.k);
  const size_t scales_at = at.scales_at, product_at = at.product_at;
  const bool via = plan.via != Via::kNone;
  STRATA_RETURN_IF_ERROR(reserve_scratch(via ? at.end_via : at.end_plain, stream));
  auto* base = static_cast<char*>(scratch.data());
  auto* a_scales = reinterpret_cast<float*>(base + scales_at);
  Fp8QuantizeRowsParams q;
  q.in = p.a;
  q.ld_in = p.lda;
  q.out = base;
  q.ld_out = p.k;
  q.scales = a_scales;
  q.rows = p.m;
  q.cols = p.k;
  STRATA_RETURN_IF_ERROR(fp8_quantize_rows(q, stream));
  cublasLtMatmulDesc_t desc = plan.desc.get();
  const void* w_scale = p.w_scale;
  const void* a_scale = a_scales;
  if (!plan.unscaled) {
    STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                    &w_scale, sizeof(w_scale)));
    STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                    &a_scale, sizeof(a_scale)));
  }
  if (plan.epilogue_bias) {
    STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &p.bias, sizeof(p.bias)));
  }
  void* out = via ? base + product_at : p.d;
  const float alpha = 1.0f;
  const float beta = p.accumulate && !via ? 1.0f : 0.0f;
  STRATA_CUBLAS_CHECK(lt().Matmul(handle, desc, &alpha, p.w, plan.w_layout.get(), base,
                                  plan.a_layout.get(), &beta, out, plan.d_layout.get(), out,
                                  plan.d_layout.get(), &plan.algo, workspace.data(),
                                  workspace.bytes(), stream));
  const void* bias = plan.epilogue_bias ? nullptr : p.bias;
  if (via) {
    detail::FinishProductParams f;
    f.d = p.d;
    f.ldd = p.ldd;
    f.d_f32 = p.d_dtype == DType::kF32;
    f.product = out;
    f.ldp = p.n;
    f.product_f32 = plan.via == Via::kF32;
    f.a_scale = plan.unscaled ? a_scales : nullptr;
    f.w_scale = plan.unscaled ? p.w_scale : nullptr;
    f.bias = bias;
    f.accumulate = p.accumulate;
    f.m = p.m;
    f.n = p.n;
    return detail::finish_product(f, stream);
  }
  if (bias == nullptr) return Status::Ok();
  if (p.d_dtype == DType::kF32) {
    return detail::add_bias_f32({static_cast<float*>(p.d), p.ldd, bias, p.m, p.n}, stream);
  }
  return detail::add_bias_bf16({p.d, p.ldd, bias, p.m, p.n}, stream);
}

bool Gemm::takes_gemv(int64_t m, int64_t n, int64_t k, DType w_dtype) const {
  return impl_->takes_gemv(m, n, k, w_dtype);
}

Status Gemm::run(const GemmParams& p, cudaStream_t stream) {
  STRATA_RETURN_IF_ERROR(validate(p));
  if (p.m == 0) return Status::Ok();
  if (p.epilogue == GemmEpilogue::kSiluAndMul && !impl_->takes_gemv(p.m, p.n, p.k, p.w_dtype)) {
    // Unfused: gate | up into the caller's scratch, then silu_and_mul from there into d.
    GemmParams product = p;
    product.epilogue = GemmEpilogue::kNone;
    product.product_scratch = nullptr;
    product.d = p.product_scratch;
    product.ldd = p.n;
    STRATA_RETURN_IF_ERROR(run(product, stream));
    SiluAndMulParams silu;
    silu.gate_up = p.product_scratch;
    silu.out = p.d;
    silu.num_tokens = static_cast<int32_t>(p.m);
    silu.intermediate = static_cast<int32_t>(p.n / 2);
    return silu_and_mul(silu, stream);
  }
  if (p.w_dtype == DType::kF8E4M3) return impl_->run_fp8(p, stream);
  if (impl_->takes_gemv(p.m, p.n, p.k, p.w_dtype)) return detail::gemv(gemv_params(p), stream);
  const ShapeKey key{p.m,         p.n, p.k, p.lda, p.ldw, p.ldd, p.d_dtype, p.bias != nullptr,
                     p.accumulate};
  Result<Plan*> found = impl_->plan_for(key);
  if (!found.ok()) return found.status();
  Plan& plan = *found.value();
  if (plan.epilogue_bias) {
    STRATA_CUBLAS_CHECK(lt().MatmulDescSetAttribute(
        plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
  }
  const float alpha = 1.0f;
  const float beta = p.accumulate ? 1.0f : 0.0f;
  STRATA_CUBLAS_CHECK(lt().Matmul(impl_->handle, plan.desc.get(), &alpha, p.w, plan.w_layout.get(),
                                  p.a, plan.a_layout.get(), &beta, p.d, plan.d_layout.get(), p.d,
                                  plan.d_layout.get(), &plan.algo, impl_->workspace.data(),
                                  impl_->workspace.bytes(), stream));
  if (p.bias != nullptr && !plan.epilogue_bias) {
    return detail::add_bias_f32({static_cast<float*>(p.d), p.ldd, p.bias, p.m, p.n}, stream);
  }
  return Status::Ok();
}

}  // namespace strata::cuda
