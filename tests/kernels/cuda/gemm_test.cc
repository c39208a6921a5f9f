// Gemm (cuBLASLt, and the GEMV kernel for up to Gemm::kDefaultGemvMaxRows rows) against a
// double-precision host reference: m in {1, 7, 64, 300}, n and k in
// {64, 896, 4864}, with and without bias, bf16 and fp32 outputs, overwrite and accumulate, tight
// and padded row strides. The reference is computed for a sample of rows (all of them when m <= 8,
// else the first, the last and six random ones); padding columns of d must keep their bits, and
// an overwriting call must not read d (it starts as NaN).

#include "kernels/cuda/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace strata::cuda::testing {
namespace {

// Tolerances of every check in this file: |got - ref| <= abs_factor * scale + rtol * |ref| +
// product_rtol * (|a w| + |bias|), with scale = sum_k |a w| + |bias| + |d before| (the size of what
// was summed, so fp32 accumulation error is measured against it).
struct GemmTolerance {
  double abs_factor;
  double rtol;
  double product_rtol;
};
GemmTolerance gemm_tolerance(DType d_dtype, bool accumulate, bool bias) {
  // fp32 accumulation on the tensor cores (and split-k partial sums) stays far below 2e-5 of the
  // summed magnitude; a bf16 output adds one rounding, 2^-9 relative (doubled for margin). With
  // a bf16 d, cuBLASLt may round the product to bf16 before adding d or the bias (seen on an H200
  // with cuBLASLt 13.0: errors up to one ulp, for accumulate on every shape and for the bias
  // epilogue at m 7, n 1030), so either allows a second rounding.
  if (d_dtype == DType::kF32) return {2e-5, 0.0, 0.0};
  return {2e-5, 3.9e-3, accumulate || bias ? 3.9e-3 : 0.0};
}

class GemmTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    auto g = Gemm::create();
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gemm_ = std::make_unique<Gemm>(std::move(g).value());
  }
  std::unique_ptr<Gemm> gemm_;
};

struct Shape {
  int64_t m, n, k;
  int64_t pad;        // added to lda
  int64_t d_pad = -1;  // added to ldd; -1: pad
  int64_t ldd() const { return n + (d_pad < 0 ? pad : d_pad); }
};

struct Operands {
  std::vector<uint16_t> a, w, bias;  // bf16 bits
  std::vector<int64_t> rows;         // rows of d that are checked
  std::vector<double> dot, abs_sum;  // [rows.size(), n]: sum_k a w and sum_k |a w|
  DeviceBuffer d_a, d_w, d_bias;
};

Operands make_operands(const Shape& s, std::mt19937_64& rng) {
  Operands o;
  const int64_t lda = s.k + s.pad;
  o.a = random_halves(static_cast<size_t>(s.m * lda), DType::kBF16, -1.0f, 1.0f, rng);
  o.w = random_halves(static_cast<size_t>(s.n * s.k), DType::kBF16, -1.0f, 1.0f, rng);
  o.bias = random_halves(static_cast<size_t>(s.n), DType::kBF16, -2.0f, 2.0f, rng);
  if (s.m <= 8) {
    for (int64_t r = 0; r < s.m; ++r) o.rows.push_back(r);
  } else {
    o.rows = {0, s.m - 1};
    std::uniform_int_distribution<int64_t> dist(1, s.m - 2);
    while (o.rows.size() < 8) {
      const int64_t r = dist(rng);
      if (std::find(o.rows.begin(), o.rows.end(), r) == o.rows.end()) o.rows.push_back(r);
    }
  }
  std::vector<double> wf(o.w.size());
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = bf16_to_f32(o.w[i]);
  for (int64_t r : o.rows) {
    std::vector<double> af(static_cast<size_t>(s.k));
    for (int64_t kk = 0; kk < s.k; ++kk) af[kk] = bf16_to_f32(o.a[r * lda + kk]);
    for (int64_t j = 0; j < s.n; ++j) {
      double dot = 0.0;
      double abs_sum = 0.0;
      const double* wr = &wf[static_cast<size_t>(j * s.k)];
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const double prod = af[kk] * wr[kk];
        dot += prod;
        abs_sum += std::abs(prod);
      }
      o.dot.push_back(dot);
      o.abs_sum.push_back(abs_sum);
    }
  }
  o.d_a = upload(o.a);
  o.d_w = upload(o.w);
  o.d_bias = upload(o.bias);
  return o;
}

// One call: d starts as `init` (random when accumulating, NaN otherwise) and is checked on the
// sampled rows, padding columns included.
void run_config(Gemm& gemm, const Shape& s, const Operands& o, DType d_dtype, bool bias,
                bool accumulate, std::mt19937_64& rng) {
  SCOPED_TRACE("m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " +
               std::to_string(s.k) + " lda " + std::to_string(s.k + s.pad) + " ldd " +
               std::to_string(s.ldd()) + " d " +
               std::string(dtype_name(d_dtype)) + (bias ? " bias" : "") +
               (accumulate ? " accumulate" : ""));
  const int64_t ldd = s.ldd();
  const size_t d_elems = static_cast<size_t>(s.m * ldd);
  const bool f32 = d_dtype == DType::kF32;
  // The initial d, as doubles and as the bytes uploaded.
  std::vector<double> init(d_elems);
  std::vector<float> init_f32;
  std::vector<uint16_t> init_bf16;
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (size_t i = 0; i < d_elems; ++i) {
    const float x = accumulate ? dist(rng) : std::nanf("");
    if (f32) {
      init_f32.push_back(x);
      init[i] = x;
    } else {
      init_bf16.push_back(f32_to_bf16(x));
      init[i] = bf16_to_f32(init_bf16.back());
    }
  }
  DeviceBuffer d = f32 ? upload(init_f32) : upload(init_bf16);

  GemmParams p;
  p.a = o.d_a.data();
  p.lda = s.k + s.pad;
  p.w = o.d_w.data();
  p.ldw = s.k;
  p.bias = bias ? o.d_bias.data() : nullptr;
  p.d = d.data();
  p.ldd = ldd;
  p.d_dtype = d_dtype;
  p.accumulate = accumulate;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  STRATA_ASSERT_OK(gemm.run(p, nullptr));
  sync_device();

  std::vector<double> got(d_elems);
  if (f32) {
    const auto v = download<float>(d, d_elems);
    std::copy(v.begin(), v.end(), got.begin());
  } else {
    const auto v = download<uint16_t>(d, d_elems);
    for (size_t i = 0; i < d_elems; ++i) got[i] = bf16_to_f32(v[i]);
  }
  const GemmTolerance tol = gemm_tolerance(d_dtype, accumulate, bias);
  int64_t bad = 0;
  int64_t padding_changed = 0;
  for (size_t ri = 0; ri < o.rows.size(); ++ri) {
    const int64_t r = o.rows[ri];
    for (int64_t j = 0; j < s.n; ++j) {
      const size_t at = static_cast<size_t>(r * ldd + j);
      const double b = bias ? bf16_to_f32(o.bias[j]) : 0.0;
      const double before = accumulate ? init[at] : 0.0;
      const double ref = o.dot[ri * s.n + j] + b + before;
      const double scale = o.abs_sum[ri * s.n + j] + std::abs(b) + std::abs(before);
      const double product = std::abs(o.dot[ri * s.n + j]) + std::abs(b);
      const double err = std::abs(got[at] - ref);
      if (!(err <=
            tol.abs_factor * scale + tol.rtol * std::abs(ref) + tol.product_rtol * product)) {
        if (bad < 5)
          ADD_FAILURE() << "d[" << r << ", " << j << "] = " << got[at] << ", want " << ref;
        ++bad;
      }
    }
    for (int64_t j = s.n; j < ldd; ++j) {
      const size_t at = static_cast<size_t>(r * ldd + j);
      padding_changed += !(got[at] == init[at] || (std::isnan(got[at]) && std::isnan(init[at])));
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(padding_changed, 0);
}

TEST_F(GemmTest, MatchesReferenceOverShapesAndModes) {
  std::mt19937_64 rng(1);
  int shape_idx = 0;
  for (int64_t m : {1, 7, 64, 300}) {
    for (int64_t n : {64, 896, 4864}) {
      for (int64_t k : {64, 896, 4864}) {
        const Shape s{m, n, k, (shape_idx++ % 2) * 8};
        const Operands o = make_operands(s, rng);
        for (DType d_dtype : {DType::kBF16, DType::kF32}) {
          for (bool bias : {false, true}) {
            for (bool acc : {false, true}) run_config(*gemm_, s, o, d_dtype, bias, acc, rng);
          }
        }
      }
    }
  }
}

// The plan is cached per shape; the bias pointer of each call is the one used.
TEST_F(GemmTest, CachedShapeTakesEachCallsBias) {
  std::mt19937_64 rng(2);
  const Shape s{5, 64, 128, 0};
  Operands o = make_operands(s, rng);
  const std::vector<uint16_t> first_bias = o.bias;
  run_config(*gemm_, s, o, DType::kBF16, true, false, rng);
  run_config(*gemm_, s, o, DType::kF32, true, true, rng);
  o.bias = random_halves(first_bias.size(), DType::kBF16, -2.0f, 2.0f, rng);
  o.d_bias = upload(o.bias);
  run_config(*gemm_, s, o, DType::kBF16, true, false, rng);
  run_config(*gemm_, s, o, DType::kF32, true, true, rng);
}

// Column counts that fill no tile: n = 6 and 1030 (ldd padded to 16 bytes), every m up to 9.
TEST_F(GemmTest, OddColumnCounts) {
  std::mt19937_64 rng(4);
  for (int64_t m = 1; m <= 9; ++m) {
    for (const Shape& s : {Shape{m, 6, 264, 8, 2}, Shape{m, 1030, 2056, 8, 2}}) {
      const Operands o = make_operands(s, rng);
      run_config(*gemm_, s, o, DType::kBF16, m % 2 == 1, m % 3 == 0, rng);
      run_config(*gemm_, s, o, DType::kF32, m % 2 == 0, m % 3 == 1, rng);
    }
  }
}

// Every row count up to 8 on two shapes, tight and padded strides, both output dtypes.
void run_few_row_products(Gemm& gemm) {
  std::mt19937_64 rng(5);
  for (int64_t m = 1; m <= 8; ++m) {
    for (const Shape& s : {Shape{m, 1536, 1024, 0}, Shape{m, 520, 3584, 8, 8}}) {
      const Operands o = make_operands(s, rng);
      run_config(gemm, s, o, DType::kBF16, m % 2 == 1, false, rng);
      run_config(gemm, s, o, DType::kF32, m % 2 == 0, true, rng);
    }
  }
}

// The GEMV kernel (gemv_max_rows 8) for every row count up to 8. Its name puts it in the
// sanitizer runs of tools/gpu/gpu_check.sh (filter *Small*).
TEST_F(GemmTest, GemvSmallBatchMatchesReference) {
  auto gemv = Gemm::create(size_t{32} << 20, 8);
  ASSERT_TRUE(gemv.ok());
  run_few_row_products(*gemv);
}

// The same products on cuBLASLt alone (gemv_max_rows 0). Kept out of the sanitizer runs:
// racecheck reports hazards inside cuBLASLt's split-k kernels, which are not ours to fix.
TEST_F(GemmTest, CublasFewRowsMatchReference) {
  auto cublas = Gemm::create(size_t{32} << 20, 0);
  ASSERT_TRUE(cublas.ok());
  run_few_row_products(*cublas);
}

// The GEMV kernel's promise (gemv.h): a row's output bits do not depend on how many rows the
// product has, so a sequence decodes the same alone or in a batch of up to 8.
TEST_F(GemmTest, GemvRowBitsDoNotDependOnBatchSize) {
  auto gemv = Gemm::create(size_t{32} << 20, 8);
  ASSERT_TRUE(gemv.ok());
  std::mt19937_64 rng(6);
  const Shape full{8, 384, 2048, 0};
  const Operands o = make_operands(full, rng);
  std::vector<uint16_t> first;
  for (int64_t m = 8; m >= 1; --m) {
    DeviceBuffer d = upload(std::vector<uint16_t>(static_cast<size_t>(m * full.n), 0));
    GemmParams p;
    p.a = o.d_a.data();
    p.lda = full.k;
    p.w = o.d_w.data();
    p.ldw = full.k;
    p.bias = o.d_bias.data();
    p.d = d.data();
    p.ldd = full.n;
    p.m = m;
    p.n = full.n;
    p.k = full.k;
    STRATA_ASSERT_OK(gemv->run(p, nullptr));
    sync_device();
    const auto rows = download<uint16_t>(d, static_cast<size_t>(m * full.n));
    const std::vector<uint16_t> row0(rows.begin(), rows.begin() + full.n);
    if (first.empty()) first = row0;
    EXPECT_EQ(row0, first) << "row 0 of a " << m << "-row product";
  }
}

TEST_F(GemmTest, LargeMWithOddRowCount) {
  std::mt19937_64 rng(3);
  const Shape s{8191, 1024, 512, 8};
  const Operands o = make_operands(s, rng);
  run_config(*gemm_, s, o, DType::kBF16, true, false, rng);
  run_config(*gemm_, s, o, DType::kF32, false, true, rng);
}

TEST_F(GemmTest, RejectsMisalignedAndUnsupported) {
  auto buf = DeviceBuffer::allocate(1 << 20);
  ASSERT_TRUE(buf.ok());
  GemmParams p;
  p.a = buf->data();
  p.w = buf->data();
  p.d = buf->data();
  p.m = 4;
  p.n = 64;
  p.k = 64;
  p.lda = p.ldw = p.ldd = 64;
  GemmParams bad = p;
  bad.a = static_cast<const char*>(p.a) + 2;
  EXPECT_EQ(gemm_->run(bad, nullptr).code(), StatusCode::kInvalidArgument);
  bad = p;
  bad.lda = 68;  // 136 bytes: not a multiple of 16
  EXPECT_EQ(gemm_->run(bad, nullptr).code(), StatusCode::kInvalidArgument);
  bad = p;
  bad.ldw = 32;  // shorter than k
  EXPECT_EQ(gemm_->run(bad, nullptr).code(), StatusCode::kInvalidArgument);
  bad = p;
  bad.d_dtype = DType::kF16;
  EXPECT_EQ(gemm_->run(bad, nullptr).code(), StatusCode::kUnsupported);
  bad = p;
  bad.m = 0;
  EXPECT_TRUE(gemm_->run(bad, nullptr).ok());  // no rows: nothing to do
}

}  // namespace
}  // namespace strata::cuda::testing
