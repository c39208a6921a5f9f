#include "model/moe_block.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <functional>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/linear.h"
#include "model/index_cast.h"

namespace strata::model {
namespace {

// Above this many rows per expert hit, each expert's kernels split over the pool instead.
constexpr int64_t kExpertParallelMaxRows = 32;

// DeepSeek's shared experts: one SwiGLU MLP over every token, added to out.
Status add_shared_experts(const ExpertWeights& w, const float* x, int64_t num_tokens,
                          int64_t hidden, int64_t inter, float* out, MoeScratch& s,
                          ThreadPool& pool) {
  s.shared_gate.resize(at(num_tokens * inter));
  s.shared_up.resize(at(num_tokens * inter));
  s.shared_out.resize(at(num_tokens * hidden));
  STRATA_RETURN_IF_ERROR(
      cpu::linear(x, w.gate_proj, TensorView{}, s.shared_gate.data(), num_tokens, pool));
  STRATA_RETURN_IF_ERROR(
      cpu::linear(x, w.up_proj, TensorView{}, s.shared_up.data(), num_tokens, pool));
  STRATA_RETURN_IF_ERROR(cpu::silu_and_mul(s.shared_gate.data(), s.shared_up.data(),
                                           s.shared_gate.data(), num_tokens * inter, pool));
  STRATA_RETURN_IF_ERROR(cpu::linear(s.shared_gate.data(), w.down_proj, TensorView{},
                                     s.shared_out.data(), num_tokens, pool));
  return cpu::add_inplace(out, s.shared_out.data(), num_tokens * hidden, pool);
}

// Softmax over p[0, n) in place.
void softmax(float* p, int64_t n) {
  const float max = *std::max_element(p, p + n);
  float sum = 0.0f;
  for (int64_t e = 0; e < n; ++e) {
    p[e] = std::exp(p[e] - max);
    sum += p[e];
  }
  for (int64_t e = 0; e < n; ++e) p[e] /= sum;
}

// The k largest of score[0, n) among those allowed(e) admits (ties to the lower id; k passes of
// argmax: k and n are small, 8 of 128), ascending by id. A NaN never wins, so a slot may stay -1.
template <class Allowed>
void top_k(const float* score, int64_t n, int64_t k, Allowed allowed, int32_t* experts) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      if (!allowed(e) || std::find(experts, experts + j, static_cast<int32_t>(e)) != experts + j)
        continue;
      if (best < 0 || score[e] > score[best]) best = static_cast<int32_t>(e);
    }
    experts[j] = best;
  }
  std::sort(experts, experts + k);
}

bool any_expert(int64_t /*e*/) { return true; }

// One token: softmax over p[0, n) in place, then the k largest (ties to the lower id) into
// experts/weights, ascending by id.
void route_one(float* p, int64_t n, int64_t k, bool renormalize, int32_t* experts, float* weights) {
  softmax(p, n);
  top_k(p, n, k, any_expert, experts);
  float top_sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) top_sum += p[experts[j]];
  for (int64_t j = 0; j < k; ++j)
    weights[j] = renormalize ? p[experts[j]] / top_sum : p[experts[j]];
}

// One token's DeepSeek routing from its router logits p[0, n) (overwritten with the scores):
// softmax (V2) or sigmoid (V3) scores; V3 chooses by score + bias and groups by the sum of their
// two best, V2's group_limited_greedy by their best; the topk_groups best groups (ties to the
// lower group) hold the candidates; the weights are the unbiased scores, / their sum (+ 1e-20)
// when norm_topk_prob, times routed_scaling_factor. A NaN score never wins a comparison, so a
// token always gets k distinct experts.
void route_deepseek_one(const MoeConfig& c, float* p, const float* bias, int32_t* experts,
                        float* weights) {
  const int64_t n = c.num_experts, k = c.num_experts_per_tok;
  if (c.scoring == MoeScoring::kSoftmax) {
    softmax(p, n);
  } else {
    for (int64_t e = 0; e < n; ++e) p[e] = 1.0f / (1.0f + std::exp(-p[e]));
  }
  std::vector<float> choice(p, p + n);
  if (bias != nullptr) {
    for (int64_t e = 0; e < n; ++e) choice[at(e)] += bias[e];
  }
  std::vector<bool> allowed(at(n), true);
  if (c.topk_method != MoeTopkMethod::kGreedy) {
    const int64_t groups = c.num_groups, per = n / groups;
    std::vector<float> group_score(at(groups));
    for (int64_t g = 0; g < groups; ++g) {
      const float* s = choice.data() + g * per;
      if (c.topk_method == MoeTopkMethod::kGroupLimitedGreedy) {
        group_score[at(g)] = *std::max_element(s, s + per);
      } else {
        std::vector<float> top(s, s + per);
        std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<>());
        group_score[at(g)] = top[0] + top[1];
      }
    }
    std::vector<int32_t> chosen(at(c.topk_groups));
    top_k(group_score.data(), groups, c.topk_groups, any_expert, chosen.data());
    std::fill(allowed.begin(), allowed.end(), false);
    for (const int32_t g : chosen) {
      if (g < 0) continue;
      std::fill_n(allowed.begin() + g * per, per, true);
    }
  }
  top_k(
      choice.data(), n, k, [&](int64_t e) { return static_cast<bool>(allowed[at(e)]); }, experts);
  // A NaN everywhere leaves top_k without a best: take the lowest ids not yet chosen instead.
  for (int64_t j = 0, next = 0; j < k; ++j) {
    if (experts[j] >= 0) continue;
    while (std::find(experts, experts + k, static_cast<int32_t>(next)) != experts + k) ++next;
    experts[j] = static_cast<int32_t>(next);
  }
  std::sort(experts, experts + k);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += p[experts[j]];
  const auto scale = static_cast<float>(c.routed_scaling_factor);
  for (int64_t j = 0; j < k; ++j) {
    const float w = c.norm_topk_prob ? p[experts[j]] / (sum + 1e-20f) : p[experts[j]];
    weights[j] = w * scale;
  }
}

// Counting sort of the (token, j) pairs by expert: expert_begin, row_of, token_of.
void group_by_expert(int64_t num_experts, int64_t num_tokens, int64_t k, MoeScratch& s) {
  s.expert_begin.assign(at(num_experts + 1), 0);
  for (int64_t i = 0; i < num_tokens * k; ++i) ++s.expert_begin[at(s.experts[at(i)] + 1)];
  for (int64_t e = 0; e < num_experts; ++e) s.expert_begin[at(e + 1)] += s.expert_begin[at(e)];
  std::vector<int64_t> next(s.expert_begin.begin(), s.expert_begin.end() - 1);
  s.row_of.resize(at(num_tokens * k));
  s.token_of.resize(at(num_tokens * k));
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = next[at(s.experts[at(t * k + j)])]++;
      s.row_of[at(t * k + j)] = row;
      s.token_of[at(row)] = t;
    }
  }
}

// One expert's SwiGLU MLP over its rows [begin, end) of s.rows into s.out.
Status run_expert(const ExpertWeights& w, int64_t begin, int64_t end, int64_t hidden, int64_t inter,
                  MoeScratch& s, ThreadPool& pool) {
  const int64_t m = end - begin;
  const float* x = s.rows.data() + begin * hidden;
  float* gate = s.gate.data() + begin * inter;
  float* up = s.up.data() + begin * inter;
  STRATA_RETURN_IF_ERROR(cpu::linear(x, w.gate_proj, TensorView{}, gate, m, pool));
  STRATA_RETURN_IF_ERROR(cpu::linear(x, w.up_proj, TensorView{}, up, m, pool));
  STRATA_RETURN_IF_ERROR(cpu::silu_and_mul(gate, up, gate, m * inter, pool));
  return cpu::linear(gate, w.down_proj, TensorView{}, s.out.data() + begin * hidden, m, pool);
}

// Experts with few rows each (decode) run whole on one thread each, claimed from a shared
// counter: no hand-off between an expert's four kernels, and the threads stream different
// experts' weights at once. Experts with many rows (prefill) split each kernel over the pool. A
// row's values are the same either way (linear() does not depend on the thread count).
Status run_experts(const MoeWeights& w, int64_t hidden, int64_t inter, MoeScratch& s,
                   ThreadPool& pool) {
  std::vector<int64_t> hit;
  for (int64_t e = 0; e + 1 < static_cast<int64_t>(s.expert_begin.size()); ++e) {
    if (s.expert_begin[at(e + 1)] > s.expert_begin[at(e)]) hit.push_back(e);
  }
  const int64_t num_rows = s.expert_begin.back();
  const auto num_hit = static_cast<int64_t>(hit.size());
  if (pool.num_threads() == 1 || num_hit < 2 || num_rows > kExpertParallelMaxRows * num_hit) {
    for (const int64_t e : hit) {
      STRATA_RETURN_IF_ERROR(run_expert(w.experts[at(e)], s.expert_begin[at(e)],
                                        s.expert_begin[at(e + 1)], hidden, inter, s, pool));
    }
    return Status::Ok();
  }
  std::atomic<int64_t> next{0};
  std::vector<Status> status(at(num_hit), Status::Ok());
  pool.parallel_for(
      std::min<int64_t>(pool.num_threads(), num_hit),
      [&](int64_t, int64_t) {
        ThreadPool one(1);  // no workers: this thread runs the expert's kernels itself
        for (int64_t i = next.fetch_add(1); i < num_hit; i = next.fetch_add(1)) {
          const int64_t e = hit[at(i)];
          status[at(i)] = run_expert(w.experts[at(e)], s.expert_begin[at(e)],
                                     s.expert_begin[at(e + 1)], hidden, inter, s, one);
        }
      },
      /*min_chunk=*/1);
  for (const Status& st : status) STRATA_RETURN_IF_ERROR(st);
  return Status::Ok();
}

}  // namespace

void route_tokens(const MoeConfig& config, float* logits, int64_t num_tokens, int32_t* experts,
                  float* weights, ThreadPool& pool, std::span<const float> score_bias) {
  const int64_t n = config.num_experts, k = config.num_experts_per_tok;
  const bool deepseek = config.scoring != MoeScoring::kSoftmax ||
                        config.topk_method != MoeTopkMethod::kGreedy ||
                        config.routed_scaling_factor != 1.0 || !score_bias.empty();
  const float* bias = score_bias.empty() ? nullptr : score_bias.data();
  pool.parallel_for(
      num_tokens,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          if (deepseek) {
            route_deepseek_one(config, logits + t * n, bias, experts + t * k, weights + t * k);
          } else {
            route_one(logits + t * n, n, k, config.norm_topk_prob, experts + t * k,
                      weights + t * k);
          }
        }
      },
      /*min_chunk=*/16);
}

Status moe_forward(const MoeConfig& config, const MoeWeights& w, const float* x, int64_t num_tokens,
                   float* out, MoeScratch& s, ThreadPool& pool) {
  const int64_t num_experts = config.num_experts, k = config.num_experts_per_tok;
  const int64_t inter = config.moe_intermediate_size;
  if (w.router.empty() || w.router.rank != 2 || w.router.dim(0) != num_experts ||
      w.experts.size() != at(num_experts) || k < 1 || k > num_experts) {
    return Status::InvalidArgument("moe_forward: the weights do not match the MoE config");
  }
  const int64_t hidden = w.router.dim(1);
  if (num_tokens == 0) return Status::Ok();
  s.logits.resize(at(num_tokens * num_experts));
  STRATA_RETURN_IF_ERROR(cpu::linear(x, w.router, TensorView{}, s.logits.data(), num_tokens, pool));
  s.experts.resize(at(num_tokens * k));
  s.weights.resize(at(num_tokens * k));
  if (config.score_correction_bias) {
    if (w.score_bias.empty() || w.score_bias.numel() != num_experts) {
      return Status::InvalidArgument("moe_forward: the router's correction bias is missing");
    }
    s.score_bias.resize(at(num_experts));
    for (int64_t e = 0; e < num_experts; ++e)
      s.score_bias[at(e)] = load_as_f32(w.score_bias.data, w.score_bias.dtype, e);
  } else {
    s.score_bias.clear();
  }
  route_tokens(config, s.logits.data(), num_tokens, s.experts.data(), s.weights.data(), pool,
               s.score_bias);
  group_by_expert(num_experts, num_tokens, k, s);
  const int64_t num_rows = num_tokens * k;
  s.rows.resize(at(num_rows * hidden));
  s.out.resize(at(num_rows * hidden));
  s.gate.resize(at(num_rows * inter));
  s.up.resize(at(num_rows * inter));
  pool.parallel_for(num_rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* src = x + s.token_of[at(r)] * hidden;
      std::copy(src, src + hidden, s.rows.data() + r * hidden);
    }
  });
  STRATA_RETURN_IF_ERROR(run_experts(w, hidden, inter, s, pool));
  // Each token's experts in ascending id: the same sum whatever else is in the batch.
  pool.parallel_for(num_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* dst = out + t * hidden;
      for (int64_t j = 0; j < k; ++j) {
        const float weight = s.weights[at(t * k + j)];
        const float* y = s.out.data() + s.row_of[at(t * k + j)] * hidden;
        if (j == 0) {
          for (int64_t i = 0; i < hidden; ++i) dst[i] = weight * y[i];
        } else {
          for (int64_t i = 0; i < hidden; ++i) dst[i] += weight * y[i];
        }
      }
    }
  });
  if (config.shared_intermediate_size > 0) {
    return add_shared_experts(w.shared, x, num_tokens, hidden, config.shared_intermediate_size, out,
                              s, pool);
  }
  return Status::Ok();
}

}  // namespace strata::model
