// DeepSeek's routing in the MoE block (model/moe_block.h route_tokens): V2's greedy and
// group_limited_greedy over softmax scores, V3's noaux_tc over sigmoid scores with the correction
// bias choosing only, groups ranked by their top-2 sum, renormalization and routed_scaling_factor,
// each against hand-computed choices; and non-finite logits still giving k distinct experts.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "model/hf_config.h"
#include "model/moe_block.h"

namespace strata::model {
namespace {

MoeConfig v2_config(MoeTopkMethod method) {
  MoeConfig c;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.topk_method = method;
  c.num_groups = 4;  // {0,1} {2,3} {4,5} {6,7}
  c.topk_groups = 1;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 16.0;
  c.layer_is_moe = {true};
  return c;
}

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route(const MoeConfig& c, std::vector<float> logits, std::vector<float> bias = {}) {
  ThreadPool pool(1);
  Routed r{std::vector<int32_t>(static_cast<size_t>(c.num_experts_per_tok)),
           std::vector<float>(static_cast<size_t>(c.num_experts_per_tok))};
  route_tokens(c, logits.data(), 1, r.experts.data(), r.weights.data(), pool, bias);
  return r;
}

std::vector<double> softmax(const std::vector<float>& x) {
  double sum = 0;
  std::vector<double> p;
  for (const float v : x) sum += std::exp(static_cast<double>(v));
  for (const float v : x) p.push_back(std::exp(static_cast<double>(v)) / sum);
  return p;
}

TEST(DeepseekRoutingTest, V2GreedyTakesTheGlobalTopKTimesTheScalingFactor) {
  const std::vector<float> logits = {0.1f, 2.0f, 0.0f, 1.9f, -1.0f, 0.5f, 0.3f, 0.2f};
  const Routed r = route(v2_config(MoeTopkMethod::kGreedy), logits);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3}));
  const std::vector<double> p = softmax(logits);
  EXPECT_NEAR(r.weights[0], 16.0 * p[1], 1e-5);
  EXPECT_NEAR(r.weights[1], 16.0 * p[3], 1e-5);
}

TEST(DeepseekRoutingTest, V2GroupLimitedGreedyStaysInTheBestGroups) {
  // Experts 1 and 3 are the two best, but in groups 0 and 1; with one group allowed, group 0
  // (max 2.0) wins and its two experts are taken, the weaker 0 over the stronger 3.
  const std::vector<float> logits = {0.1f, 2.0f, 0.0f, 1.9f, -1.0f, 0.5f, 0.3f, 0.2f};
  const Routed r = route(v2_config(MoeTopkMethod::kGroupLimitedGreedy), logits);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1}));
  const std::vector<double> p = softmax(logits);
  EXPECT_NEAR(r.weights[0], 16.0 * p[0], 1e-5) << "weights stay the unrenormalized scores";
}

TEST(DeepseekRoutingTest, V3BiasChoosesButSigmoidScoresWeigh) {
  MoeConfig c = v2_config(MoeTopkMethod::kNoAuxTc);
  c.scoring = MoeScoring::kSigmoid;
  c.score_correction_bias = true;
  c.num_groups = 4;
  c.topk_groups = 2;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  // Expert 1 alone scores best, but groups are ranked by the sum of their two best choices.
  const std::vector<float> logits = {-2.0f, 3.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.5f, 1.5f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.2f, 0.0f, 0.0f};
  const Routed r = route(c, logits, bias);
  // sigmoid: 0.119 0.953 0.5 0.5 0.731 0.731 0.818 0.818; + bias on 5: 0.931.
  // group top-2 sums: g0 1.072, g1 1.0, g2 1.662, g3 1.636 -> groups 2 and 3; inside them the
  // best two of score + bias are 5 (0.931) and 6 or 7 (0.818, tie -> 6).
  EXPECT_EQ(r.experts, (std::vector<int32_t>{5, 6}));
  const double s5 = 1.0 / (1.0 + std::exp(-1.0)), s6 = 1.0 / (1.0 + std::exp(-1.5));
  EXPECT_NEAR(r.weights[0], 2.5 * s5 / (s5 + s6), 1e-5) << "the bias never weighs";
  EXPECT_NEAR(r.weights[1], 2.5 * s6 / (s5 + s6), 1e-5);
  // Without the bias, expert 7 ties 6 and 4/5 tie below: experts 6 and 7.
  EXPECT_EQ(route(c, logits, std::vector<float>(8, 0.0f)).experts, (std::vector<int32_t>{6, 7}));
}

TEST(DeepseekRoutingTest, NonFiniteLogitsStillGiveDistinctValidExperts) {
  MoeConfig c = v2_config(MoeTopkMethod::kNoAuxTc);
  c.scoring = MoeScoring::kSigmoid;
  c.score_correction_bias = true;
  c.topk_groups = 2;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const float bad : {nan, std::numeric_limits<float>::infinity()}) {
    const Routed r = route(c, std::vector<float>(8, bad), std::vector<float>(8, 0.0f));
    ASSERT_EQ(r.experts.size(), 2u);
    EXPECT_NE(r.experts[0], r.experts[1]);
    for (const int32_t e : r.experts) EXPECT_TRUE(e >= 0 && e < 8) << e;
  }
}

}  // namespace
}  // namespace strata::model
