// The MoE layer's kernels (moe.h):
//   - moe_route gives the experts and weights of a host port of moe_block.cc's routing (softmax
//     top-k with and without renormalization, DeepSeek-V2's group-limited greedy, DeepSeek-V3's
//     sigmoid + bias + grouped top-k + scaling), F32 and BF16 logits, ties to the lower id and the
//     lower group;
//   - moe_permute is a stable counting sort (each expert's rows in token order) with a tile table
//     that covers every row once; gather then combine returns the tokens bit for bit;
//   - the whole layer (route, permute, gather, gate | up with SiLU-and-mul, down, combine) holds a
//     float64 host reference within a tolerance derived from its roundings, for 1, 5 and 300
//     tokens (1 and 37 at k 1032 / 584, where both configs' cp.async rings wrap), experts with no
//     rows, both tile configs, F32 and BF16 rows and outputs; a SiLU left out of the reference
//     fails that check;
//   - a token's output is bit-identical run twice, alone or in a batch of 300, and under either
//     tile config; the layer replays from a CUDA graph for a new routing without a host sync.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kernels/cuda/moe.h"

namespace strata::cuda::testing {
namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

// --- Routing: a host port of moe_block.cc (float arithmetic, the same order of operations). ---

struct RouteConfig {
  int32_t num_experts = 8, top_k = 2;
  MoeScoring scoring = MoeScoring::kSoftmax;
  MoeTopk topk_method = MoeTopk::kGreedy;
  int32_t num_groups = 1, topk_groups = 1;
  bool norm_topk_prob = false;
  float scale = 1.0f;
  bool bias = false;
};

// The k largest of score among allowed (ties to the lower id; a NaN never wins), ascending.
std::vector<int32_t> host_top_k(const std::vector<float>& score, int32_t k,
                                const std::vector<bool>& allowed) {
  std::vector<int32_t> chosen;
  for (int32_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < static_cast<int32_t>(score.size()); ++e) {
      if (!allowed[at(e)] || std::find(chosen.begin(), chosen.end(), e) != chosen.end()) continue;
      if (std::isnan(score[at(e)])) continue;
      if (best < 0 || score[at(e)] > score[at(best)]) best = e;
    }
    chosen.push_back(best);
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

void host_route(const RouteConfig& c, const float* logits, const float* bias, int32_t* experts,
                float* weights) {
  const int32_t n = c.num_experts, k = c.top_k;
  std::vector<float> p(logits, logits + n);
  if (c.scoring == MoeScoring::kSoftmax) {
    const float max = *std::max_element(p.begin(), p.end());
    float sum = 0.0f;
    for (float& x : p) {
      x = std::exp(x - max);
      sum += x;
    }
    for (float& x : p) x /= sum;
  } else {
    for (float& x : p) x = 1.0f / (1.0f + std::exp(-x));
  }
  std::vector<float> choice = p;
  if (bias != nullptr) {
    for (int32_t e = 0; e < n; ++e) choice[at(e)] += bias[e];
  }
  std::vector<bool> allowed(at(n), true);
  if (c.topk_method != MoeTopk::kGreedy) {
    const int32_t per = n / c.num_groups;
    std::vector<float> group(at(c.num_groups));
    for (int32_t g = 0; g < c.num_groups; ++g) {
      std::vector<float> s(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(s.begin(), s.end(), std::greater<>());
      group[at(g)] = c.topk_method == MoeTopk::kGroupLimitedGreedy ? s[0] : s[0] + s[1];
    }
    const std::vector<int32_t> chosen =
        host_top_k(group, c.topk_groups, std::vector<bool>(at(c.num_groups), true));
    std::fill(allowed.begin(), allowed.end(), false);
    for (const int32_t g : chosen) std::fill_n(allowed.begin() + g * per, per, true);
  }
  const std::vector<int32_t> ids = host_top_k(choice, k, allowed);
  const bool deepseek = c.scoring != MoeScoring::kSoftmax || c.topk_method != MoeTopk::kGreedy ||
                        c.scale != 1.0f || c.bias;
  float sum = 0.0f;
  for (const int32_t e : ids) sum += p[at(e)];
  if (deepseek) sum += 1e-20f;
  for (int32_t j = 0; j < k; ++j) {
    float w = c.norm_topk_prob ? p[at(ids[at(j)])] / sum : p[at(ids[at(j)])];
    if (deepseek) w *= c.scale;
    experts[j] = ids[at(j)];
    weights[j] = w;
  }
}

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

// Routes logits (F32 values, uploaded as logits_dtype: BF16 values must be representable) on the
// device.
Routed device_route(const RouteConfig& c, const std::vector<float>& logits,
                    const std::vector<float>& bias, int32_t num_tokens, DType logits_dtype) {
  DeviceBuffer d_logits;
  if (logits_dtype == DType::kBF16) {
    std::vector<uint16_t> h(logits.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(logits[i]);
    d_logits = upload(h);
  } else {
    d_logits = upload(logits);
  }
  DeviceBuffer d_bias = c.bias ? upload(bias) : DeviceBuffer{};
  const size_t pairs = at(int64_t{num_tokens} * c.top_k);
  DeviceBuffer d_experts = upload(std::vector<int32_t>(pairs, -7));
  DeviceBuffer d_weights = upload(std::vector<float>(pairs, NAN));
  MoeRouteParams p;
  p.logits = d_logits.data();
  p.logits_dtype = logits_dtype;
  p.score_bias = c.bias ? d_bias.as<float>() : nullptr;
  p.experts = d_experts.as<int32_t>();
  p.weights = d_weights.as<float>();
  p.num_tokens = num_tokens;
  p.num_experts = c.num_experts;
  p.top_k = c.top_k;
  p.scoring = c.scoring;
  p.topk_method = c.topk_method;
  p.num_groups = c.num_groups;
  p.topk_groups = c.topk_groups;
  p.norm_topk_prob = c.norm_topk_prob;
  p.routed_scaling_factor = c.scale;
  const Status s = moe_route(p, nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  sync_device();
  return Routed{download<int32_t>(d_experts, pairs), download<float>(d_weights, pairs)};
}

// Logits that are multiples of 1/64 (exact in bf16 in [-4, 4)): distinct logits differ by a
// factor of at least e^(1/64) in probability, far above an ulp of the exponentials, so the device
// and the host choose alike; equal logits are exact ties.
std::vector<float> grid_logits(size_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(-256, 255);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng)) / 64.0f;
  return v;
}

void expect_routes_match(const RouteConfig& c, const std::vector<float>& logits,
                         const std::vector<float>& bias, int32_t num_tokens, DType dtype,
                         const std::string& what) {
  const Routed got = device_route(c, logits, bias, num_tokens, dtype);
  std::vector<int32_t> experts(at(c.top_k));
  std::vector<float> weights(at(c.top_k));
  for (int32_t t = 0; t < num_tokens; ++t) {
    host_route(c, logits.data() + int64_t{t} * c.num_experts, c.bias ? bias.data() : nullptr,
               experts.data(), weights.data());
    for (int32_t j = 0; j < c.top_k; ++j) {
      const size_t i = at(int64_t{t} * c.top_k + j);
      ASSERT_EQ(got.experts[i], experts[at(j)]) << what << " token " << t << " slot " << j;
      EXPECT_NEAR(got.weights[i], weights[at(j)], 2e-6 * std::max(1.0f, c.scale))
          << what << " token " << t << " slot " << j;
    }
  }
}

class MoeRouteTest : public CudaTest {};

TEST_F(MoeRouteTest, SoftmaxTopKMatchesHostReference) {
  std::mt19937_64 rng(40);
  struct Case {
    int32_t experts, k;
    bool renorm;
  };
  // Mixtral (renormalized), Qwen3-MoE with and without norm_topk_prob, a wide odd case.
  for (const Case cs :
       {Case{8, 2, true}, Case{128, 8, false}, Case{128, 8, true}, Case{97, 5, false}}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      for (const int32_t tokens : {1, 17, 300}) {
        RouteConfig c;
        c.num_experts = cs.experts;
        c.top_k = cs.k;
        c.norm_topk_prob = cs.renorm;
        const auto logits = grid_logits(at(int64_t{tokens} * cs.experts), rng);
        expect_routes_match(c, logits, {}, tokens, dtype,
                            "E " + std::to_string(cs.experts) + " T " + std::to_string(tokens));
      }
    }
  }
}

TEST_F(MoeRouteTest, TiesGoToTheLowerExpertId) {
  RouteConfig c;
  c.num_experts = 64;
  c.top_k = 6;
  c.norm_topk_prob = true;
  // Token 0: all equal (experts 0..5). Token 1: experts 10, 20, 30, 40 tie for the last 2 slots
  // behind 4 larger ones. Token 2: ties among the top ones across lanes (e and e + 32).
  std::vector<float> logits(3 * 64, 0.0f);
  for (const int e : {3, 50, 63, 33}) logits[at(64 + e)] = 1.0f;
  for (const int e : {40, 30, 20, 10}) logits[at(64 + e)] = 0.5f;
  for (const int e : {1, 33, 5, 37, 9, 41, 13, 45}) logits[at(128 + e)] = 2.0f;
  const Routed got = device_route(c, logits, {}, 3, DType::kF32);
  const std::vector<int32_t> want = {0, 1, 2, 3, 4, 5, 3, 10, 20, 33, 50, 63, 1, 5, 9, 13, 33, 37};
  EXPECT_EQ(got.experts, want);
  expect_routes_match(c, logits, {}, 3, DType::kBF16, "ties");
}

TEST_F(MoeRouteTest, DeepseekV2GroupLimitedGreedyMatchesHostReference) {
  std::mt19937_64 rng(41);
  RouteConfig c;
  c.num_experts = 160;  // DeepSeek-V2: 160 experts in 8 groups, 3 groups, top-6, scale 16
  c.top_k = 6;
  c.topk_method = MoeTopk::kGroupLimitedGreedy;
  c.num_groups = 8;
  c.topk_groups = 3;
  c.scale = 16.0f;
  for (const int32_t tokens : {1, 33, 300}) {
    const auto logits = grid_logits(at(int64_t{tokens} * c.num_experts), rng);
    expect_routes_match(c, logits, {}, tokens, DType::kBF16, "V2 T " + std::to_string(tokens));
  }
  // V2-Lite's plain greedy with a scale (64 experts, top-6, scale 1 but the softmax path) and
  // norm_topk_prob on.
  c.num_experts = 64;
  c.topk_method = MoeTopk::kGreedy;
  c.num_groups = 1;
  c.topk_groups = 1;
  c.scale = 1.0f;
  c.norm_topk_prob = true;
  const auto logits = grid_logits(at(int64_t{50} * c.num_experts), rng);
  expect_routes_match(c, logits, {}, 50, DType::kF32, "V2-Lite");
}

TEST_F(MoeRouteTest, DeepseekV3NoAuxTcMatchesHostReference) {
  std::mt19937_64 rng(42);
  RouteConfig c;
  c.num_experts = 256;  // DeepSeek-V3: 256 experts in 8 groups, 4 groups, top-8, scale 2.5
  c.top_k = 8;
  c.scoring = MoeScoring::kSigmoid;
  c.topk_method = MoeTopk::kNoAuxTc;
  c.num_groups = 8;
  c.topk_groups = 4;
  c.norm_topk_prob = true;
  c.scale = 2.5f;
  c.bias = true;
  std::uniform_int_distribution<int> b(-64, 64);
  std::vector<float> bias(at(c.num_experts));
  for (float& x : bias) x = static_cast<float>(b(rng)) / 256.0f;
  for (const int32_t tokens : {1, 17, 300}) {
    const auto logits = grid_logits(at(int64_t{tokens} * c.num_experts), rng);
    expect_routes_match(c, logits, bias, tokens, DType::kF32, "V3 T " + std::to_string(tokens));
  }
  // Without the bias and renormalization, in bf16.
  c.bias = false;
  c.norm_topk_prob = false;
  const auto logits = grid_logits(at(int64_t{40} * c.num_experts), rng);
  expect_routes_match(c, logits, {}, 40, DType::kBF16, "V3 no bias");
}

TEST_F(MoeRouteTest, GroupTiesGoToTheLowerGroup) {
  RouteConfig c;
  c.num_experts = 64;
  c.top_k = 4;
  c.topk_method = MoeTopk::kGroupLimitedGreedy;
  c.num_groups = 8;
  c.topk_groups = 2;
  c.scale = 1.5f;
  // Groups 2, 5 and 7 hold an equal best logit: groups 2 and 5 win; their experts 16.. and 40..
  std::vector<float> logits(64, 0.0f);
  logits[17] = 3.0f;
  logits[41] = 3.0f;
  logits[63] = 3.0f;
  logits[18] = 1.0f;
  const Routed got = device_route(c, logits, {}, 1, DType::kF32);
  EXPECT_EQ(got.experts, (std::vector<int32_t>{16, 17, 18, 41}));
  expect_routes_match(c, logits, {}, 1, DType::kF32, "group ties");
  // V3 with every score equal: group 0, experts 0..3.
  c.topk_method = MoeTopk::kNoAuxTc;
  c.scoring = MoeScoring::kSigmoid;
  c.topk_groups = 1;
  std::vector<float> v3(64, -8.0f);
  expect_routes_match(c, v3, {}, 1, DType::kF32, "all equal");
}

// --- Permutation ---

// Each token's k distinct experts, ascending, drawn from the first `used` experts.
std::vector<int32_t> random_experts(int32_t tokens, int32_t k, int32_t used, std::mt19937_64& rng) {
  std::vector<int32_t> all(at(used));
  std::vector<int32_t> out;
  for (int32_t t = 0; t < tokens; ++t) {
    for (int32_t e = 0; e < used; ++e) all[at(e)] = e;
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> pick(all.begin(), all.begin() + k);
    std::sort(pick.begin(), pick.end());
    out.insert(out.end(), pick.begin(), pick.end());
  }
  return out;
}

struct Permuted {
  std::vector<int32_t> offsets, row_of, token_of, tile_expert, tile_row;
  int32_t num_tiles = 0;
  DeviceBuffer d_offsets, d_row_of, d_token_of, d_tile_expert, d_tile_row, d_num_tiles;
};

Permuted device_permute(const DeviceBuffer& d_experts, int32_t tokens, int32_t k, int32_t experts,
                        MoeTileConfig config) {
  Permuted r;
  const size_t pairs = at(int64_t{tokens} * k);
  const int32_t max_tiles = moe_max_tiles(tokens, k, experts, config);
  r.d_offsets = upload(std::vector<int32_t>(at(experts + 1), -1));
  r.d_row_of = upload(std::vector<int32_t>(pairs + 1, -1));
  r.d_token_of = upload(std::vector<int32_t>(pairs + 1, -1));
  r.d_tile_expert = upload(std::vector<int32_t>(at(max_tiles + 1), -1));
  r.d_tile_row = upload(std::vector<int32_t>(at(max_tiles + 1), -1));
  r.d_num_tiles = upload(std::vector<int32_t>(1, -1));
  MoePermuteParams p;
  p.experts = d_experts.as<int32_t>();
  p.num_tokens = tokens;
  p.top_k = k;
  p.num_experts = experts;
  p.expert_offsets = r.d_offsets.as<int32_t>();
  p.row_of = r.d_row_of.as<int32_t>();
  p.token_of = r.d_token_of.as<int32_t>();
  p.tile_config = config;
  p.max_tiles = max_tiles;
  p.tile_expert = r.d_tile_expert.as<int32_t>();
  p.tile_row = r.d_tile_row.as<int32_t>();
  p.num_tiles = r.d_num_tiles.as<int32_t>();
  const Status s = moe_permute(p, nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  sync_device();
  r.offsets = download<int32_t>(r.d_offsets, at(experts + 1));
  r.row_of = download<int32_t>(r.d_row_of, pairs);
  r.token_of = download<int32_t>(r.d_token_of, pairs);
  r.num_tiles = download<int32_t>(r.d_num_tiles, 1)[0];
  r.tile_expert = download<int32_t>(r.d_tile_expert, at(max_tiles));
  r.tile_row = download<int32_t>(r.d_tile_row, at(max_tiles));
  return r;
}

class MoePermuteTest : public CudaTest {};

TEST_F(MoePermuteTest, StableCountingSortAndTileTable) {
  std::mt19937_64 rng(43);
  struct Case {
    int32_t tokens, k, experts, used;
  };
  for (const Case cs : {Case{1, 2, 8, 8}, Case{17, 6, 64, 20}, Case{300, 8, 128, 128},
                        Case{2049, 2, 8, 8}, Case{600, 8, 1024, 1024}}) {
    for (const MoeTileConfig config : {MoeTileConfig::kSmall, MoeTileConfig::kLarge}) {
      const std::string what =
          "T " + std::to_string(cs.tokens) + " E " + std::to_string(cs.experts);
      const auto experts = random_experts(cs.tokens, cs.k, cs.used, rng);
      const DeviceBuffer d_experts = upload(experts);
      const Permuted r = device_permute(d_experts, cs.tokens, cs.k, cs.experts, config);
      // The CPU's counting sort (moe_block.cc's group_by_expert), pair by pair in token order.
      std::vector<int32_t> begin(at(cs.experts + 1), 0);
      for (const int32_t e : experts) ++begin[at(e + 1)];
      for (int32_t e = 0; e < cs.experts; ++e) begin[at(e + 1)] += begin[at(e)];
      ASSERT_EQ(r.offsets, begin) << what;
      std::vector<int32_t> next(begin.begin(), begin.end() - 1);
      for (size_t i = 0; i < experts.size(); ++i) {
        const int32_t row = next[at(experts[i])]++;
        ASSERT_EQ(r.row_of[i], row) << what << " pair " << i;
        ASSERT_EQ(r.token_of[at(row)], static_cast<int32_t>(i) / cs.k) << what;
      }
      // Tiles: each expert's rows in order, tile_rows at a time, experts ascending.
      const int32_t rows = moe_tile_rows(config);
      int32_t tile = 0;
      for (int32_t e = 0; e < cs.experts; ++e) {
        for (int32_t r0 = begin[at(e)]; r0 < begin[at(e + 1)]; r0 += rows, ++tile) {
          ASSERT_LT(tile, static_cast<int32_t>(r.tile_expert.size())) << what;
          EXPECT_EQ(r.tile_expert[at(tile)], e) << what;
          EXPECT_EQ(r.tile_row[at(tile)], r0) << what;
        }
      }
      EXPECT_EQ(r.num_tiles, tile) << what;
    }
  }
}

TEST_F(MoePermuteTest, GatherThenCombineReturnsTheTokens) {
  std::mt19937_64 rng(44);
  const int32_t tokens = 97, k = 4, experts = 16, hidden = 136;
  const auto ids = random_experts(tokens, k, experts, rng);
  const DeviceBuffer d_ids = upload(ids);
  const Permuted r = device_permute(d_ids, tokens, k, experts, MoeTileConfig::kSmall);
  const auto x = random_halves(at(int64_t{tokens} * hidden), DType::kBF16, -3.0f, 3.0f, rng);
  const DeviceBuffer d_x = upload(x);
  DeviceBuffer d_rows = upload(std::vector<uint16_t>(at(int64_t{tokens} * k * hidden), 0xffff));
  MoeGatherParams g;
  g.x = d_x.data();
  g.ldx = hidden;
  g.token_of = r.d_token_of.as<int32_t>();
  g.rows = d_rows.data();
  g.num_rows = tokens * k;
  g.hidden = hidden;
  STRATA_ASSERT_OK(moe_gather(g, nullptr));
  // Weights that sum to 1 exactly in any order of addition: the sum is x again, bit for bit.
  std::vector<float> w;
  for (int32_t t = 0; t < tokens; ++t) w.insert(w.end(), {0.5f, 0.25f, 0.125f, 0.125f});
  const DeviceBuffer d_w = upload(w);
  for (const DType out_dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(out_dtype == DType::kF32 ? "out f32" : "out bf16");
    DeviceBuffer d_out = upload(std::vector<float>(at(int64_t{tokens} * hidden), NAN));
    MoeCombineParams c;
    c.y = d_rows.data();
    c.y_dtype = DType::kBF16;
    c.row_of = r.d_row_of.as<int32_t>();
    c.weights = d_w.as<float>();
    c.out = d_out.data();
    c.ldo = hidden;
    c.out_dtype = out_dtype;
    c.num_tokens = tokens;
    c.top_k = k;
    c.hidden = hidden;
    STRATA_ASSERT_OK(moe_combine(c, nullptr));
    sync_device();
    const auto f32 = download<float>(d_out, x.size());
    const auto b16 = download<uint16_t>(d_out, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float got = out_dtype == DType::kF32 ? f32[i] : bf16_to_f32(b16[i]);
      ASSERT_EQ(got, bf16_to_f32(x[i])) << "element " << i;
    }
  }
}

// --- The whole layer ---

struct LayerShape {
  int32_t experts, k, hidden, inter;
};

struct Layer {
  LayerShape s;
  std::vector<uint16_t> w_gate_up, w_down;  // [E, 2 inter, hidden], [E, hidden, inter]
  DeviceBuffer d_gate_up, d_down;
};

Layer make_layer(const LayerShape& s, std::mt19937_64& rng) {
  Layer l;
  l.s = s;
  l.w_gate_up = random_halves(at(int64_t{s.experts} * 2 * s.inter * s.hidden), DType::kBF16, -0.12f,
                              0.12f, rng);
  l.w_down =
      random_halves(at(int64_t{s.experts} * s.hidden * s.inter), DType::kBF16, -0.15f, 0.15f, rng);
  l.d_gate_up = upload(l.w_gate_up);
  l.d_down = upload(l.w_down);
  return l;
}

struct LayerRun {
  DType y_dtype = DType::kF32, out_dtype = DType::kF32;
  bool force = false;
  MoeTileConfig config = MoeTileConfig::kSmall;
};

// Routes logits [T, E] (softmax top-k, renormalized) and runs the experts: out [T, hidden] as
// raw 32-bit floats (F32) or bf16 bits widened to floats, plus the routing.
struct LayerOut {
  std::vector<float> out;
  Routed routed;
};

LayerOut run_layer(const Layer& l, const std::vector<uint16_t>& x, const std::vector<float>& logits,
                   int32_t tokens, const LayerRun& run) {
  const LayerShape& s = l.s;
  const DeviceBuffer d_x = upload(x);
  const DeviceBuffer d_logits = upload(logits);
  const size_t pairs = at(int64_t{tokens} * s.k);
  DeviceBuffer d_experts = upload(std::vector<int32_t>(pairs, 0));
  DeviceBuffer d_weights = upload(std::vector<float>(pairs, 0.0f));
  const size_t out_elems = at(int64_t{tokens} * s.hidden);
  DeviceBuffer d_out = upload(std::vector<float>(out_elems, NAN));
  const int64_t ws_bytes = moe_workspace_bytes(tokens, s.k, s.experts, s.hidden, s.inter);
  DeviceBuffer ws = DeviceBuffer::allocate(static_cast<size_t>(ws_bytes)).value();
  MoeRouteParams r;
  r.logits = d_logits.data();
  r.logits_dtype = DType::kF32;
  r.experts = d_experts.as<int32_t>();
  r.weights = d_weights.as<float>();
  r.num_tokens = tokens;
  r.num_experts = s.experts;
  r.top_k = s.k;
  r.norm_topk_prob = true;
  LayerOut o;
  Status st = moe_route(r, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  MoeExpertsParams p;
  p.x = d_x.data();
  p.experts = d_experts.as<int32_t>();
  p.weights = d_weights.as<float>();
  p.w_gate_up = l.d_gate_up.data();
  p.w_down = l.d_down.data();
  p.out = d_out.data();
  p.out_dtype = run.out_dtype;
  p.y_dtype = run.y_dtype;
  p.num_tokens = tokens;
  p.top_k = s.k;
  p.num_experts = s.experts;
  p.hidden = s.hidden;
  p.inter = s.inter;
  p.force_tile_config = run.force;
  p.tile_config = run.config;
  st = moe_experts_forward(p, ws.data(), ws_bytes, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  sync_device();
  if (run.out_dtype == DType::kF32) {
    o.out = download<float>(d_out, out_elems);
  } else {
    const auto bits = download<uint16_t>(d_out, out_elems);
    o.out.resize(out_elems);
    for (size_t i = 0; i < out_elems; ++i) o.out[i] = bf16_to_f32(bits[i]);
  }
  o.routed = Routed{download<int32_t>(d_experts, pairs), download<float>(d_weights, pairs)};
  return o;
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// The float64 reference of the experts for the device's routing, and each element's tolerance:
// gate and up are fp32 sums (error far below 1 % of an ulp of bf16 for the sums of |terms| these
// sizes give, covered by the 0.01 S terms) rounded to bf16 (2^-9 relative), so act moves by
// 2^-9 (1.1 |gate up| + |act|) before its own rounding (2^-9 |act|); the down projection's fp32
// sum adds 3e-5 of its sum of |terms|; y (BF16) and out (BF16) are rounded once more each. The
// bound is doubled. With silu_knocked_out the reference drops the SiLU (a broken fusion).
struct LayerRef {
  std::vector<double> out, tol;
};
LayerRef layer_reference(const Layer& l, const std::vector<uint16_t>& x, const Routed& routed,
                         int32_t tokens, const LayerRun& run, bool silu_knocked_out = false) {
  const LayerShape& s = l.s;
  const double u9 = std::ldexp(1.0, -9), u8 = std::ldexp(1.0, -8);
  LayerRef r;
  r.out.assign(at(int64_t{tokens} * s.hidden), 0.0);
  r.tol.assign(r.out.size(), 1e-7);
  std::vector<double> act(at(s.inter)), dact(at(s.inter));
  for (int32_t t = 0; t < tokens; ++t) {
    const uint16_t* xt = x.data() + int64_t{t} * s.hidden;
    for (int32_t j = 0; j < s.k; ++j) {
      const int32_t e = routed.experts[at(int64_t{t} * s.k + j)];
      const double w = routed.weights[at(int64_t{t} * s.k + j)];
      const uint16_t* wg = l.w_gate_up.data() + int64_t{e} * 2 * s.inter * s.hidden;
      const uint16_t* wd = l.w_down.data() + int64_t{e} * s.hidden * s.inter;
      for (int32_t i = 0; i < s.inter; ++i) {
        double g = 0, u = 0, sg = 0, su = 0;
        for (int32_t h = 0; h < s.hidden; ++h) {
          const double xv = bf16_to_f32(xt[h]);
          const double gw = xv * bf16_to_f32(wg[int64_t{i} * s.hidden + h]);
          const double uw = xv * bf16_to_f32(wg[int64_t{s.inter + i} * s.hidden + h]);
          g += gw;
          u += uw;
          sg += std::fabs(gw);
          su += std::fabs(uw);
        }
        act[at(i)] = silu_knocked_out ? g * u : silu(g) * u;
        dact[at(i)] = u9 * (1.1 * (std::fabs(g) + 0.01 * sg) * (std::fabs(u) + 0.01 * su) +
                            2.0 * std::fabs(act[at(i)]));
      }
      for (int32_t h = 0; h < s.hidden; ++h) {
        double y = 0, dy = 0, sy = 0;
        for (int32_t i = 0; i < s.inter; ++i) {
          const double wv = bf16_to_f32(wd[int64_t{h} * s.inter + i]);
          y += act[at(i)] * wv;
          dy += dact[at(i)] * std::fabs(wv);
          sy += std::fabs(act[at(i)] * wv);
        }
        dy += 3e-5 * sy + (run.y_dtype == DType::kBF16 ? u8 * std::fabs(y) : 0.0);
        const size_t o = at(int64_t{t} * s.hidden + h);
        r.out[o] += w * y;
        r.tol[o] += 2.0 * std::fabs(w) * dy;
      }
    }
  }
  if (run.out_dtype == DType::kBF16) {
    for (size_t i = 0; i < r.out.size(); ++i) r.tol[i] += 2.0 * u8 * std::fabs(r.out[i]);
  }
  return r;
}

// How many elements of got lie outside ref's tolerance.
int64_t count_outside(const std::vector<float>& got, const LayerRef& ref) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - ref.out[i]) <= ref.tol[i])) ++bad;
  }
  return bad;
}

class MoeLayerTest : public CudaTest {};

std::string name(DType d) { return d == DType::kF32 ? "f32" : "bf16"; }

// hidden 264 and inter 88 leave partial k steps and partial column tiles in every GEMM.
constexpr LayerShape kMixtralLike{8, 2, 264, 88};
constexpr LayerShape kQwenLike{64, 6, 136, 48};
// k of 1032 and 584: more k steps than either config has pipeline stages (8 x 64, 4 x 64), so the
// cp.async ring wraps in both products.
constexpr LayerShape kDeepK{4, 2, 1032, 584};

TEST_F(MoeLayerTest, MatchesFloat64Reference) {
  std::mt19937_64 rng(45);
  struct Case {
    LayerShape shape;
    std::vector<int32_t> tokens;
  };
  const Case cases[] = {{kMixtralLike, {1, 5, 300}}, {kQwenLike, {1, 5, 300}}, {kDeepK, {1, 37}}};
  for (const Case& cs : cases) {
    const LayerShape shape = cs.shape;
    const Layer l = make_layer(shape, rng);
    // 1 token leaves most experts without rows (6 of 8, 58 of 64).
    for (const int32_t tokens : cs.tokens) {
      const auto x = random_halves(at(int64_t{tokens} * shape.hidden), DType::kBF16, -1, 1, rng);
      const auto logits = grid_logits(at(int64_t{tokens} * shape.experts), rng);
      for (const DType y_dtype : {DType::kF32, DType::kBF16}) {
        for (const DType out_dtype : {DType::kF32, DType::kBF16}) {
          for (const MoeTileConfig config : {MoeTileConfig::kSmall, MoeTileConfig::kLarge}) {
            const LayerRun run{y_dtype, out_dtype, true, config};
            const std::string what = "E " + std::to_string(shape.experts) + " T " +
                                     std::to_string(tokens) + " y " + name(y_dtype) + " out " +
                                     name(out_dtype) +
                                     (config == MoeTileConfig::kSmall ? " small" : " large");
            const LayerOut got = run_layer(l, x, logits, tokens, run);
            const LayerRef ref = layer_reference(l, x, got.routed, tokens, run);
            EXPECT_EQ(count_outside(got.out, ref), 0) << what;
            if (y_dtype == DType::kF32 && out_dtype == DType::kF32) {
              // A fusion without the SiLU must fail the same check on most elements.
              const LayerRef broken = layer_reference(l, x, got.routed, tokens, run, true);
              EXPECT_GT(count_outside(got.out, broken), static_cast<int64_t>(got.out.size() / 2))
                  << what;
            }
          }
        }
      }
    }
  }
}

TEST_F(MoeLayerTest, TokenBitsDoNotDependOnTheBatchTheConfigOrTheRun) {
  std::mt19937_64 rng(46);
  for (const LayerShape shape : {kMixtralLike, kQwenLike, kDeepK}) {
    const Layer l = make_layer(shape, rng);
    const int32_t tokens = 300;
    const auto x = random_halves(at(int64_t{tokens} * shape.hidden), DType::kBF16, -1, 1, rng);
    const auto logits = grid_logits(at(int64_t{tokens} * shape.experts), rng);
    const LayerRun chosen{};  // the config the batch's size picks
    const LayerOut batch = run_layer(l, x, logits, tokens, chosen);
    const LayerOut again = run_layer(l, x, logits, tokens, chosen);
    EXPECT_EQ(0, std::memcmp(batch.out.data(), again.out.data(), batch.out.size() * 4));
    for (const MoeTileConfig config : {MoeTileConfig::kSmall, MoeTileConfig::kLarge}) {
      const LayerOut forced =
          run_layer(l, x, logits, tokens, LayerRun{DType::kF32, DType::kF32, true, config});
      EXPECT_EQ(0, std::memcmp(batch.out.data(), forced.out.data(), batch.out.size() * 4));
    }
    for (const int32_t t : {0, 1, 150, 299}) {
      const std::vector<uint16_t> xt(x.begin() + int64_t{t} * shape.hidden,
                                     x.begin() + int64_t{t + 1} * shape.hidden);
      const std::vector<float> lt(logits.begin() + int64_t{t} * shape.experts,
                                  logits.begin() + int64_t{t + 1} * shape.experts);
      const LayerOut alone = run_layer(l, xt, lt, 1, chosen);
      EXPECT_EQ(0, std::memcmp(alone.out.data(), batch.out.data() + int64_t{t} * shape.hidden,
                               alone.out.size() * 4))
          << "token " << t;
    }
  }
}

TEST_F(MoeLayerTest, ReplaysFromAGraphForANewRouting) {
  std::mt19937_64 rng(47);
  const LayerShape s = kQwenLike;
  const Layer l = make_layer(s, rng);
  const int32_t tokens = 16;
  const auto x = random_halves(at(int64_t{tokens} * s.hidden), DType::kBF16, -1, 1, rng);
  const auto logits_a = grid_logits(at(int64_t{tokens} * s.experts), rng);
  const auto logits_b = grid_logits(at(int64_t{tokens} * s.experts), rng);
  const LayerOut eager_b = run_layer(l, x, logits_b, tokens, LayerRun{});

  const DeviceBuffer d_x = upload(x);
  DeviceBuffer d_logits = upload(logits_a);
  const size_t pairs = at(int64_t{tokens} * s.k);
  DeviceBuffer d_experts = upload(std::vector<int32_t>(pairs, 0));
  DeviceBuffer d_weights = upload(std::vector<float>(pairs, 0.0f));
  DeviceBuffer d_out = upload(std::vector<float>(at(int64_t{tokens} * s.hidden), NAN));
  const int64_t ws_bytes = moe_workspace_bytes(tokens, s.k, s.experts, s.hidden, s.inter);
  DeviceBuffer ws = DeviceBuffer::allocate(static_cast<size_t>(ws_bytes)).value();
  MoeRouteParams r;
  r.logits = d_logits.data();
  r.experts = d_experts.as<int32_t>();
  r.weights = d_weights.as<float>();
  r.num_tokens = tokens;
  r.num_experts = s.experts;
  r.top_k = s.k;
  r.norm_topk_prob = true;
  MoeExpertsParams p;
  p.x = d_x.data();
  p.experts = d_experts.as<int32_t>();
  p.weights = d_weights.as<float>();
  p.w_gate_up = l.d_gate_up.data();
  p.w_down = l.d_down.data();
  p.out = d_out.data();
  p.num_tokens = tokens;
  p.top_k = s.k;
  p.num_experts = s.experts;
  p.hidden = s.hidden;
  p.inter = s.inter;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  // Once eagerly (the launchers' first-call attributes), then captured.
  STRATA_ASSERT_OK(moe_route(r, stream));
  STRATA_ASSERT_OK(moe_experts_forward(p, ws.data(), ws_bytes, stream));
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status route_status = moe_route(r, stream);
  const Status experts_status = moe_experts_forward(p, ws.data(), ws_bytes, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  STRATA_ASSERT_OK(route_status);
  STRATA_ASSERT_OK(experts_status);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  // A new routing written into the captured logits: the replay follows it.
  ASSERT_EQ(
      cudaMemcpy(d_logits.data(), logits_b.data(), logits_b.size() * 4, cudaMemcpyHostToDevice),
      cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const auto replayed = download<float>(d_out, eager_b.out.size());
  EXPECT_EQ(0, std::memcmp(replayed.data(), eager_b.out.data(), replayed.size() * 4));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_F(MoeLayerTest, AccumulateAddsTheSumToTheResidual) {
  std::mt19937_64 rng(48);
  const int32_t tokens = 7, k = 2, hidden = 64;
  const auto y = random_halves(at(int64_t{tokens} * k * hidden), DType::kBF16, -2, 2, rng);
  std::vector<int32_t> row_of(at(int64_t{tokens} * k));
  for (size_t i = 0; i < row_of.size(); ++i)
    row_of[i] = static_cast<int32_t>(row_of.size() - 1 - i);
  std::vector<float> w(row_of.size());
  std::uniform_real_distribution<float> wd(0.0f, 1.0f);
  for (float& v : w) v = wd(rng);
  std::vector<float> residual(at(int64_t{tokens} * hidden));
  for (float& v : residual) v = wd(rng) * 10.0f;
  const DeviceBuffer d_y = upload(y), d_row_of = upload(row_of), d_w = upload(w);
  DeviceBuffer d_out = upload(residual);
  MoeCombineParams c;
  c.y = d_y.data();
  c.y_dtype = DType::kBF16;
  c.row_of = d_row_of.as<int32_t>();
  c.weights = d_w.as<float>();
  c.out = d_out.data();
  c.ldo = hidden;
  c.accumulate = true;
  c.num_tokens = tokens;
  c.top_k = k;
  c.hidden = hidden;
  STRATA_ASSERT_OK(moe_combine(c, nullptr));
  sync_device();
  const auto got = download<float>(d_out, residual.size());
  for (int32_t t = 0; t < tokens; ++t) {
    for (int32_t i = 0; i < hidden; ++i) {
      float s = 0.0f;
      for (int32_t j = 0; j < k; ++j) {
        // volatile: one rounding per product, as the kernel's (no contraction into an FMA).
        const volatile float p =
            w[at(t * k + j)] * bf16_to_f32(y[at(int64_t{row_of[at(t * k + j)]} * hidden + i)]);
        s = j == 0 ? p : s + p;
      }
      const size_t o = at(int64_t{t} * hidden + i);
      ASSERT_EQ(got[o], residual[o] + s) << t << " " << i;
    }
  }
}

TEST_F(MoeLayerTest, RefusesArgumentsOutsideTheContract) {
  MoeRouteParams r;
  r.num_tokens = 1;
  r.num_experts = 8;
  r.top_k = 9;
  EXPECT_FALSE(moe_route(r, nullptr).ok());
  r.top_k = 2;
  r.topk_method = MoeTopk::kNoAuxTc;
  r.num_groups = 3;  // 8 % 3 != 0
  EXPECT_FALSE(moe_route(r, nullptr).ok());
  MoeGemmParams g;
  g.n = 10;
  g.k = 12;  // not a multiple of 8
  g.lda = g.ldw = g.ldd = 16;
  EXPECT_FALSE(moe_grouped_gemm(g, nullptr).ok());
  g.k = 16;
  g.n = 11;
  g.epilogue = MoeGemmEpilogue::kSiluAndMul;  // odd n
  EXPECT_FALSE(moe_grouped_gemm(g, nullptr).ok());
  MoeCombineParams c;
  c.num_tokens = 1;
  c.top_k = 1;
  c.hidden = 8;
  c.ldo = 8;
  c.out_dtype = DType::kBF16;
  c.accumulate = true;
  EXPECT_FALSE(moe_combine(c, nullptr).ok());
  MoeExpertsParams p;
  p.num_tokens = 4;
  p.top_k = 2;
  p.num_experts = 8;
  p.hidden = 64;
  p.inter = 32;
  EXPECT_FALSE(moe_experts_forward(p, nullptr, 0, nullptr).ok());
}

}  // namespace
}  // namespace strata::cuda::testing
