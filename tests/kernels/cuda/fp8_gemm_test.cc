// FP8 weights (fp8_quantize.h, Gemm with w_dtype F8E4M3) against double-precision host
// references:
//   - fp8_quantize_rows gives each row amax / 448 as its scale and the codes the host encoder
//     (core/dtype.h) gives x * (448 / amax), bit for bit; a row of zeros gets zero codes;
//   - the product on the GEMV (m <= 2: bf16 activations times the dequantized weights) and on
//     cuBLASLt's FP8 tensor cores (m > 2: activations quantized per token as the host does, both
//     scale vectors in the epilogue) matches the reference computed from the same codes and
//     scales, for bf16 and fp32 outputs, bias and accumulate; and the quantization's own error
//     against the bf16 product is printed and bounded;
//   - a knocked-out scale (one output channel's scale doubled, or every scale 1) fails the check
//     by far more than its tolerance.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/fp8_quantize.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"

namespace strata::cuda::testing {
namespace {

// |got - ref| <= kAbs * sum_k |a w| (+ |bias| + |d before|) + rtol(d) * |ref|: fp32 accumulation
// of products of exact codes, and one bf16 rounding of a bf16 output (two with a bias or
// accumulate, as for the bf16 Gemm).
constexpr double kAbs = 2e-5;
// On cuBLASLt's FP8 tensor-core paths the products are summed in a narrower accumulator before
// cuBLASLt promotes them to fp32 (about 14 mantissa bits on Hopper, as DeepSeek-V3 measured on
// H800): an H200 showed up to 3.5e-5 of sum_k |a w| at k = 896-4864, so those paths get 1e-4.
constexpr double kAbsFp8TensorCores = 1e-4;
double out_rtol(DType d, bool second_rounding) {
  return d == DType::kF32 ? 0.0 : (second_rounding ? 7.8e-3 : 3.9e-3);
}
// The quantization's own error: ||fp8 product - bf16 product|| / ||bf16 product|| over a matrix
// of uniform values. e4m3 keeps 3 mantissa bits (relative rounding error up to 2^-4, about 2^-5.6
// RMS for uniform values); weights alone (GEMV) and weights and activations (cuBLASLt) stay near
// 2-3%.
constexpr double kQuantRelBound = 0.07;

struct Quantized {
  std::vector<uint8_t> codes;  // [rows, cols]
  std::vector<float> scales;   // [rows]
};

// The host's per-row quantization, the same float operations as the kernel.
Quantized host_quantize(const std::vector<uint16_t>& x, int64_t rows, int64_t cols, int64_t ld) {
  Quantized q;
  q.codes.resize(static_cast<size_t>(rows * cols));
  q.scales.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(bf16_to_f32(x[r * ld + c])));
    amax = std::max(amax, kFp8MinAmax);
    q.scales[r] = amax / kFp8E4M3Max;
    const float inv = kFp8E4M3Max / amax;
    for (int64_t c = 0; c < cols; ++c) {
      q.codes[r * cols + c] = f32_to_fp8_e4m3(bf16_to_f32(x[r * ld + c]) * inv);
    }
  }
  return q;
}

TEST(Fp8QuantizeRowsTest, ScalesAndCodesMatchTheHostEncoder) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(7);
  for (const int64_t cols : {16, 4096, 14336 + 16}) {
    const int64_t rows = 37, ld = cols + 16;
    std::vector<uint16_t> x =
        random_halves(static_cast<size_t>(rows * ld), DType::kBF16, -1.0f, 1.0f, rng);
    // Rows of very different magnitudes, and a row of zeros.
    for (int64_t r = 0; r < rows; ++r) {
      const float f = std::ldexp(1.0f, static_cast<int>(r % 13) - 8);
      for (int64_t c = 0; c < ld; ++c) x[r * ld + c] = f32_to_bf16(bf16_to_f32(x[r * ld + c]) * f);
    }
    for (int64_t c = 0; c < ld; ++c) x[5 * ld + c] = 0;
    const Quantized want = host_quantize(x, rows, cols, ld);
    DeviceBuffer d_x = upload(x);
    auto out = DeviceBuffer::allocate(static_cast<size_t>(rows * cols));
    auto scales = DeviceBuffer::allocate(static_cast<size_t>(rows) * 4);
    ASSERT_TRUE(out.ok() && scales.ok());
    Fp8QuantizeRowsParams p;
    p.in = d_x.data();
    p.ld_in = ld;
    p.out = out->data();
    p.ld_out = cols;
    p.scales = static_cast<float*>(scales->data());
    p.rows = rows;
    p.cols = cols;
    STRATA_ASSERT_OK(fp8_quantize_rows(p, nullptr));
    sync_device();
    const auto codes = download<uint8_t>(*out, static_cast<size_t>(rows * cols));
    const auto got_scales = download<float>(*scales, static_cast<size_t>(rows));
    EXPECT_EQ(got_scales, want.scales) << "cols " << cols;
    int64_t mismatches = 0;
    for (size_t i = 0; i < codes.size(); ++i) mismatches += codes[i] != want.codes[i];
    EXPECT_EQ(mismatches, 0) << "cols " << cols;
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(codes[5 * cols + c] & 0x7f, 0);
  }
  Fp8QuantizeRowsParams bad;
  bad.rows = 1;
  bad.cols = 24;
  bad.ld_in = bad.ld_out = 32;
  EXPECT_EQ(fp8_quantize_rows(bad, nullptr).code(), StatusCode::kInvalidArgument);
}

struct Case {
  int64_t m, n, k;
  DType d_dtype;
  bool bias, accumulate;
};

class Fp8GemmTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    auto g = Gemm::create();
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gemm_ = std::make_unique<Gemm>(std::move(g).value());
  }

  // Runs one case; returns the largest |got - ref| / tolerance over d (ref from the codes and
  // scales in `w_scale_used`, the device given `w_scale_given`), and prints the quantization's
  // error against the bf16 product.
  double run_case(const Case& c, std::mt19937_64& rng, bool knock_out_one = false,
                  bool unit_scales = false) {
    const int64_t lda = c.k + 16, ldd = c.n + 8;
    const auto a = random_halves(static_cast<size_t>(c.m * lda), DType::kBF16, -1.0f, 1.0f, rng);
    auto w = random_halves(static_cast<size_t>(c.n * c.k), DType::kBF16, -0.05f, 0.05f, rng);
    const auto bias = random_halves(static_cast<size_t>(c.n), DType::kBF16, -0.5f, 0.5f, rng);
    // Weights quantized on the device, as at load.
    DeviceBuffer d_wbf = upload(w);
    auto d_w = DeviceBuffer::allocate(static_cast<size_t>(c.n * c.k));
    auto d_ws = DeviceBuffer::allocate(static_cast<size_t>(c.n) * 4);
    EXPECT_TRUE(d_w.ok() && d_ws.ok());
    Fp8QuantizeRowsParams q;
    q.in = d_wbf.data();
    q.ld_in = c.k;
    q.out = d_w->data();
    q.ld_out = c.k;
    q.scales = static_cast<float*>(d_ws->data());
    q.rows = c.n;
    q.cols = c.k;
    EXPECT_TRUE(fp8_quantize_rows(q, nullptr).ok());
    sync_device();
    Quantized wq{download<uint8_t>(*d_w, static_cast<size_t>(c.n * c.k)),
                 download<float>(*d_ws, static_cast<size_t>(c.n))};
    std::vector<float> given = wq.scales;
    if (knock_out_one) given[c.n / 2] *= 2.0f;
    if (unit_scales) std::fill(given.begin(), given.end(), 1.0f);
    DeviceBuffer d_given = upload(given);
    // The activations as the product sees them: bf16 on the GEMV, per-token codes on cuBLASLt.
    const bool gemv = c.m <= Gemm::kDefaultGemvMaxRows;
    std::vector<double> af(static_cast<size_t>(c.m * c.k));
    if (gemv) {
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t kk = 0; kk < c.k; ++kk) af[i * c.k + kk] = bf16_to_f32(a[i * lda + kk]);
    } else {
      const Quantized aq = host_quantize(a, c.m, c.k, lda);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t kk = 0; kk < c.k; ++kk)
          af[i * c.k + kk] = double{fp8_e4m3_to_f32(aq.codes[i * c.k + kk])} * aq.scales[i];
    }
    const bool f32 = c.d_dtype == DType::kF32;
    std::vector<double> d0(static_cast<size_t>(c.m * ldd));
    std::vector<uint16_t> d0_bf(d0.size());
    std::vector<float> d0_f(d0.size());
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t i = 0; i < d0.size(); ++i) {
      const float v = c.accumulate ? u(rng) : std::nanf("");
      d0_f[i] = v;
      d0_bf[i] = f32_to_bf16(v);
      d0[i] = f32 ? double{v} : double{bf16_to_f32(d0_bf[i])};
    }
    DeviceBuffer d_a = upload(a), d_bias = upload(bias);
    DeviceBuffer d_d = f32 ? upload(d0_f) : upload(d0_bf);
    GemmParams p;
    p.a = d_a.data();
    p.lda = lda;
    p.w = d_w->data();
    p.ldw = c.k;
    p.w_dtype = DType::kF8E4M3;
    p.w_scale = static_cast<const float*>(d_given.data());
    p.bias = c.bias ? d_bias.data() : nullptr;
    p.d = d_d.data();
    p.ldd = ldd;
    p.d_dtype = c.d_dtype;
    p.accumulate = c.accumulate;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    const Status s = gemm_->run(p, nullptr);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok()) return 1e30;
    sync_device();
    std::vector<double> got(d0.size());
    if (f32) {
      const auto g = download<float>(d_d, d0.size());
      for (size_t i = 0; i < g.size(); ++i) got[i] = g[i];
    } else {
      const auto g = download<uint16_t>(d_d, d0.size());
      for (size_t i = 0; i < g.size(); ++i) got[i] = bf16_to_f32(g[i]);
    }
    double worst = 0.0, q_err = 0.0, q_norm = 0.0;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double dot = 0.0, abs_sum = 0.0, exact = 0.0;
        for (int64_t kk = 0; kk < c.k; ++kk) {
          const double wv = double{fp8_e4m3_to_f32(wq.codes[j * c.k + kk])} * wq.scales[j];
          dot += af[i * c.k + kk] * wv;
          abs_sum += std::fabs(af[i * c.k + kk] * wv);
          exact += double{bf16_to_f32(a[i * lda + kk])} * bf16_to_f32(w[j * c.k + kk]);
        }
        const double b = c.bias ? double{bf16_to_f32(bias[j])} : 0.0;
        const double before = c.accumulate ? d0[i * ldd + j] : 0.0;
        const double ref = dot + b + before;
        const double tol = (gemv ? kAbs : kAbsFp8TensorCores) *
                               (abs_sum + std::fabs(b) + std::fabs(before)) +
                           out_rtol(c.d_dtype, c.bias || c.accumulate) * std::fabs(ref) + 1e-30;
        const double e = std::fabs(got[i * ldd + j] - ref);
        worst = std::max(worst, std::isnan(e) ? 1e30 : e / tol);
        q_err += (dot - exact) * (dot - exact);
        q_norm += exact * exact;
      }
    }
    std::printf(
        "[ fp8 gemm ] m %ld n %ld k %ld %s%s%s: worst |err| / tol %.3f, quantization "
        "error ||fp8 - bf16|| / ||bf16|| %.4f\n",
        static_cast<long>(c.m), static_cast<long>(c.n), static_cast<long>(c.k),
        std::string(dtype_name(c.d_dtype)).c_str(), c.bias ? " bias" : "",
        c.accumulate ? " accumulate" : "", worst, std::sqrt(q_err / q_norm));
    if (!knock_out_one && !unit_scales) {
      EXPECT_LE(std::sqrt(q_err / q_norm), kQuantRelBound);
    }
    return worst;
  }

  std::unique_ptr<Gemm> gemm_;
};

TEST_F(Fp8GemmTest, MatchesTheReferenceOfItsCodesAndScales) {
  std::mt19937_64 rng(11);
  const std::vector<Case> cases = {
      {1, 896, 4096, DType::kBF16, false, false},   {2, 4864, 896, DType::kF32, true, true},
      {1, 64, 14336, DType::kF32, false, true},     {7, 896, 4096, DType::kBF16, true, false},
      {64, 4864, 896, DType::kF32, false, true},    {64, 896, 4864, DType::kBF16, false, false},
      {300, 896, 896, DType::kF32, true, true},     {300, 4864, 896, DType::kBF16, true, false},
      {256, 1024, 4096, DType::kF32, false, false},
      // k not a multiple of any pass's columns, n of the 16-row block's rows (the GEMV's edges;
      // Gemm needs 16-byte rows, so n = 40: EveryGemvBlockShapeMatchesTheReference takes n = 37).
      {1, 40, 4112, DType::kBF16, true, false},     {2, 40, 4112, DType::kF32, false, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " +
                 std::to_string(c.k));
    EXPECT_LE(run_case(c, rng), 1.0);
  }
  const Gemm::Fp8PlanCounts counts = gemm_->fp8_plan_counts();
  std::printf("[ fp8 gemm ] cuBLASLt plans: %ld with vector scales, %ld scaled after\n",
              static_cast<long>(counts.vector_scaled), static_cast<long>(counts.unscaled));
}

// The check can fail: one channel's scale doubled, or the scales left out, is far outside it.
TEST_F(Fp8GemmTest, KnockedOutScaleFailsTheCheck) {
  std::mt19937_64 rng(13);
  for (const Case& c : {Case{1, 896, 4096, DType::kBF16, false, false},
                        Case{64, 896, 4096, DType::kF32, false, true}}) {
    SCOPED_TRACE("m " + std::to_string(c.m));
    EXPECT_GE(run_case(c, rng, /*knock_out_one=*/true), 100.0);
    EXPECT_GE(run_case(c, rng, false, /*unit_scales=*/true), 100.0);
  }
}

// Every block shape of the FP8 GEMV (the default, and those strata_model_ops_bench sweeps) holds
// the reference at m = 1 and 2, at edges no shape divides evenly (n = 37, k = 4112); and a shape
// outside the list, or another than the default past m = 2, is refused.
TEST_F(Fp8GemmTest, EveryGemvBlockShapeMatchesTheReference) {
  std::mt19937_64 rng(17);
  const int64_t n = 37, k = 4112;
  const auto w = random_halves(static_cast<size_t>(n * k), DType::kBF16, -0.05f, 0.05f, rng);
  const Quantized wq = host_quantize(w, n, k, k);
  DeviceBuffer d_codes = upload(wq.codes), d_scales = upload(wq.scales);
  for (const int64_t m : {1, 2}) {
    const auto a = random_halves(static_cast<size_t>(m * k), DType::kBF16, -1.0f, 1.0f, rng);
    DeviceBuffer d_a = upload(a);
    for (const detail::GemvFp8Shape shape : detail::kGemvFp8Shapes) {
      SCOPED_TRACE("m " + std::to_string(m) + " shape " + std::to_string(shape.rows) + "x" +
                   std::to_string(shape.threads));
      DeviceBuffer d_d = upload(std::vector<float>(static_cast<size_t>(m * n), 0.0f));
      const detail::GemvParams g{d_a.data(), k,       d_codes.data(), k,     true,
                                 static_cast<const float*>(d_scales.data()),
                                 nullptr,    d_d.data(), n,           DType::kF32, false,
                                 m,          n,       k,              shape};
      ASSERT_TRUE(detail::gemv(g, nullptr).ok());
      const auto got = download<float>(d_d, static_cast<size_t>(m * n));
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0.0, mag = 0.0;
          for (int64_t kk = 0; kk < k; ++kk) {
            const double t = double{bf16_to_f32(a[i * k + kk])} *
                             fp8_e4m3_to_f32(wq.codes[j * k + kk]) * wq.scales[j];
            ref += t;
            mag += std::fabs(t);
          }
          ASSERT_LE(std::fabs(got[i * n + j] - ref), kAbs * mag) << "i " << i << " j " << j;
        }
      }
    }
  }
  detail::GemvParams bad{nullptr, k, d_codes.data(), k, true,
                         static_cast<const float*>(d_scales.data()), nullptr, nullptr, n,
                         DType::kF32, false, 1, n, k, {3, 256}};
  EXPECT_EQ(detail::gemv(bad, nullptr).code(), StatusCode::kInvalidArgument);
  bad.m = 4;
  bad.fp8_shape = detail::kGemvFp8Shapes[1];
  EXPECT_EQ(detail::gemv(bad, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST_F(Fp8GemmTest, RejectsMissingScalesAndOddK) {
  GemmParams p;
  p.m = 4;
  p.n = 64;
  p.k = 64;
  p.lda = p.ldw = p.ldd = 64;
  auto buf = DeviceBuffer::allocate(1 << 16);
  ASSERT_TRUE(buf.ok());
  p.a = p.w = buf->data();
  p.d = buf->data();
  p.w_dtype = DType::kF8E4M3;
  EXPECT_EQ(gemm_->run(p, nullptr).code(), StatusCode::kInvalidArgument);  // no scales
  p.w_scale = static_cast<const float*>(buf->data());
  p.k = p.lda = p.ldw = 56;
  EXPECT_EQ(gemm_->run(p, nullptr).code(), StatusCode::kInvalidArgument);  // k % 16
  p.w_dtype = DType::kI8;
  EXPECT_EQ(gemm_->run(p, nullptr).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace strata::cuda::testing
