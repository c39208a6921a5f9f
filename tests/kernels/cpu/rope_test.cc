#include "kernels/cpu/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"

namespace strata::cpu {
namespace {

using test_util::bit_equal;
using test_util::hashed_uniform;
using test_util::rel_l2_error;
using test_util::Tolerance;

std::vector<float> default_inv_freq(int32_t head_dim, double theta) {
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    f[static_cast<size_t>(i)] = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / head_dim));
  }
  return f;
}

// The float64 rotation of one head: x * cos + rotate_half(x) * sin, rotate_half = [-x2, x1].
void reference_head(const float* x, int32_t head_dim, int32_t position,
                    const std::vector<float>& inv_freq, double scaling, double* out) {
  const int32_t half = head_dim / 2;
  for (int32_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq[static_cast<size_t>(i)];
    const double c = std::cos(angle) * scaling;
    const double s = std::sin(angle) * scaling;
    out[i] = x[i] * c - static_cast<double>(x[i + half]) * s;
    out[i + half] = x[i + half] * c + static_cast<double>(x[i]) * s;
  }
}

struct RopeCase {
  int32_t num_q_heads, num_kv_heads, head_dim;
  std::vector<float> inv_freq;
  float scaling;
};

void check_case(const RopeCase& rc, ThreadPool& pool) {
  const std::vector<int32_t> positions = {17, 0, 131071, 1, 4095, 2048, 65537};
  const auto n = static_cast<int64_t>(positions.size());
  const int64_t d = rc.head_dim;
  std::vector<float> q(static_cast<size_t>(n * rc.num_q_heads * d));
  std::vector<float> k(static_cast<size_t>(n * rc.num_kv_heads * d));
  for (size_t i = 0; i < q.size(); ++i) q[i] = hashed_uniform(7, i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = hashed_uniform(8, i);
  const std::vector<float> q0 = q, k0 = k;
  RopeParams p;
  p.q = q.data();
  p.k = k.data();
  p.positions = positions.data();
  p.inv_freq = rc.inv_freq.data();
  p.num_tokens = n;
  p.num_q_heads = rc.num_q_heads;
  p.num_kv_heads = rc.num_kv_heads;
  p.head_dim = rc.head_dim;
  p.attention_scaling = rc.scaling;
  ASSERT_TRUE(apply_rope(p, pool).ok());
  const int64_t half = d / 2;
  std::vector<double> ref(static_cast<size_t>(d));
  for (const auto& [x0, x, heads] :
       {std::tuple{&q0, &q, rc.num_q_heads}, std::tuple{&k0, &k, rc.num_kv_heads}}) {
    for (int64_t row = 0; row < n * heads; ++row) {
      const int32_t position = positions[static_cast<size_t>(row / heads)];
      reference_head(x0->data() + row * d, rc.head_dim, position, rc.inv_freq, rc.scaling,
                     ref.data());
      const float* got = x->data() + row * d;
      // Both halves separately: a swapped sign or pairing shows in one of them.
      EXPECT_LT(rel_l2_error(got, ref.data(), half), Tolerance::kRope) << "first half, row " << row;
      EXPECT_LT(rel_l2_error(got + half, ref.data() + half, half), Tolerance::kRope)
          << "second half, row " << row;
      if (position == 0 && rc.scaling == 1.0f) {
        EXPECT_TRUE(bit_equal(got, x0->data() + row * d, d)) << "position 0 is the identity";
      }
    }
  }
}

TEST(RopeTest, MatchesFloat64ReferenceOnBothHalves) {
  ThreadPool pool(3);
  check_case({4, 2, 64, default_inv_freq(64, 10000.0), 1.0f}, pool);
  check_case({8, 1, 128, default_inv_freq(128, 1000000.0), 1.0f}, pool);
  check_case({2, 2, 6, default_inv_freq(6, 500000.0), 1.0f}, pool);
  // Scaled inv_freq as a model computes it for llama3 / yarn, and yarn's attention scaling.
  std::vector<float> scaled = default_inv_freq(64, 500000.0);
  for (size_t i = scaled.size() / 2; i < scaled.size(); ++i) scaled[i] /= 8.0f;
  check_case({4, 4, 64, scaled, 1.2f}, pool);
}

TEST(RopeTest, TokensIndependentOfBatchAndThreads) {
  const int32_t d = 32;
  const std::vector<float> inv_freq = default_inv_freq(d, 10000.0);
  const std::vector<int32_t> positions = {3, 900, 12, 7};
  std::vector<float> q(4 * 2 * d), k(4 * 1 * d);
  for (size_t i = 0; i < q.size(); ++i) q[i] = hashed_uniform(9, i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = hashed_uniform(10, i);
  std::vector<float> q_all = q, k_all = k;
  RopeParams p;
  p.q = q_all.data();
  p.k = k_all.data();
  p.positions = positions.data();
  p.inv_freq = inv_freq.data();
  p.num_tokens = 4;
  p.num_q_heads = 2;
  p.num_kv_heads = 1;
  p.head_dim = d;
  ThreadPool three(3);
  ASSERT_TRUE(apply_rope(p, three).ok());
  ThreadPool one(1);
  for (int64_t t = 0; t < 4; ++t) {
    std::vector<float> q_one(q.begin() + t * 2 * d, q.begin() + (t + 1) * 2 * d);
    std::vector<float> k_one(k.begin() + t * d, k.begin() + (t + 1) * d);
    p.q = q_one.data();
    p.k = k_one.data();
    p.positions = positions.data() + t;
    p.num_tokens = 1;
    ASSERT_TRUE(apply_rope(p, one).ok());
    EXPECT_TRUE(bit_equal(q_one.data(), q_all.data() + t * 2 * d, 2 * d));
    EXPECT_TRUE(bit_equal(k_one.data(), k_all.data() + t * d, d));
  }
}

TEST(RopeTest, RejectsBadParams) {
  ThreadPool pool(1);
  std::vector<float> q(16, 1.0f), k(16, 1.0f), inv_freq(4, 1.0f);
  const std::vector<int32_t> positions = {1, 2};
  const auto code_of = [&](auto mutate) {
    RopeParams p;
    p.q = q.data();
    p.k = k.data();
    p.positions = positions.data();
    p.inv_freq = inv_freq.data();
    p.num_tokens = 2;
    p.num_q_heads = 1;
    p.num_kv_heads = 1;
    p.head_dim = 8;
    mutate(p);
    return apply_rope(p, pool).code();
  };
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  EXPECT_EQ(code_of([](RopeParams& p) { p.head_dim = 7; }), kInvalid);
  EXPECT_EQ(code_of([](RopeParams& p) { p.head_dim = 0; }), kInvalid);
  EXPECT_EQ(code_of([](RopeParams& p) { p.num_kv_heads = 0; }), kInvalid);
  EXPECT_EQ(code_of([](RopeParams& p) { p.k = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](RopeParams& p) { p.inv_freq = nullptr; }), kInvalid);
  EXPECT_EQ(code_of([](RopeParams& p) { p.num_tokens = -2; }), kInvalid);
  for (float v : q) EXPECT_EQ(v, 1.0f);
}

}  // namespace
}  // namespace strata::cpu
