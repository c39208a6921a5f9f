// The CPU MoE block (model/moe_block.h): routing (softmax, top-k with ties to the lower expert
// id, renormalization or not), the block against a float64 reference of transformers' loop, and
// each token's output bit-identical alone, in any batch and with any thread count.

#include "model/moe_block.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace strata::model {
namespace {

// Random F32 MoE weights: experts [E] of gate/up [I, H], down [H, I], router [E, H].
struct RandomMoe {
  RandomMoe(int64_t num_experts, int64_t k, int64_t hidden, int64_t inter, bool renormalize,
            uint32_t seed)
      : hidden(hidden) {
    config.num_experts = num_experts;
    config.num_experts_per_tok = k;
    config.moe_intermediate_size = inter;
    config.norm_topk_prob = renormalize;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    const auto tensor = [&](int64_t rows, int64_t cols) {
      data.emplace_back(static_cast<size_t>(rows * cols));
      for (float& v : data.back()) v = normal(rng);
      TensorView t;
      t.data = data.back().data();
      t.rank = 2;
      t.shape = {rows, cols, 0, 0};
      return t;
    };
    data.reserve(static_cast<size_t>(1 + 3 * num_experts));
    weights.router = tensor(num_experts, hidden);
    for (int64_t e = 0; e < num_experts; ++e) {
      ExpertWeights x;
      x.gate_proj = tensor(inter, hidden);
      x.up_proj = tensor(inter, hidden);
      x.down_proj = tensor(hidden, inter);
      weights.experts.push_back(x);
    }
  }

  std::vector<float> input(int64_t num_tokens, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(num_tokens * hidden));
    for (float& v : x) v = normal(rng);
    return x;
  }

  std::vector<float> run(const std::vector<float>& x, ThreadPool& pool) {
    const int64_t n = static_cast<int64_t>(x.size()) / hidden;
    std::vector<float> out(x.size());
    const Status s = moe_forward(config, weights, x.data(), n, out.data(), scratch, pool);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }

  // transformers' block in float64: softmax over every expert, top-k, renormalized or not, and
  // the weighted sum of the experts' SwiGLU MLPs.
  std::vector<double> reference(const std::vector<float>& x) const {
    const int64_t n = static_cast<int64_t>(x.size()) / hidden, ne = config.num_experts;
    const int64_t inter = config.moe_intermediate_size, k = config.num_experts_per_tok;
    const auto w = [](TensorView t, int64_t r, int64_t c) {
      return static_cast<double>(static_cast<const float*>(t.data)[r * t.shape[1] + c]);
    };
    std::vector<double> out(x.size(), 0.0);
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x.data() + t * hidden;
      std::vector<double> p(static_cast<size_t>(ne));
      double max = -1e300, sum = 0.0;
      for (int64_t e = 0; e < ne; ++e) {
        double l = 0.0;
        for (int64_t i = 0; i < hidden; ++i) l += w(weights.router, e, i) * xt[i];
        p[static_cast<size_t>(e)] = l;
        max = std::max(max, l);
      }
      for (double& v : p) sum += (v = std::exp(v - max));
      for (double& v : p) v /= sum;
      std::vector<int64_t> order(static_cast<size_t>(ne));
      for (int64_t e = 0; e < ne; ++e) order[static_cast<size_t>(e)] = e;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
      });
      double top = 0.0;
      for (int64_t j = 0; j < k; ++j) top += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = order[static_cast<size_t>(j)];
        const double weight = p[static_cast<size_t>(e)] / (config.norm_topk_prob ? top : 1.0);
        const ExpertWeights& ex = weights.experts[static_cast<size_t>(e)];
        std::vector<double> h(static_cast<size_t>(inter));
        for (int64_t r = 0; r < inter; ++r) {
          double g = 0.0, u = 0.0;
          for (int64_t i = 0; i < hidden; ++i) {
            g += w(ex.gate_proj, r, i) * xt[i];
            u += w(ex.up_proj, r, i) * xt[i];
          }
          h[static_cast<size_t>(r)] = g / (1.0 + std::exp(-g)) * u;
        }
        for (int64_t o = 0; o < hidden; ++o) {
          double y = 0.0;
          for (int64_t r = 0; r < inter; ++r)
            y += w(ex.down_proj, o, r) * h[static_cast<size_t>(r)];
          out[static_cast<size_t>(t * hidden + o)] += weight * y;
        }
      }
    }
    return out;
  }

  int64_t hidden;
  MoeConfig config;
  MoeWeights weights;
  MoeScratch scratch;
  std::vector<std::vector<float>> data;
};

TEST(MoeRoutingTest, TopKTakesTheLargestAndBreaksTiesToTheLowerExpert) {
  ThreadPool pool(1);
  MoeConfig c;
  c.num_experts = 6;
  c.num_experts_per_tok = 3;
  c.norm_topk_prob = true;
  // Experts 1, 3 and 4 tie at the top; 2 and 5 tie below them.
  std::vector<float> logits = {0.0f, 2.0f,  1.0f, 2.0f, 2.0f, 1.0f,   // token 0
                               5.0f, -1.0f, 4.0f, 0.5f, 4.0f, 3.0f};  // token 1
  std::vector<int32_t> experts(6);
  std::vector<float> weights(6);
  route_tokens(c, logits.data(), 2, experts.data(), weights.data(), pool);
  EXPECT_EQ(experts, (std::vector<int32_t>{1, 3, 4, 0, 2, 4}));
  for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(weights[static_cast<size_t>(j)], 1.0f / 3.0f);
  EXPECT_NEAR(weights[3] + weights[4] + weights[5], 1.0f, 1e-6f);
  EXPECT_FLOAT_EQ(weights[4], weights[5]);  // experts 2 and 4 tie at 4.0
}

TEST(MoeRoutingTest, WithoutRenormalizationWeightsAreTheSoftmaxOverAllExperts) {
  ThreadPool pool(1);
  MoeConfig c;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.norm_topk_prob = false;
  std::vector<float> logits = {1.0f, 3.0f, 0.0f, 2.0f};
  std::vector<int32_t> experts(2);
  std::vector<float> weights(2);
  route_tokens(c, logits.data(), 1, experts.data(), weights.data(), pool);
  const double sum = std::exp(1.0) + std::exp(3.0) + std::exp(0.0) + std::exp(2.0);
  EXPECT_EQ(experts, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(weights[0], std::exp(3.0) / sum, 1e-6);
  EXPECT_NEAR(weights[1], std::exp(2.0) / sum, 1e-6);
}

TEST(MoeRoutingTest, NonFiniteLogitsStillPickDistinctValidExperts) {
  ThreadPool pool(1);
  MoeConfig c;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits = {nan, nan, nan, nan, inf, 1.0f, inf, -inf};
  std::vector<int32_t> experts(4);
  std::vector<float> weights(4);
  route_tokens(c, logits.data(), 2, experts.data(), weights.data(), pool);
  for (int t = 0; t < 2; ++t) {
    const int32_t a = experts[static_cast<size_t>(2 * t)],
                  b = experts[static_cast<size_t>(2 * t + 1)];
    EXPECT_TRUE(a >= 0 && a < 4 && b >= 0 && b < 4 && a < b) << "token " << t;
  }
}

TEST(MoeBlockTest, MatchesAFloat64ReferenceOfTransformersBlock) {
  ThreadPool pool(2);
  for (const bool renormalize : {true, false}) {
    RandomMoe moe(8, 2, 48, 40, renormalize, 7);
    const std::vector<float> x = moe.input(37, 3);
    const std::vector<float> got = moe.run(x, pool);
    const std::vector<double> want = moe.reference(x);
    for (int64_t t = 0; t < 37; ++t) {
      double diff = 0.0, norm = 0.0;
      for (int64_t i = 0; i < 48; ++i) {
        const auto at = static_cast<size_t>(t * 48 + i);
        diff += (got[at] - want[at]) * (got[at] - want[at]);
        norm += want[at] * want[at];
      }
      EXPECT_LE(std::sqrt(diff / norm), 1e-5) << "token " << t << " renormalize " << renormalize;
    }
  }
}

TEST(MoeBlockTest, EachTokenIsBitIdenticalAloneInAnyBatchAndThreadCount) {
  ThreadPool one(1), three(3);
  RandomMoe moe(16, 4, 64, 24, true, 11);
  const int64_t n = 45;
  const std::vector<float> x = moe.input(n, 5);
  const std::vector<float> batched = moe.run(x, three);
  // Alone, one thread.
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<float> row(x.begin() + t * 64, x.begin() + (t + 1) * 64);
    const std::vector<float> alone = moe.run(row, one);
    EXPECT_EQ(std::memcmp(alone.data(), batched.data() + t * 64, 64 * sizeof(float)), 0)
        << "token " << t;
  }
  // A batch large enough for each expert's kernels to split over the pool (the path prefill
  // takes) gives the token the rows decode's one-thread-per-expert path gave it.
  std::vector<float> big;
  for (int i = 0; i < 8; ++i) big.insert(big.end(), x.begin(), x.end());
  const std::vector<float> big_out = moe.run(big, three);
  for (int64_t t = 0; t < 8 * n; ++t) {
    ASSERT_EQ(std::memcmp(big_out.data() + t * 64, batched.data() + (t % n) * 64, 64 * 4), 0)
        << "token " << t << " of the large batch";
  }
  // Reversed order, in two uneven batches.
  std::vector<float> reversed;
  for (int64_t t = n - 1; t >= 0; --t) {
    reversed.insert(reversed.end(), x.begin() + t * 64, x.begin() + (t + 1) * 64);
  }
  const std::vector<float> head(reversed.begin(), reversed.begin() + 7 * 64);
  const std::vector<float> tail(reversed.begin() + 7 * 64, reversed.end());
  std::vector<float> out = moe.run(head, three);
  const std::vector<float> rest = moe.run(tail, one);
  out.insert(out.end(), rest.begin(), rest.end());
  for (int64_t t = 0; t < n; ++t) {
    EXPECT_EQ(std::memcmp(out.data() + (n - 1 - t) * 64, batched.data() + t * 64, 64 * 4), 0)
        << "token " << t;
  }
}

TEST(MoeBlockTest, WeightsThatDoNotMatchTheConfigAreRefused) {
  ThreadPool pool(1);
  RandomMoe moe(4, 2, 16, 8, true, 1);
  moe.config.num_experts = 5;
  std::vector<float> x = moe.input(2, 1), out(x.size());
  EXPECT_FALSE(
      moe_forward(moe.config, moe.weights, x.data(), 2, out.data(), moe.scratch, pool).ok());
  moe.config.num_experts = 4;
  moe.config.num_experts_per_tok = 5;
  EXPECT_FALSE(
      moe_forward(moe.config, moe.weights, x.data(), 2, out.data(), moe.scratch, pool).ok());
}

}  // namespace
}  // namespace strata::model
