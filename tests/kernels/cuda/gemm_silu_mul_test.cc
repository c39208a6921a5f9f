// The SiLU-and-mul epilogue of the gated MLP's gate | up product (GemmEpilogue::kSiluAndMul,
// GemvParams::silu_and_mul; gemm.h, gemv.h):
//   - on the few-row GEMV, act is bit for bit what the plain product followed by silu_and_mul()
//     gives, for bf16 and FP8 weights, m = 1..8, with and without bias, at odd sizes (inter 5 and
//     37, k 16 and 4112) and at every FP8 block shape; and the down projection accumulated into
//     an fp32 residual after it, as the runner does, gives the unfused chain's bits (Llama-3.1-8B
//     shapes too). The fused path leaves product_scratch untouched;
//   - act holds a double-precision host reference (silu(gate) * up of the exact products) within
//     a tolerance derived from the roundings, and a wrong fusion (gate and up swapped, SiLU left
//     out, or the next pair's output) fails that check on most elements;
//   - products the GEMV does not take go through product_scratch and silu_and_mul;
//   - a row's bits do not depend on the batch size, and calls outside the contract are refused.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/model_ops.h"

namespace strata::cuda::testing {
namespace {

constexpr uint16_t kPoison = 0xffff;  // a bf16 NaN: an element nobody wrote

// One gated MLP's gate | up product: activations a [m, k] bf16, weights [2 inter, k] (bf16, or
// e4m3 codes with a scale per row), a bf16 bias [2 inter]; host copies and device buffers.
struct Mlp {
  int64_t m = 0, inter = 0, k = 0;
  bool fp8 = false;
  std::vector<uint16_t> a, w, bias;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  DeviceBuffer d_a, d_w, d_scales, d_bias;

  int64_t n() const { return 2 * inter; }
  double weight(int64_t j, int64_t kk) const {
    return fp8 ? double{fp8_e4m3_to_f32(codes[j * k + kk])} * scales[j]
               : double{bf16_to_f32(w[j * k + kk])};
  }
  DType w_dtype() const { return fp8 ? DType::kF8E4M3 : DType::kBF16; }
};

// Weights of magnitude ~0.1 so that gate spans the SiLU's curve (|gate| up to a few units).
Mlp make_mlp(int64_t m, int64_t inter, int64_t k, bool fp8, std::mt19937_64& rng) {
  Mlp c;
  c.m = m;
  c.inter = inter;
  c.k = k;
  c.fp8 = fp8;
  const auto n = static_cast<size_t>(c.n());
  c.a = random_halves(static_cast<size_t>(m * k), DType::kBF16, -1.0f, 1.0f, rng);
  c.bias = random_halves(n, DType::kBF16, -1.0f, 1.0f, rng);
  if (fp8) {
    std::uniform_real_distribution<float> code(-448.0f, 448.0f);
    std::uniform_real_distribution<float> scale(0.5f, 1.5f);
    c.codes.resize(n * static_cast<size_t>(k));
    for (uint8_t& x : c.codes) x = f32_to_fp8_e4m3(code(rng));
    c.scales.resize(n);
    for (float& s : c.scales) s = scale(rng) * (0.1f / 448.0f);
    c.d_w = upload(c.codes);
    c.d_scales = upload(c.scales);
  } else {
    c.w = random_halves(n * static_cast<size_t>(k), DType::kBF16, -0.1f, 0.1f, rng);
    c.d_w = upload(c.w);
  }
  c.d_a = upload(c.a);
  c.d_bias = upload(c.bias);
  return c;
}

detail::GemvParams gemv_params(const Mlp& c, void* d, int64_t ldd, bool silu, bool bias,
                               detail::GemvFp8Shape shape = {}) {
  detail::GemvParams g;
  g.a = c.d_a.data();
  g.lda = c.k;
  g.w = c.d_w.data();
  g.ldw = c.k;
  g.w_fp8 = c.fp8;
  g.w_scale = c.fp8 ? static_cast<const float*>(c.d_scales.data()) : nullptr;
  g.bias = bias ? c.d_bias.data() : nullptr;
  g.d = d;
  g.ldd = ldd;
  g.d_dtype = DType::kBF16;
  g.m = c.m;
  g.n = c.n();
  g.k = c.k;
  g.fp8_shape = shape;
  g.silu_and_mul = silu;
  return g;
}

GemmParams gemm_params(const Mlp& c, void* d, bool bias, void* scratch) {
  GemmParams p;
  p.a = c.d_a.data();
  p.lda = c.k;
  p.w = c.d_w.data();
  p.ldw = c.k;
  p.w_dtype = c.w_dtype();
  p.w_scale = c.fp8 ? static_cast<const float*>(c.d_scales.data()) : nullptr;
  p.bias = bias ? c.d_bias.data() : nullptr;
  p.d = d;
  p.ldd = c.n();
  p.m = c.m;
  p.n = c.n();
  p.k = c.k;
  if (scratch != nullptr) {
    p.ldd = c.inter;
    p.epilogue = GemmEpilogue::kSiluAndMul;
    p.product_scratch = scratch;
  }
  return p;
}

DeviceBuffer poisoned(size_t elems) { return upload(std::vector<uint16_t>(elems, kPoison)); }

void run_silu_and_mul(const DeviceBuffer& gate_up, const DeviceBuffer& act, int64_t m,
                      int64_t inter) {
  SiluAndMulParams s;
  s.gate_up = gate_up.data();
  s.out = act.data();
  s.num_tokens = static_cast<int32_t>(m);
  s.intermediate = static_cast<int32_t>(inter);
  STRATA_ASSERT_OK(silu_and_mul(s, nullptr));
}

// The host reference: silu(gate) * up from the exact (double) products, with the tolerance the
// device's roundings allow. gate and up are each an fp32 sum (error <= 3e-5 of the sum of
// |products|, the file's GEMV bound with margin) rounded to bf16 (relative 2^-8); act moves by at
// most 1.1 |up| per unit of gate (|silu'| <= 1.1) and |silu(gate)| per unit of up, and is rounded
// to bf16 once more; 1e-5 relative covers __expf and the division.
struct Reference {
  std::vector<double> act, tol;  // [m, inter]
};
double silu(double g) { return g / (1.0 + std::exp(-g)); }

Reference host_reference(const Mlp& c, bool bias) {
  Reference r;
  const double kUnit = std::ldexp(1.0, -8);
  for (int64_t i = 0; i < c.m; ++i) {
    std::vector<double> sum(static_cast<size_t>(c.n())), mag(static_cast<size_t>(c.n()));
    for (int64_t j = 0; j < c.n(); ++j) {
      double s = 0.0, a = 0.0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const double t = double{bf16_to_f32(c.a[i * c.k + kk])} * c.weight(j, kk);
        s += t;
        a += std::fabs(t);
      }
      const double b = bias ? double{bf16_to_f32(c.bias[j])} : 0.0;
      sum[j] = s + b;
      mag[j] = a + std::fabs(b);
    }
    for (int64_t j = 0; j < c.inter; ++j) {
      const double g = sum[j], u = sum[c.inter + j];
      const double eg = kUnit * std::fabs(g) + 3e-5 * mag[j];
      const double eu = kUnit * std::fabs(u) + 3e-5 * mag[c.inter + j];
      const double act = silu(g) * u;
      const double moved = 1.1 * std::fabs(u) * eg + std::fabs(silu(g)) * eu + 1.1 * eg * eu +
                           0.5 * eg * eg * std::fabs(u);
      r.act.push_back(act);
      r.tol.push_back(moved + (kUnit + 1e-5) * (std::fabs(act) + moved) + 1e-30);
    }
  }
  return r;
}

// How many elements of act ([m, inter], as doubles) are outside the reference's tolerance.
int64_t count_off(const Reference& r, const std::vector<double>& act) {
  int64_t off = 0;
  for (size_t i = 0; i < act.size(); ++i) off += !(std::fabs(act[i] - r.act[i]) <= r.tol[i]);
  return off;
}

std::vector<double> as_doubles(const std::vector<uint16_t>& bf16) {
  std::vector<double> v(bf16.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(bf16[i]);
  return v;
}

std::string label(const Mlp& c, bool bias) {
  return std::string(c.fp8 ? "fp8" : "bf16") + " m " + std::to_string(c.m) + " inter " +
         std::to_string(c.inter) + " k " + std::to_string(c.k) + (bias ? " bias" : "");
}

class GemmSiluMulTest : public CudaTest {};

// The GEMV with the epilogue against the plain GEMV then silu_and_mul, bit for bit, and both
// against the host reference; for FP8 at m <= 2, at every block shape.
TEST_F(GemmSiluMulTest, GemvEpilogueGivesThePlainProductThenSiluAndMulBits) {
  std::mt19937_64 rng(21);
  struct Size {
    int64_t inter, k;
  };
  for (const bool fp8 : {false, true}) {
    for (const Size s : {Size{5, 16}, Size{37, 4112}, Size{1032, 1024}}) {
      for (const int64_t m : {1, 2, 3, 5, 8}) {
        const bool bias = (m + s.inter) % 2 == 1;
        const Mlp c = make_mlp(m, s.inter, s.k, fp8, rng);
        const Reference ref = host_reference(c, bias);
        std::vector<detail::GemvFp8Shape> shapes = {{}};
        if (fp8 && m <= 2) {
          shapes.assign(std::begin(detail::kGemvFp8Shapes), std::end(detail::kGemvFp8Shapes));
        }
        for (const detail::GemvFp8Shape shape : shapes) {
          SCOPED_TRACE(label(c, bias) + " shape " + std::to_string(shape.rows) + "x" +
                       std::to_string(shape.threads));
          const auto act_elems = static_cast<size_t>(m * s.inter);
          DeviceBuffer gate_up = poisoned(static_cast<size_t>(m * c.n()));
          DeviceBuffer unfused = poisoned(act_elems);
          DeviceBuffer fused = poisoned(act_elems);
          STRATA_ASSERT_OK(
              detail::gemv(gemv_params(c, gate_up.data(), c.n(), false, bias, shape), nullptr));
          run_silu_and_mul(gate_up, unfused, m, s.inter);
          STRATA_ASSERT_OK(
              detail::gemv(gemv_params(c, fused.data(), s.inter, true, bias, shape), nullptr));
          sync_device();
          const auto want = download<uint16_t>(unfused, act_elems);
          const auto got = download<uint16_t>(fused, act_elems);
          int64_t differ = 0;
          for (size_t i = 0; i < act_elems; ++i) differ += got[i] != want[i];
          EXPECT_EQ(differ, 0) << "of " << act_elems;
          EXPECT_EQ(count_off(ref, as_doubles(got)), 0);
        }
      }
    }
  }
}

// The reference check can fail: act formed with gate and up swapped, without the SiLU, or from
// the next pair, is off on most elements.
TEST_F(GemmSiluMulTest, WrongFusionFailsTheReference) {
  std::mt19937_64 rng(22);
  for (const bool fp8 : {false, true}) {
    const Mlp c = make_mlp(2, 1032, 1024, fp8, rng);
    SCOPED_TRACE(label(c, true));
    const Reference ref = host_reference(c, true);
    DeviceBuffer gate_up = poisoned(static_cast<size_t>(c.m * c.n()));
    STRATA_ASSERT_OK(detail::gemv(gemv_params(c, gate_up.data(), c.n(), false, true), nullptr));
    sync_device();
    const std::vector<double> gu =
        as_doubles(download<uint16_t>(gate_up, static_cast<size_t>(c.m * c.n())));
    std::vector<double> right, swapped, no_silu, shifted;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.inter; ++j) {
        const double g = gu[i * c.n() + j], u = gu[i * c.n() + c.inter + j];
        const int64_t jn = (j + 1) % c.inter;
        const double gn = gu[i * c.n() + jn], un = gu[i * c.n() + c.inter + jn];
        right.push_back(bf16_to_f32(::strata::f32_to_bf16(static_cast<float>(silu(g) * u))));
        swapped.push_back(bf16_to_f32(::strata::f32_to_bf16(static_cast<float>(silu(u) * g))));
        no_silu.push_back(bf16_to_f32(::strata::f32_to_bf16(static_cast<float>(g * u))));
        shifted.push_back(bf16_to_f32(::strata::f32_to_bf16(static_cast<float>(silu(gn) * un))));
      }
    }
    const auto total = static_cast<int64_t>(right.size());
    EXPECT_EQ(count_off(ref, right), 0);  // the host's own silu of the device's gate | up passes
    EXPECT_GT(count_off(ref, swapped), total / 2);
    EXPECT_GT(count_off(ref, no_silu), total / 2);
    EXPECT_GT(count_off(ref, shifted), total / 2);
  }
}

// Through Gemm as the runner calls it: gate | up with the epilogue, then the down projection
// accumulated into an fp32 residual, against the plain product, silu_and_mul and the same down
// projection; every m the GEMV takes (gemv_max_rows 8), and the 8B shapes at the default's m.
void run_chain(Gemm& gemm, int64_t m, int64_t inter, int64_t k, int64_t hidden, bool fp8,
               std::mt19937_64& rng) {
  const bool bias = m % 2 == 0;
  const Mlp c = make_mlp(m, inter, k, fp8, rng);
  SCOPED_TRACE(label(c, bias) + " hidden " + std::to_string(hidden));
  ASSERT_TRUE(gemm.takes_gemv(m, c.n(), k, c.w_dtype()));
  // The down projection [hidden, inter], bf16 (its own path is the plain GEMV either way).
  const auto w_down =
      random_halves(static_cast<size_t>(hidden * inter), DType::kBF16, -0.05f, 0.05f, rng);
  std::vector<float> residual(static_cast<size_t>(m * hidden));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& x : residual) x = dist(rng);
  DeviceBuffer d_down = upload(w_down);
  const auto act_elems = static_cast<size_t>(m * inter);
  const auto gu_elems = static_cast<size_t>(m * c.n());
  DeviceBuffer gate_up_u = poisoned(gu_elems), act_u = poisoned(act_elems);
  DeviceBuffer scratch_f = poisoned(gu_elems), act_f = poisoned(act_elems);
  DeviceBuffer res_u = upload(residual), res_f = upload(residual);
  auto down = [&](const DeviceBuffer& act, const DeviceBuffer& res) {
    GemmParams p;
    p.a = act.data();
    p.lda = inter;
    p.w = d_down.data();
    p.ldw = inter;
    p.d = res.data();
    p.ldd = hidden;
    p.d_dtype = DType::kF32;
    p.accumulate = true;
    p.m = m;
    p.n = hidden;
    p.k = inter;
    return gemm.run(p, nullptr);
  };
  STRATA_ASSERT_OK(gemm.run(gemm_params(c, gate_up_u.data(), bias, nullptr), nullptr));
  run_silu_and_mul(gate_up_u, act_u, m, inter);
  STRATA_ASSERT_OK(down(act_u, res_u));
  STRATA_ASSERT_OK(gemm.run(gemm_params(c, act_f.data(), bias, scratch_f.data()), nullptr));
  STRATA_ASSERT_OK(down(act_f, res_f));
  sync_device();
  EXPECT_EQ(download<uint16_t>(act_f, act_elems), download<uint16_t>(act_u, act_elems));
  const auto got = download<float>(res_f, residual.size());
  const auto want = download<float>(res_u, residual.size());
  int64_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(differ, 0) << "residual elements of " << got.size();
  const auto scratch = download<uint16_t>(scratch_f, gu_elems);
  EXPECT_TRUE(std::all_of(scratch.begin(), scratch.end(), [](uint16_t x) { return x == kPoison; }))
      << "the fused path wrote product_scratch";
}

TEST_F(GemmSiluMulTest, FusedChainGivesTheUnfusedResidualBits) {
  auto gemv = Gemm::create(size_t{32} << 20, 8);
  ASSERT_TRUE(gemv.ok()) << gemv.status().to_string();
  std::mt19937_64 rng(23);
  for (const bool fp8 : {false, true}) {
    for (int64_t m = 1; m <= 8; ++m) run_chain(*gemv, m, 1032, 1024, 520, fp8, rng);
  }
}

TEST_F(GemmSiluMulTest, FusedChainAtLlama8BShapes) {
  auto gemm = Gemm::create();
  ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
  std::mt19937_64 rng(24);
  for (const bool fp8 : {false, true}) {
    for (int64_t m = 1; m <= Gemm::kDefaultGemvMaxRows; ++m) {
      run_chain(*gemm, m, 14336, 4096, 4096, fp8, rng);
    }
  }
}

// Products the GEMV does not take (m > gemv_max_rows): gate | up lands in product_scratch
// (equal to the plain product within one bf16 rounding step, 2^-7 relative, in case cuBLASLt
// does not repeat its bits) and act is silu_and_mul of exactly those bits; bf16 weights also
// hold the host reference, without a bias (cuBLASLt may round before adding it: gemm.h); FP8
// ones quantize the activations there (fp8_gemm_test's subject) and take the bias.
TEST_F(GemmSiluMulTest, ProductsOffTheGemvGoThroughTheScratch) {
  auto gemm = Gemm::create();
  ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
  std::mt19937_64 rng(25);
  for (const bool fp8 : {false, true}) {
    for (const int64_t m : {3, 64}) {
      const bool bias = fp8;
      const Mlp c = make_mlp(m, 1032, 1024, fp8, rng);
      SCOPED_TRACE(label(c, bias));
      ASSERT_FALSE(gemm->takes_gemv(m, c.n(), c.k, c.w_dtype()));
      const auto gu_elems = static_cast<size_t>(m * c.n());
      const auto act_elems = static_cast<size_t>(m * c.inter);
      DeviceBuffer plain = poisoned(gu_elems), scratch = poisoned(gu_elems);
      DeviceBuffer act = poisoned(act_elems), again = poisoned(act_elems);
      STRATA_ASSERT_OK(gemm->run(gemm_params(c, plain.data(), bias, nullptr), nullptr));
      STRATA_ASSERT_OK(gemm->run(gemm_params(c, act.data(), bias, scratch.data()), nullptr));
      run_silu_and_mul(scratch, again, m, c.inter);
      sync_device();
      const auto got = download<uint16_t>(act, act_elems);
      EXPECT_EQ(got, download<uint16_t>(again, act_elems));
      const auto p = as_doubles(download<uint16_t>(plain, gu_elems));
      const auto s = as_doubles(download<uint16_t>(scratch, gu_elems));
      int64_t off = 0;
      for (size_t i = 0; i < gu_elems; ++i) {
        off += !(std::fabs(p[i] - s[i]) <= std::ldexp(std::max(std::fabs(p[i]), 1e-30), -7));
      }
      EXPECT_EQ(off, 0);
      if (!fp8) {
        EXPECT_EQ(count_off(host_reference(c, false), as_doubles(got)), 0);
      }
    }
  }
}

// The GEMV's determinism contract holds with the epilogue: row 0's act bits at m = 8 .. 1.
TEST_F(GemmSiluMulTest, RowBitsDoNotDependOnBatchSize) {
  std::mt19937_64 rng(26);
  for (const bool fp8 : {false, true}) {
    Mlp c = make_mlp(8, 520, 2048, fp8, rng);
    std::vector<uint16_t> first;
    for (int64_t m = 8; m >= 1; --m) {
      c.m = m;
      DeviceBuffer act = poisoned(static_cast<size_t>(m * c.inter));
      STRATA_ASSERT_OK(detail::gemv(gemv_params(c, act.data(), c.inter, true, true), nullptr));
      sync_device();
      const auto rows = download<uint16_t>(act, static_cast<size_t>(m * c.inter));
      const std::vector<uint16_t> row0(rows.begin(), rows.begin() + c.inter);
      if (first.empty()) first = row0;
      EXPECT_EQ(row0, first) << (fp8 ? "fp8" : "bf16") << " row 0 of a " << m << "-row product";
    }
  }
}

TEST_F(GemmSiluMulTest, RejectsCallsOutsideTheContract) {
  auto gemm = Gemm::create();
  ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
  auto buf = DeviceBuffer::allocate(1 << 20);
  ASSERT_TRUE(buf.ok());
  GemmParams p;
  p.a = p.w = buf->data();
  p.d = buf->data();
  p.m = 1;
  p.n = 64;
  p.k = 64;
  p.lda = p.ldw = 64;
  p.ldd = 32;
  p.epilogue = GemmEpilogue::kSiluAndMul;
  p.product_scratch = buf->data();
  auto code = [&](const GemmParams& q) { return gemm->run(q, nullptr).code(); };
  GemmParams bad = p;
  bad.product_scratch = nullptr;
  EXPECT_EQ(code(bad), StatusCode::kInvalidArgument);
  bad = p;
  bad.product_scratch = static_cast<char*>(buf->data()) + 2;
  EXPECT_EQ(code(bad), StatusCode::kInvalidArgument);
  bad = p;
  bad.ldd = 64;  // d holds act: n / 2 columns
  EXPECT_EQ(code(bad), StatusCode::kInvalidArgument);
  bad = p;
  bad.accumulate = true;
  EXPECT_EQ(code(bad), StatusCode::kInvalidArgument);
  bad = p;
  bad.d_dtype = DType::kF32;
  bad.ldd = 32;
  EXPECT_EQ(code(bad), StatusCode::kInvalidArgument);
  bad = p;
  bad.n = 66;  // 33 act columns: not 16-byte rows either way
  bad.ldd = 33;
  EXPECT_EQ(code(bad), StatusCode::kInvalidArgument);
  bad = p;
  bad.m = 0;
  bad.product_scratch = nullptr;
  EXPECT_TRUE(gemm->run(bad, nullptr).ok());  // no rows: nothing to do

  detail::GemvParams g;
  g.a = g.w = buf->data();
  g.d = buf->data();
  g.lda = g.ldw = 64;
  g.ldd = 32;
  g.m = 1;
  g.n = 63;  // odd: no gate | up pairs
  g.k = 64;
  g.silu_and_mul = true;
  EXPECT_EQ(detail::gemv(g, nullptr).code(), StatusCode::kInvalidArgument);
  g.n = 64;
  g.d_dtype = DType::kF32;
  EXPECT_EQ(detail::gemv(g, nullptr).code(), StatusCode::kInvalidArgument);
  g.d_dtype = DType::kBF16;
  g.accumulate = true;
  EXPECT_EQ(detail::gemv(g, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cuda::testing
