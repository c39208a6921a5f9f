// GPU sampling against a host reference of vLLM V1's order (temperature, min-p, top-k, top-p; ties
// at a threshold kept): greedy rows equal the host argmax (ties, NaN, -inf, +inf, vocab 1, 7 and
// 151936); sampled tokens always lie in the reference's kept set and their frequencies over 2000
// seeds match its renormalised distribution (chi-square); the token depends only on (logits,
// parameters, seed), never on the run, the row index or the batch; logprobs equal the host
// log_softmax. Large vocabularies run both the shared-memory path and the fallback over the row.
// A timing printout (not an assertion) closes the file.

#include "kernels/cuda/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/event.h"
#include "kernels/cuda/random_fill.h"
#include "kernels/cuda/stream.h"

namespace strata::cuda::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct RowParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
};

bool is_greedy(const RowParams& p) { return !(p.temperature >= 1e-5f) || p.top_k == 1; }

// A batch of rows on the host, uploaded as SampleParams arrays.
struct Batch {
  int32_t vocab = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k;
  std::vector<uint64_t> seeds;

  explicit Batch(int32_t v) : vocab(v) {}
  int32_t rows() const { return static_cast<int32_t>(seeds.size()); }
  void add(const std::vector<float>& row, const RowParams& p, uint64_t seed) {
    logits.insert(logits.end(), row.begin(), row.end());
    temperature.push_back(p.temperature);
    top_k.push_back(p.top_k);
    top_p.push_back(p.top_p);
    min_p.push_back(p.min_p);
    seeds.push_back(seed);
  }
  // n copies of one row, seeds seed0, seed0 + 1, ...
  void replicate(const std::vector<float>& row, const RowParams& p, int32_t n, uint64_t seed0) {
    logits.reserve(logits.size() + static_cast<size_t>(n) * row.size());
    for (int32_t i = 0; i < n; ++i) add(row, p, seed0 + static_cast<uint64_t>(i));
  }
};

struct Drawn {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

Drawn run_sample(const Batch& b) {
  DeviceBuffer d_logits = upload(b.logits);
  DeviceBuffer d_t = upload(b.temperature);
  DeviceBuffer d_k = upload(b.top_k);
  DeviceBuffer d_p = upload(b.top_p);
  DeviceBuffer d_m = upload(b.min_p);
  DeviceBuffer d_seeds = upload(b.seeds);
  auto d_tokens = DeviceBuffer::allocate(sizeof(int32_t) * b.rows());
  auto d_lp = DeviceBuffer::allocate(sizeof(float) * b.rows());
  EXPECT_TRUE(d_tokens.ok() && d_lp.ok());
  SampleParams p;
  p.logits = d_logits.as<float>();
  p.num_rows = b.rows();
  p.vocab = b.vocab;
  p.temperature = d_t.as<float>();
  p.top_k = d_k.as<int32_t>();
  p.top_p = d_p.as<float>();
  p.min_p = d_m.as<float>();
  p.seeds = d_seeds.as<uint64_t>();
  p.out_tokens = d_tokens->as<int32_t>();
  p.out_logprobs = d_lp->as<float>();
  const Status s = sample(p, nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  sync_device();
  return {download<int32_t>(*d_tokens, b.rows()), download<float>(*d_lp, b.rows())};
}

double shift(double a, double b) { return a == b ? 0.0 : a - b; }

// Lowest id among the largest values (NaN = -inf); -1 when all are -inf.
int32_t host_argmax(const std::vector<float>& row) {
  int32_t best = -1;
  double best_v = -kInf;
  for (size_t i = 0; i < row.size(); ++i) {
    const double v = std::isnan(row[i]) ? -kInf : row[i];
    if (v > best_v) {
      best_v = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// log_softmax(row)[token] in double (NaN = -inf; +inf tokens share the mass).
double host_logprob(const std::vector<float>& row, int32_t token) {
  double max = -kInf;
  for (const float x : row) max = std::max(max, std::isnan(x) ? -kInf : static_cast<double>(x));
  double sum = 0.0;
  for (const float x : row) sum += std::exp(shift(std::isnan(x) ? -kInf : x, max));
  const float xt = row[static_cast<size_t>(token)];
  return shift(std::isnan(xt) ? -kInf : xt, max) - std::log(sum);
}

// The distribution the GPU draws from, per vLLM V1: y = x / T; min-p (y - max >= log min_p);
// top-k (>= the k-th largest); top-p (down to the first value whose mass reaches p of the
// renormalised total); every token tied with a threshold kept. Excluded tokens are exactly 0.
std::vector<double> reference_probs(const std::vector<float>& row, const RowParams& p) {
  const size_t n = row.size();
  std::vector<double> out(n, 0.0);
  if (is_greedy(p)) {
    out[static_cast<size_t>(host_argmax(row))] = 1.0;
    return out;
  }
  std::vector<double> y(n);
  double max = -kInf;
  for (size_t i = 0; i < n; ++i) {
    y[i] = (std::isnan(row[i]) ? -kInf : static_cast<double>(row[i])) / p.temperature;
    max = std::max(max, y[i]);
  }
  if (p.min_p > 0.0f) {
    for (double& v : y) {
      if (shift(v, max) < std::log(static_cast<double>(p.min_p))) v = -kInf;
    }
  }
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::vector<double> finite;
    for (const double v : y) {
      if (v != -kInf) finite.push_back(v);
    }
    if (finite.size() >= static_cast<size_t>(p.top_k)) {
      std::nth_element(finite.begin(), finite.begin() + (p.top_k - 1), finite.end(),
                       std::greater<>());
      const double kth = finite[static_cast<size_t>(p.top_k - 1)];
      for (double& v : y) {
        if (v < kth) v = -kInf;
      }
    }
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = y[i] == -kInf ? 0.0 : std::exp(shift(y[i], max));
    total += out[i];
  }
  if (p.top_p < 1.0f) {
    std::vector<int32_t> order;
    for (size_t i = 0; i < n; ++i) {
      if (out[i] > 0.0) order.push_back(static_cast<int32_t>(i));
    }
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return out[a] > out[b]; });
    double cum = 0.0;
    double cut = 0.0;
    for (const int32_t id : order) {
      cum += out[id];
      if (cum >= p.top_p * total) {
        cut = out[id];
        break;
      }
    }
    total = 0.0;
    for (double& w : out) {
      if (w < cut) w = 0.0;
      total += w;
    }
  }
  for (double& w : out) w /= total;
  return out;
}

// Every token has positive reference probability, and the counts match the reference: tokens in
// decreasing probability are grouped until each group expects >= 10 draws; chi-square over the
// groups must stay below df + 6 sqrt(2 df) + 6 (the tests are seeded, so a pass is stable).
void expect_distribution(const std::vector<int32_t>& tokens, const std::vector<double>& probs) {
  const auto n = static_cast<double>(tokens.size());
  std::vector<int64_t> counts(probs.size(), 0);
  int64_t outside = 0;
  for (const int32_t t : tokens) {
    if (t < 0 || static_cast<size_t>(t) >= probs.size() || probs[static_cast<size_t>(t)] <= 0.0) {
      ++outside;
      continue;
    }
    ++counts[static_cast<size_t>(t)];
  }
  EXPECT_EQ(outside, 0) << "draws outside the kept set";
  std::vector<int32_t> order(probs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  double chi2 = 0.0, group_expected = 0.0, group_observed = 0.0;
  int32_t groups = 0;
  for (const int32_t id : order) {
    if (probs[static_cast<size_t>(id)] <= 0.0) break;
    group_expected += n * probs[static_cast<size_t>(id)];
    group_observed += static_cast<double>(counts[static_cast<size_t>(id)]);
    if (group_expected >= 10.0) {
      chi2 +=
          (group_observed - group_expected) * (group_observed - group_expected) / group_expected;
      ++groups;
      group_expected = group_observed = 0.0;
    }
  }
  if (group_expected > 0.0) {  // the tail joins the last group's test as one more term
    chi2 += (group_observed - group_expected) * (group_observed - group_expected) /
            std::max(group_expected, 1.0);
    ++groups;
  }
  const double df = std::max(1, groups - 1);
  EXPECT_LT(chi2, df + 6.0 * std::sqrt(2.0 * df) + 6.0) << groups << " groups";
}

std::vector<float> uniform_row(int32_t vocab, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (float& x : row) x = dist(rng);
  return row;
}

// 2000 draws of one row (seeds 0..1999) in one launch, checked against the reference.
void check_draws(const std::vector<float>& row, const RowParams& p, int32_t draws = 2000) {
  SCOPED_TRACE("T " + std::to_string(p.temperature) + " k " + std::to_string(p.top_k) + " p " +
               std::to_string(p.top_p) + " min_p " + std::to_string(p.min_p) + " vocab " +
               std::to_string(row.size()));
  Batch b(static_cast<int32_t>(row.size()));
  b.replicate(row, p, draws, 0);
  const Drawn d = run_sample(b);
  expect_distribution(d.tokens, reference_probs(row, p));
}

class SamplingTest : public CudaTest {};

TEST_F(SamplingTest, GreedyEqualsHostArgmax) {
  std::mt19937_64 rng(1);
  for (const int32_t vocab : {1, 7, 151936}) {
    Batch b(vocab);
    std::vector<std::vector<float>> rows;
    for (int32_t r = 0; r < 12; ++r) {
      std::vector<float> row = uniform_row(vocab, -8.0f, 8.0f, rng);
      std::uniform_int_distribution<int32_t> pos(0, vocab - 1);
      if (r % 4 == 1) {  // a tie at the max: the lower id wins
        const float top = 9.0f;
        const int32_t i = pos(rng), j = pos(rng);
        row[static_cast<size_t>(i)] = top;
        row[static_cast<size_t>(j)] = top;
      }
      if (r % 4 == 2) {  // NaN and -inf never win
        for (int32_t n = 0; n < 1 + vocab / 3; ++n) row[static_cast<size_t>(pos(rng))] = kNaN;
        row[static_cast<size_t>(pos(rng))] = -kInf;
      }
      if (r == 3) std::fill(row.begin(), row.end(), -kInf);  // no distribution: -1
      if (r == 7) std::fill(row.begin(), row.end(), kNaN);
      if (r == 11 && vocab > 3) {  // +inf: the lowest +inf id
        row[2] = kInf;
        row[static_cast<size_t>(vocab - 1)] = kInf;
      }
      RowParams p;
      p.temperature = r % 2 == 0 ? 0.0f : 1e-6f;
      p.top_k = r % 3 == 0 ? 5 : 0;
      p.top_p = 0.5f;
      b.add(row, p, static_cast<uint64_t>(r));
      rows.push_back(std::move(row));
    }
    const Drawn d = run_sample(b);
    for (int32_t r = 0; r < b.rows(); ++r) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " row " + std::to_string(r));
      const int32_t want = host_argmax(rows[static_cast<size_t>(r)]);
      EXPECT_EQ(d.tokens[static_cast<size_t>(r)], want);
      if (want < 0) {
        EXPECT_EQ(d.logprobs[static_cast<size_t>(r)], -kInf);
      } else {
        const double ref = host_logprob(rows[static_cast<size_t>(r)], want);
        EXPECT_NEAR(d.logprobs[static_cast<size_t>(r)], ref, 1e-5 * std::abs(ref) + 1e-6);
      }
    }
  }
}

TEST_F(SamplingTest, NullTemperatureMeansGreedyForEveryRow) {
  std::mt19937_64 rng(2);
  const int32_t vocab = 1000, rows = 5;
  std::vector<float> logits;
  for (int32_t r = 0; r < rows; ++r) {
    const auto row = uniform_row(vocab, -3.0f, 3.0f, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  DeviceBuffer d_logits = upload(logits);
  auto d_tokens = DeviceBuffer::allocate(sizeof(int32_t) * rows);
  ASSERT_TRUE(d_tokens.ok());
  SampleParams p;
  p.logits = d_logits.as<float>();
  p.num_rows = rows;
  p.vocab = vocab;
  p.out_tokens = d_tokens->as<int32_t>();
  STRATA_ASSERT_OK(sample(p, nullptr));
  const auto got = download<int32_t>(*d_tokens, rows);
  for (int32_t r = 0; r < rows; ++r) {
    const std::vector<float> row(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    EXPECT_EQ(got[static_cast<size_t>(r)], host_argmax(row));
  }
}

TEST_F(SamplingTest, TopK1IsGreedy) {
  std::mt19937_64 rng(3);
  const auto row = uniform_row(50000, -2.0f, 2.0f, rng);
  Batch b(50000);
  b.replicate(row, RowParams{1.5f, 1, 0.9f, 0.0f}, 64, 100);
  const Drawn d = run_sample(b);
  for (const int32_t t : d.tokens) EXPECT_EQ(t, host_argmax(row));
}

TEST_F(SamplingTest, TemperatureOnlyMatchesSoftmax) {
  std::mt19937_64 rng(4);
  const auto row = uniform_row(32, -3.0f, 3.0f, rng);
  check_draws(row, RowParams{1.0f, 0, 1.0f, 0.0f});
  check_draws(row, RowParams{0.5f, 0, 1.0f, 0.0f});
  check_draws(row, RowParams{2.0f, 0, 1.0f, 0.0f});
}

TEST_F(SamplingTest, TopKDrawsStayInTopKAndMatchRenormalisedSoftmax) {
  std::mt19937_64 rng(5);
  const auto row = uniform_row(32, -3.0f, 3.0f, rng);
  check_draws(row, RowParams{1.0f, 5, 1.0f, 0.0f});
  check_draws(row, RowParams{0.7f, 2, 1.0f, 0.0f});
  check_draws(row, RowParams{1.0f, 31, 1.0f, 0.0f});
  check_draws(row, RowParams{1.0f, 32, 1.0f, 0.0f});  // = vocab: off
}

TEST_F(SamplingTest, TopPDrawsStayInNucleusAndMatch) {
  std::mt19937_64 rng(6);
  const auto row = uniform_row(32, -3.0f, 3.0f, rng);
  check_draws(row, RowParams{1.0f, 0, 0.9f, 0.0f});
  check_draws(row, RowParams{1.0f, 0, 0.5f, 0.0f});
  check_draws(row, RowParams{1.3f, 0, 0.05f, 0.0f});  // smaller than the top token: greedy-like
}

TEST_F(SamplingTest, MinPDrawsStayAboveMinPAndMatch) {
  std::mt19937_64 rng(7);
  const auto row = uniform_row(32, -3.0f, 3.0f, rng);
  check_draws(row, RowParams{1.0f, 0, 1.0f, 0.1f});
  check_draws(row, RowParams{0.8f, 0, 1.0f, 0.3f});
}

TEST_F(SamplingTest, CombinedFollowVllmOrder) {
  std::mt19937_64 rng(8);
  const auto row = uniform_row(32, -3.0f, 3.0f, rng);
  check_draws(row, RowParams{0.7f, 10, 0.8f, 0.05f});
  check_draws(row, RowParams{1.2f, 8, 0.6f, 0.0f});
  check_draws(row, RowParams{1.0f, 20, 0.9f, 0.2f});
}

TEST_F(SamplingTest, TiesAtThresholdsAreAllKept) {
  // Four tokens tied at the 3rd largest value: top-k=3 keeps all of them, as does a top-p whose
  // boundary falls on the tied value.
  std::vector<float> row = {0.0f, 2.0f, 1.0f, 1.0f, -1.0f, 1.0f, 1.0f, 3.0f};
  check_draws(row, RowParams{1.0f, 3, 1.0f, 0.0f});
  check_draws(row, RowParams{1.0f, 0, 0.75f, 0.0f});
}

TEST_F(SamplingTest, NanAndInfLogits) {
  // NaN and -inf are never drawn; +inf tokens share all the probability.
  std::vector<float> row = {1.0f, kNaN, 3.0f, -kInf, 2.0f, kNaN, 0.5f};
  check_draws(row, RowParams{1.0f, 0, 1.0f, 0.0f});
  check_draws(row, RowParams{1.0f, 3, 0.9f, 0.0f});
  std::vector<float> inf_row = {1.0f, kInf, 3.0f, kInf, kNaN};
  Batch b(5);
  b.replicate(inf_row, RowParams{1.0f, 0, 0.9f, 0.0f}, 1000, 0);
  const Drawn d = run_sample(b);
  int32_t ones = 0;
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    ASSERT_TRUE(d.tokens[i] == 1 || d.tokens[i] == 3) << d.tokens[i];
    ones += d.tokens[i] == 1;
    EXPECT_NEAR(d.logprobs[i], -std::log(2.0), 1e-6);
  }
  EXPECT_GT(ones, 400);
  EXPECT_LT(ones, 600);
  // Every logit -inf or NaN in a sampled row: -1.
  Batch none(4);
  none.add({-kInf, kNaN, -kInf, kNaN}, RowParams{}, 1);
  const Drawn dn = run_sample(none);
  EXPECT_EQ(dn.tokens[0], -1);
  EXPECT_EQ(dn.logprobs[0], -kInf);
}

TEST_F(SamplingTest, VocabOneAndSeven) {
  check_draws({0.25f}, RowParams{1.0f, 0, 0.9f, 0.1f}, 200);
  std::mt19937_64 rng(9);
  const auto row = uniform_row(7, -2.0f, 2.0f, rng);
  check_draws(row, RowParams{1.0f, 0, 1.0f, 0.0f});
  check_draws(row, RowParams{1.0f, 3, 0.95f, 0.0f});
}

// Large rows: "peaked" logits (uniform over 80 nats) keep the survivors' bracket within the
// shared-memory candidates; "flat" ones (over 6 nats) and a top-k of 7000 take the fallback over
// the row. 1024 draws each.
TEST_F(SamplingTest, LargeVocabularyBothPaths) {
  std::mt19937_64 rng(10);
  const int32_t vocab = 151936;
  const auto peaked = uniform_row(vocab, -40.0f, 40.0f, rng);
  const auto flat = uniform_row(vocab, -3.0f, 3.0f, rng);
  check_draws(peaked, RowParams{1.0f, 50, 1.0f, 0.0f}, 1024);
  check_draws(peaked, RowParams{1.0f, 0, 0.9f, 0.0f}, 1024);
  check_draws(peaked, RowParams{0.8f, 1000, 0.5f, 0.01f}, 1024);
  check_draws(peaked, RowParams{1.0f, 0, 1.0f, 0.1f}, 1024);
  check_draws(peaked, RowParams{1.0f, 0, 1.0f, 0.0f}, 1024);
  check_draws(flat, RowParams{1.0f, 0, 0.9f, 0.0f}, 1024);
  check_draws(flat, RowParams{1.0f, 7000, 1.0f, 0.0f}, 1024);
  check_draws(flat, RowParams{1.0f, 7000, 0.3f, 0.0f}, 1024);
  // Every logit within 1/8 nat: one histogram bin holds the whole row.
  const auto narrow = uniform_row(vocab, 0.0f, 0.1f, rng);
  check_draws(narrow, RowParams{1.0f, 0, 0.5f, 0.0f}, 1024);
  check_draws(narrow, RowParams{1.0f, 5000, 1.0f, 0.0f}, 1024);
  check_draws(narrow, RowParams{1.0f, 20000, 0.3f, 0.0f}, 1024);
}

TEST_F(SamplingTest, TokenDependsOnlyOnSeedAndLogits) {
  std::mt19937_64 rng(11);
  const int32_t vocab = 3000;
  const RowParams configs[] = {{0.0f, 0, 1.0f, 0.0f},  {1.0f, 0, 1.0f, 0.0f},
                               {0.7f, 40, 1.0f, 0.0f}, {1.0f, 0, 0.9f, 0.0f},
                               {1.0f, 0, 1.0f, 0.1f},  {0.9f, 100, 0.8f, 0.02f}};
  std::vector<std::vector<float>> rows;
  std::vector<RowParams> params;
  std::vector<uint64_t> seeds;
  Batch forward(vocab);
  for (int32_t r = 0; r < 48; ++r) {
    rows.push_back(uniform_row(vocab, -10.0f, 10.0f, rng));
    params.push_back(configs[r % 6]);
    seeds.push_back(rng());
    forward.add(rows.back(), params.back(), seeds.back());
  }
  const Drawn a = run_sample(forward);
  const Drawn again = run_sample(forward);
  EXPECT_EQ(a.tokens, again.tokens);
  EXPECT_EQ(a.logprobs, again.logprobs);
  Batch reversed(vocab);
  for (int32_t r = 47; r >= 0; --r) reversed.add(rows[r], params[r], seeds[r]);
  const Drawn rev = run_sample(reversed);
  for (int32_t r = 0; r < 48; ++r) {
    EXPECT_EQ(rev.tokens[static_cast<size_t>(47 - r)], a.tokens[static_cast<size_t>(r)]) << r;
  }
  for (int32_t r = 0; r < 6; ++r) {
    Batch alone(vocab);
    alone.add(rows[r], params[r], seeds[r]);
    EXPECT_EQ(run_sample(alone).tokens[0], a.tokens[static_cast<size_t>(r)]) << r;
  }
  // Raw logprobs of the chosen tokens.
  for (int32_t r = 0; r < 48; ++r) {
    const int32_t t = a.tokens[static_cast<size_t>(r)];
    ASSERT_GE(t, 0);
    const double ref = host_logprob(rows[static_cast<size_t>(r)], t);
    EXPECT_NEAR(a.logprobs[static_cast<size_t>(r)], ref, 1e-5 * std::abs(ref) + 1e-6) << r;
  }
  // A different seed changes some draws.
  Batch reseeded(vocab);
  for (int32_t r = 0; r < 48; ++r) reseeded.add(rows[r], params[r], seeds[r] + 1);
  const Drawn b = run_sample(reseeded);
  int32_t differ = 0;
  for (int32_t r = 0; r < 48; ++r) differ += b.tokens[r] != a.tokens[r];
  EXPECT_GT(differ, 0);
}

// Structured outputs: masked rows draw only allowed tokens (greedy: the best allowed one; sampled:
// never outside the mask, over many seeds), unmasked rows in the same batch are untouched, and a
// vocabulary that is not a multiple of 64 keeps the last word's tail.
TEST_F(SamplingTest, MaskedRowsDrawOnlyAllowedTokensAndOtherRowsAreUntouched) {
  constexpr int32_t kVocab = 1000;  // 16 words, the last one 40 bits
  std::mt19937_64 rng(11);
  const std::vector<float> row = uniform_row(kVocab, -5.0f, 5.0f, rng);
  const int32_t best = host_argmax(row);
  // Allowed: every 7th id but the argmax, plus the last id.
  std::vector<uint64_t> mask(16, 0);
  std::vector<bool> allowed(kVocab, false);
  for (int32_t id = 0; id < kVocab; ++id) {
    if ((id % 7 == 0 && id != best) || id == kVocab - 1) {
      allowed[static_cast<size_t>(id)] = true;
      mask[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
    }
  }
  int32_t best_allowed = -1;
  for (int32_t id = 0; id < kVocab; ++id) {
    if (allowed[static_cast<size_t>(id)] &&
        (best_allowed < 0 || row[static_cast<size_t>(id)] > row[static_cast<size_t>(best_allowed)])) {
      best_allowed = id;
    }
  }
  Batch b(kVocab);
  b.add(row, RowParams{.temperature = 0.0f}, 1);  // 0: masked, greedy
  b.add(row, RowParams{.temperature = 0.0f}, 2);  // 1: unmasked, greedy
  b.replicate(row, RowParams{.temperature = 1.5f, .top_k = 50}, 200, 100);  // 2..201: masked
  std::vector<int32_t> mask_row(static_cast<size_t>(b.rows()), 0);
  mask_row[1] = -1;
  DeviceBuffer d_logits = upload(b.logits);
  DeviceBuffer d_rows = upload(mask_row);
  DeviceBuffer d_masks = upload(mask);
  TokenMaskParams m;
  m.logits = d_logits.as<float>();
  m.num_rows = b.rows();
  m.vocab = kVocab;
  m.mask_row = d_rows.as<int32_t>();
  m.masks = d_masks.as<uint64_t>();
  m.mask_words = 16;
  ASSERT_TRUE(apply_token_masks(m, nullptr).ok());
  sync_device();
  Batch masked(kVocab);
  masked.logits = download<float>(d_logits, static_cast<size_t>(b.rows()) * kVocab);
  masked.temperature = b.temperature;
  masked.top_k = b.top_k;
  masked.top_p = b.top_p;
  masked.min_p = b.min_p;
  masked.seeds = b.seeds;
  for (int32_t id = 0; id < kVocab; ++id) {
    const float got = masked.logits[static_cast<size_t>(id)];
    if (allowed[static_cast<size_t>(id)]) {
      EXPECT_EQ(got, row[static_cast<size_t>(id)]) << id;
    } else {
      EXPECT_EQ(got, -kInf) << id;
    }
    EXPECT_EQ(masked.logits[static_cast<size_t>(kVocab + id)], row[static_cast<size_t>(id)])
        << "an unmasked row changed at " << id;
  }
  const Drawn d = run_sample(masked);
  EXPECT_EQ(d.tokens[0], best_allowed);
  EXPECT_EQ(d.tokens[1], best);
  std::set<int32_t> seen;
  for (int32_t r = 2; r < b.rows(); ++r) {
    ASSERT_TRUE(allowed[static_cast<size_t>(d.tokens[static_cast<size_t>(r)])])
        << "row " << r << " drew " << d.tokens[static_cast<size_t>(r)];
    seen.insert(d.tokens[static_cast<size_t>(r)]);
  }
  EXPECT_GT(seen.size(), 5u) << "sampled, not one token";
  m.mask_words = 15;  // shorter than the vocabulary
  EXPECT_EQ(apply_token_masks(m, nullptr).code(), StatusCode::kInvalidArgument);
  m.mask_words = 16;
  m.masks = nullptr;
  EXPECT_EQ(apply_token_masks(m, nullptr).code(), StatusCode::kInvalidArgument);
}

// The engine's structured outputs: the step is launched before its masks exist; the masking
// waits (wait_host_signal) for the host to write them into pinned memory, where it reads them.
// The masks written after the launch are the ones applied, and a stale signal value does not let
// the launch through.
TEST_F(SamplingTest, MaskingWaitsForMasksTheHostWritesAfterTheLaunch) {
  constexpr int32_t kVocab = 300;  // 5 words
  constexpr int64_t kWords = 5;
  std::mt19937_64 rng(5);
  const std::vector<float> row = uniform_row(kVocab, -5.0f, 5.0f, rng);
  std::vector<float> rows = row;
  rows.insert(rows.end(), row.begin(), row.end());
  DeviceBuffer d_logits = upload(rows);
  DeviceBuffer d_rows = upload(std::vector<int32_t>{1, 0});  // row 0 reads mask 1, row 1 mask 0
  void* pinned_masks = nullptr;
  void* pinned_signal = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned_masks, 2 * kWords * 8), cudaSuccess);
  const PinnedArray<uint64_t> masks_owner(static_cast<uint64_t*>(pinned_masks));
  ASSERT_EQ(cudaMallocHost(&pinned_signal, 8), cudaSuccess);
  const PinnedArray<uint32_t> signal_owner(static_cast<uint32_t*>(pinned_signal));
  uint64_t* masks = masks_owner.get();
  uint32_t* signal = signal_owner.get();
  std::fill(masks, masks + 2 * kWords, ~uint64_t{0});  // all allowed until the host says otherwise
  signal[0] = 7;  // awaited
  signal[1] = 6;  // the step before's
  Result<Stream> made = Stream::create();
  ASSERT_TRUE(made.ok());
  Stream stream = std::move(made).value();
  // Whatever fails below, the wait ends before the stream's destructor waits for it.
  struct Release {
    uint32_t* signal;
    ~Release() { std::atomic_ref<uint32_t>(signal[1]).store(signal[0], std::memory_order_release); }
  } release{signal};
  TokenMaskParams m;
  m.logits = d_logits.as<float>();
  m.num_rows = 2;
  m.vocab = kVocab;
  m.mask_row = d_rows.as<int32_t>();
  m.masks = masks;
  m.mask_words = kWords;
  ASSERT_TRUE(wait_host_signal(signal, stream.get()).ok());
  ASSERT_TRUE(apply_token_masks(m, stream.get()).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(cudaStreamQuery(stream.get()), cudaErrorNotReady) << "the masking ran before the signal";
  // Mask 0 allows the even ids, mask 1 the ids below 100.
  for (int32_t id = 0; id < kVocab; ++id) {
    const uint64_t bit = uint64_t{1} << (id % 64);
    uint64_t& even = masks[id / 64];
    uint64_t& low = masks[kWords + id / 64];
    even = id % 2 == 0 ? (even | bit) : (even & ~bit);
    low = id < 100 ? (low | bit) : (low & ~bit);
  }
  std::atomic_ref<uint32_t>(signal[1]).store(7, std::memory_order_release);
  ASSERT_TRUE(stream.synchronize().ok());
  const std::vector<float> got = download<float>(d_logits, 2 * static_cast<size_t>(kVocab));
  for (int32_t id = 0; id < kVocab; ++id) {
    const auto i = static_cast<size_t>(id);
    EXPECT_EQ(got[i], id < 100 ? row[i] : -kInf) << "row 0, id " << id;
    EXPECT_EQ(got[kVocab + i], id % 2 == 0 ? row[i] : -kInf) << "row 1, id " << id;
  }
  EXPECT_EQ(wait_host_signal(nullptr, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(SamplingArgsTest, BadArgumentsReturnInvalidArgument) {
  SampleParams p;
  p.num_rows = -1;
  EXPECT_EQ(sample(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.num_rows = 0;
  EXPECT_TRUE(sample(p, nullptr).ok());  // nothing to do
  p.num_rows = 2;
  p.vocab = 0;
  EXPECT_EQ(sample(p, nullptr).code(), StatusCode::kInvalidArgument);
  p.vocab = 10;
  EXPECT_EQ(sample(p, nullptr).code(), StatusCode::kInvalidArgument);  // no logits
  float dummy = 0.0f;
  int32_t out = 0;
  p.logits = &dummy;
  p.out_tokens = &out;
  p.temperature = &dummy;  // sampled rows need seeds
  EXPECT_EQ(sample(p, nullptr).code(), StatusCode::kInvalidArgument);
}

// Not an assertion: microseconds per launch at 128256 vocab (Llama 3), logits uniform over
// [-40, 40] ("peaked": the shared-memory path) and [-3, 3] ("flat": top-p falls back to passes
// over the row), and the equivalent bandwidth of one read of the logits.
TEST_F(SamplingTest, TimingPrintout) {
  const int32_t vocab = 128256;
  const int32_t max_rows = 1024;
  auto d_logits = DeviceBuffer::allocate(sizeof(float) * static_cast<size_t>(max_rows) * vocab);
  ASSERT_TRUE(d_logits.ok());
  std::vector<uint64_t> seeds(max_rows);
  std::iota(seeds.begin(), seeds.end(), 0);
  DeviceBuffer d_seeds = upload(seeds);
  auto d_tokens = DeviceBuffer::allocate(sizeof(int32_t) * max_rows);
  auto d_lp = DeviceBuffer::allocate(sizeof(float) * max_rows);
  ASSERT_TRUE(d_tokens.ok() && d_lp.ok());
  auto start = Event::create();
  auto stop = Event::create();
  ASSERT_TRUE(start.ok() && stop.ok());
  struct Mode {
    const char* name;
    RowParams p;
  };
  const Mode modes[] = {{"greedy", {0.0f, 0, 1.0f, 0.0f}},
                        {"temperature", {1.0f, 0, 1.0f, 0.0f}},
                        {"top_p 0.9", {1.0f, 0, 0.9f, 0.0f}},
                        {"top_k 50", {1.0f, 50, 1.0f, 0.0f}},
                        {"k 50 p 0.9 min_p .05", {0.7f, 50, 0.9f, 0.05f}}};
  for (const float range : {40.0f, 3.0f}) {
    RandomFillParams fill;
    fill.data = d_logits->data();
    fill.dtype = DType::kF32;
    fill.num_elements = static_cast<int64_t>(max_rows) * vocab;
    fill.seed = 77;
    fill.lo = -range;
    fill.hi = range;
    STRATA_ASSERT_OK(random_fill(fill, nullptr));
    for (const Mode& mode : modes) {
      DeviceBuffer d_t = upload(std::vector<float>(max_rows, mode.p.temperature));
      DeviceBuffer d_k = upload(std::vector<int32_t>(max_rows, mode.p.top_k));
      DeviceBuffer d_p = upload(std::vector<float>(max_rows, mode.p.top_p));
      DeviceBuffer d_m = upload(std::vector<float>(max_rows, mode.p.min_p));
      for (const int32_t rows : {1, 64, 256, 1024}) {
        SampleParams p;
        p.logits = d_logits->as<float>();
        p.num_rows = rows;
        p.vocab = vocab;
        p.temperature = d_t.as<float>();
        p.top_k = d_k.as<int32_t>();
        p.top_p = d_p.as<float>();
        p.min_p = d_m.as<float>();
        p.seeds = d_seeds.as<uint64_t>();
        p.out_tokens = d_tokens->as<int32_t>();
        p.out_logprobs = d_lp->as<float>();
        for (int i = 0; i < 3; ++i) STRATA_ASSERT_OK(sample(p, nullptr));
        constexpr int kIters = 20;
        STRATA_ASSERT_OK(start->record(nullptr));
        for (int i = 0; i < kIters; ++i) STRATA_ASSERT_OK(sample(p, nullptr));
        STRATA_ASSERT_OK(stop->record(nullptr));
        STRATA_ASSERT_OK(stop->synchronize());
        auto ms = Event::elapsed_ms(*start, *stop);
        ASSERT_TRUE(ms.ok());
        const double us = 1e3 * *ms / kIters;
        const double gbs = 4.0 * rows * vocab / (us * 1e3);
        std::printf(
            "[sampling] logits U(-%g,%g) %-22s rows %5d x %d: %9.1f us  (%6.0f GB/s of logits)\n",
            range, range, mode.name, rows, vocab, us, gbs);
      }
    }
  }
  sync_device();
}

}  // namespace
}  // namespace strata::cuda::testing
