#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "core/check.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace strata::engine {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kPosInf = std::numeric_limits<double>::infinity();

// A token still in the running, with its weight inline so that selection and sorting read
// contiguous memory. Heavier first, then lower id: a total order, so the result of nth_element and
// sort does not depend on the standard library.
struct Candidate {
  double weight;
  int32_t id;
};
bool heavier(const Candidate& a, const Candidate& b) {
  return a.weight != b.weight ? a.weight > b.weight : a.id < b.id;
}

// Per-thread scratch, O(vocab), reused across steps and samplers so a Sampler stays small and a
// step allocates nothing once the buffers have grown. Not reentrant (nothing here recurses).
struct Workspace {
  std::vector<double> weights;        // [vocab]
  std::vector<double> heap;           // the k largest values so far, for top_k
  std::vector<Candidate> candidates;  // tokens still in the running, for top_p
  std::vector<int32_t> order;         // token ids, for the top logprobs
  std::vector<float> logprobs;        // [vocab]
};

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

double sanitize(float x) { return std::isnan(x) ? kNegInf : static_cast<double>(x); }

// x - max, where max is the largest value of the row. When max is +inf, the +inf tokens map to 0
// and all others to -inf: the limit of a softmax with one huge logit shared by several tokens.
double shift(double x, double max) {
  if (max == kPosInf) return x == kPosInf ? 0.0 : kNegInf;
  return x - max;
}

// Lowest id among the largest values; -1 when every value is -inf.
int32_t argmax(std::span<const double> values) {
  int32_t best = -1;
  double best_value = kNegInf;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] > best_value) {  // strict: ties keep the lower id
      best_value = values[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// argmax(sanitize(logits)) without the copy to double: float -> double is exact, so every
// comparison is the same. Two passes: the largest logit (NaN skipped), then the first id that
// holds it. -1 when no logit is above -inf. A greedy step of a 152K vocabulary spent ~100 us per
// sequence in the copy and the scalar scan (2 % of a 16-stream decode step).
int32_t argmax_logits(std::span<const float> logits) {
  const size_t n = logits.size();
  const float* x = logits.data();
  float max = -std::numeric_limits<float>::infinity();
  size_t i = 0;
#if defined(__SSE2__)
  // maxps(v, m) is v > m ? v : m, so a NaN in v leaves m as it was, as the strict > below does.
  __m128 m0 = _mm_set1_ps(max), m1 = m0, m2 = m0, m3 = m0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm_max_ps(_mm_loadu_ps(x + i), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), m1);
    m2 = _mm_max_ps(_mm_loadu_ps(x + i + 8), m2);
    m3 = _mm_max_ps(_mm_loadu_ps(x + i + 12), m3);
  }
  alignas(16) float lanes[16];
  _mm_store_ps(lanes, m0);
  _mm_store_ps(lanes + 4, m1);
  _mm_store_ps(lanes + 8, m2);
  _mm_store_ps(lanes + 12, m3);
  for (const float v : lanes) max = v > max ? v : max;
#endif
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  if (max == -std::numeric_limits<float>::infinity()) return -1;
  size_t j = 0;  // the first id equal to max (== also matches +0 against -0, as > never split them)
#if defined(__SSE2__)
  const __m128 target = _mm_set1_ps(max);
  for (; j + 4 <= n; j += 4) {
    const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + j), target));
    if (hit != 0) return static_cast<int32_t>(j) + __builtin_ctz(static_cast<unsigned>(hit));
  }
#endif
  for (; j < n; ++j) {
    if (x[j] == max) return static_cast<int32_t>(j);
  }
  return -1;  // unreachable: max is one of the logits
}

// values /= temperature; returns the largest (-inf when every value is -inf).
double apply_temperature(std::span<double> values, double temperature) {
  double max = kNegInf;
  for (double& v : values) {
    v /= temperature;
    max = std::max(max, v);
  }
  return max;
}

// Keeps tokens whose probability is >= min_p times the largest one, in log space:
// value - max >= log(min_p).
void apply_min_p(std::span<double> values, double max, double min_p) {
  const double log_min_p = std::log(min_p);
  for (double& v : values) {
    if (shift(v, max) < log_min_p) v = kNegInf;
  }
}

// Keeps the k largest values and any tied with the k-th (vLLM and HF compare against the k-th
// value). One pass with a min-heap of the k largest so far: O(vocab + r log k) for r heap
// replacements, typically few.
void apply_top_k(std::span<double> values, int32_t k, std::vector<double>& heap) {
  const auto k_size = static_cast<size_t>(k);
  const std::greater<> min_first;
  heap.clear();
  for (const double v : values) {
    if (v == kNegInf) continue;
    if (heap.size() < k_size) {
      heap.push_back(v);
      std::push_heap(heap.begin(), heap.end(), min_first);
    } else if (v > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), min_first);
      heap.back() = v;
      std::push_heap(heap.begin(), heap.end(), min_first);
    }
  }
  if (heap.size() < k_size) return;
  const double kth = heap.front();
  for (double& v : values) {
    if (v < kth) v = kNegInf;
  }
}

// values -> exp(value - max), in [0, 1] with 1 at the max and 0 for -inf. Only the survivors of
// min_p and top_k pay for an exp.
void to_weights(std::span<double> values, double max) {
  for (double& v : values) v = v == kNegInf ? 0.0 : std::exp(shift(v, max));
}

// The tokens of weight > 0, in id order; returns their total weight (summed in id order).
double collect_candidates(std::span<const double> weights, std::vector<Candidate>& out) {
  out.clear();
  double total = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] > 0.0) {
      out.push_back({weights[i], static_cast<int32_t>(i)});
      total += weights[i];
    }
  }
  return total;
}

// Keeps the shortest prefix of the tokens in heavier() order whose share of the total reaches
// top_p: a token stays iff the mass strictly before it is < top_p * total. The nucleus is usually
// small, so the order is built a chunk at a time (select the next chunk, sort it) until the prefix
// reaches top_p: O(vocab + n log n) for a nucleus of n tokens, not a sort of the vocabulary.
void apply_top_p(std::span<double> weights, double top_p, std::vector<Candidate>& cands) {
  const double threshold = top_p * collect_candidates(weights, cands);
  const size_t n = cands.size();
  double before = 0.0;
  size_t kept = 0;  // cands[0, kept) stay
  for (size_t chunk = 256; kept < n; chunk *= 4) {
    const auto first = cands.begin() + static_cast<std::ptrdiff_t>(kept);
    const auto last = cands.begin() + static_cast<std::ptrdiff_t>(std::min(n, kept + chunk));
    if (last != cands.end()) std::nth_element(first, last, cands.end(), heavier);
    std::sort(first, last, heavier);
    const size_t chunk_end = kept + static_cast<size_t>(last - first);
    while (kept < chunk_end && before < threshold) before += cands[kept++].weight;
    if (before >= threshold) break;
  }
  for (size_t i = kept; i < n; ++i) weights[static_cast<size_t>(cands[i].id)] = 0.0;
}

// Inverse CDF over token ids in ascending order: the first token whose cumulative weight exceeds
// u * total. Rounding can leave the walk short of the target; then the last token with weight
// wins. A token of weight 0 is never returned.
int32_t draw(std::span<const double> weights, double u) {
  double total = 0.0;
  for (const double w : weights) total += w;
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0) continue;
    cumulative += weights[i];
    last = static_cast<int32_t>(i);
    if (cumulative > target) return last;
  }
  return last;
}

// A uniform double in [0, 1) from the top 53 bits of one raw 64-bit output; unlike
// std::uniform_real_distribution, this is the same on every standard library.
double next_uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

uint64_t random_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
}

Status no_distribution() {
  return Status::InvalidArgument(
      "sampler: every logit is -inf or NaN, so there is no token to sample");
}

}  // namespace

// ---- TokenCounts --------------------------------------------------------------------------

TokenCounts::TokenCounts(int32_t vocab_size) : vocab_size_(vocab_size) {
  STRATA_CHECK(vocab_size > 0, "TokenCounts: vocab_size must be positive");
}

TokenCounts::Entry& TokenCounts::entry_for(int32_t token) {
  STRATA_CHECK(token >= 0 && token < vocab_size_, "TokenCounts: token id outside the vocabulary");
  const auto [it, inserted] = entry_idx_.try_emplace(token, static_cast<int32_t>(entries_.size()));
  if (inserted) entries_.push_back(Entry{.token = token});
  return entries_[static_cast<size_t>(it->second)];
}

void TokenCounts::add_prompt(std::span<const int32_t> tokens) {
  for (const int32_t token : tokens) entry_for(token).in_prompt = true;
}

void TokenCounts::add_output(int32_t token) {
  ++entry_for(token).output_count;
  ++num_output_tokens_;
}

bool TokenCounts::in_prompt(int32_t token) const {
  const auto it = entry_idx_.find(token);
  return it != entry_idx_.end() && entries_[static_cast<size_t>(it->second)].in_prompt;
}

int32_t TokenCounts::output_count(int32_t token) const {
  const auto it = entry_idx_.find(token);
  return it == entry_idx_.end() ? 0 : entries_[static_cast<size_t>(it->second)].output_count;
}

// ---- penalties and logprobs ---------------------------------------------------------------

void apply_penalties(std::span<double> logits, const TokenCounts& counts,
                     const SamplingParams& params) {
  STRATA_CHECK(logits.size() == static_cast<size_t>(counts.vocab_size()),
               "apply_penalties: logits and counts disagree on the vocabulary size");
  const double repetition = params.repetition_penalty;
  const double frequency = params.frequency_penalty;
  const double presence = params.presence_penalty;
  for (const TokenCounts::Entry& e : counts.entries()) {
    double& logit = logits[static_cast<size_t>(e.token)];
    if (repetition != 1.0) logit = logit > 0.0 ? logit / repetition : logit * repetition;
    if (e.output_count > 0) {
      logit -= frequency * e.output_count;
      logit -= presence;
    }
  }
}

TokenLogprobs compute_logprobs(std::span<const float> logits, int32_t token, int32_t top_k) {
  const auto vocab = static_cast<int32_t>(logits.size());
  STRATA_CHECK(token >= 0 && token < vocab, "compute_logprobs: token id outside the vocabulary");
  STRATA_CHECK(top_k >= 0, "compute_logprobs: top_k must be >= 0");
  std::vector<float>& lp = workspace().logprobs;
  lp.resize(logits.size());

  double max = kNegInf;
  for (const float x : logits) max = std::max(max, sanitize(x));
  if (max == kNegInf) {
    std::fill(lp.begin(), lp.end(), -std::numeric_limits<float>::infinity());
  } else {
    double sum = 0.0;
    for (const float x : logits) sum += std::exp(shift(sanitize(x), max));
    const double log_sum = std::log(sum);
    for (size_t i = 0; i < logits.size(); ++i) {
      lp[i] = static_cast<float>(shift(sanitize(logits[i]), max) - log_sum);
    }
  }

  TokenLogprobs out;
  out.token = token;
  out.logprob = lp[static_cast<size_t>(token)];
  const int32_t k = std::min(top_k, vocab);
  if (k == 0) return out;
  std::vector<int32_t>& order = workspace().order;
  order.resize(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return lp[a] != lp[b] ? lp[a] > lp[b] : a < b; });
  out.top_logprobs.reserve(static_cast<size_t>(k));
  for (int32_t i = 0; i < k; ++i) out.top_logprobs.emplace_back(order[i], lp[order[i]]);
  return out;
}

// ---- Sampler ------------------------------------------------------------------------------

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params),
      vocab_size_(vocab_size),
      rng_(params.seed.has_value() ? *params.seed : random_seed()) {
  STRATA_CHECK(params.validate(vocab_size).ok(), "Sampler: params must be validated first");
}

Result<int32_t> Sampler::compute_weights(std::span<const float> logits, const TokenCounts& counts,
                                         std::span<const uint64_t> allowed,
                                         std::vector<double>& weights) const {
  STRATA_CHECK(logits.size() == static_cast<size_t>(vocab_size_),
               "Sampler: logits must hold exactly vocab_size values");
  STRATA_CHECK(counts.vocab_size() == vocab_size_, "Sampler: counts of another vocabulary");
  STRATA_CHECK(allowed.empty() || allowed.size() * 64 >= logits.size(),
               "Sampler: the allowed-token mask is shorter than the vocabulary");
  weights.resize(logits.size());
  if (params_.greedy() && !params_.has_penalties() && allowed.empty()) {
    // The argmax of the logits read in place; `weights` is left as it was (no caller reads it
    // when greedy).
    const int32_t token = argmax_logits(logits);
    if (token < 0) return no_distribution();
    return token;
  }
  std::transform(logits.begin(), logits.end(), weights.begin(), sanitize);
  if (!allowed.empty()) {
    for (size_t i = 0; i < weights.size(); ++i) {
      if (((allowed[i / 64] >> (i % 64)) & 1) == 0) weights[i] = kNegInf;
    }
  }
  if (params_.has_penalties()) apply_penalties(weights, counts, params_);

  if (params_.greedy()) {
    const int32_t token = argmax(weights);
    if (token < 0) return no_distribution();
    return token;
  }
  const double max = apply_temperature(weights, params_.temperature);
  if (max == kNegInf) return no_distribution();
  Workspace& ws = workspace();
  if (params_.min_p > 0.0f) apply_min_p(weights, max, params_.min_p);
  if (params_.top_k > 0 && params_.top_k < vocab_size_) {
    apply_top_k(weights, params_.top_k, ws.heap);
  }
  to_weights(weights, max);
  if (params_.top_p < 1.0f) apply_top_p(weights, params_.top_p, ws.candidates);
  return -1;
}

Result<SampleResult> Sampler::sample(std::span<const float> logits, const TokenCounts& counts,
                                     std::span<const uint64_t> allowed) {
  std::vector<double>& weights = workspace().weights;
  Result<int32_t> greedy_token = compute_weights(logits, counts, allowed, weights);
  if (!greedy_token.ok()) return greedy_token.status();

  SampleResult result;
  result.token = *greedy_token >= 0 ? *greedy_token : draw(weights, next_uniform(rng_));
  STRATA_CHECK(result.token >= 0, "Sampler: the draw found no token of positive weight");
  if (params_.logprobs >= 0) {
    TokenLogprobs lp = compute_logprobs(logits, result.token, params_.logprobs);
    result.logprob = lp.logprob;
    result.top_logprobs = std::move(lp.top_logprobs);
  }
  return result;
}

Result<std::vector<double>> Sampler::probabilities(std::span<const float> logits,
                                                   const TokenCounts& counts,
                                                   std::span<const uint64_t> allowed) const {
  std::vector<double> weights;
  Result<int32_t> greedy_token = compute_weights(logits, counts, allowed, weights);
  if (!greedy_token.ok()) return greedy_token.status();
  if (*greedy_token >= 0) {
    std::fill(weights.begin(), weights.end(), 0.0);
    weights[static_cast<size_t>(*greedy_token)] = 1.0;
    return weights;
  }
  double total = 0.0;
  for (const double w : weights) total += w;
  for (double& w : weights) w /= total;
  return weights;
}

// ---- stop rule ----------------------------------------------------------------------------

bool is_stop_token(int32_t token, const SamplingParams& params,
                   std::span<const int32_t> eos_token_ids) {
  const auto contains = [token](std::span<const int32_t> ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  return contains(params.stop_token_ids) || (!params.ignore_eos && contains(eos_token_ids));
}

}  // namespace strata::engine
