#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "strata/sampling_params.h"

namespace strata::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

SamplingParams seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

// Reference log_softmax in double, written independently of the sampler.
std::vector<double> ref_log_softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double max = -std::numeric_limits<double>::infinity();
  for (const float x : logits) max = std::max(max, x / temperature);
  double sum = 0.0;
  for (const float x : logits) sum += std::exp(x / temperature - max);
  std::vector<double> out;
  out.reserve(logits.size());
  for (const float x : logits) out.push_back(x / temperature - max - std::log(sum));
  return out;
}

std::vector<double> ref_softmax(const std::vector<float>& logits, double temperature = 1.0) {
  std::vector<double> out = ref_log_softmax(logits, temperature);
  for (double& v : out) v = std::exp(v);
  return out;
}

std::vector<int64_t> histogram(Sampler& sampler, const std::vector<float>& logits,
                               const TokenCounts& counts, int n) {
  std::vector<int64_t> hist(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    Result<SampleResult> r = sampler.sample(logits, counts);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    ++hist[static_cast<size_t>(r->token)];
  }
  return hist;
}

// Pearson's statistic over the categories with expected probability > 0; a sample in a category of
// probability 0 fails the test directly.
void expect_matches_distribution(const std::vector<int64_t>& hist,
                                 const std::vector<double>& expected, int n) {
  // Chi-square critical values at p = 0.001 for 1..7 degrees of freedom.
  const double kCritical[] = {10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
  double chi2 = 0.0;
  int categories = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(hist[i], 0) << "token " << i << " is outside the allowed set";
      continue;
    }
    const double e = expected[i] * n;
    chi2 += (hist[i] - e) * (hist[i] - e) / e;
    ++categories;
  }
  ASSERT_GE(categories, 2);
  ASSERT_LE(categories, 8);
  EXPECT_LT(chi2, kCritical[categories - 2]);
}

void expect_probs_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "token " << i;
}

std::vector<double> probs_of(const SamplingParams& p, const std::vector<float>& logits) {
  const Sampler sampler(p, static_cast<int32_t>(logits.size()));
  Result<std::vector<double>> probs =
      sampler.probabilities(logits, TokenCounts(static_cast<int32_t>(logits.size())));
  EXPECT_TRUE(probs.ok()) << probs.status().to_string();
  return probs.ok() ? *probs : std::vector<double>{};
}

// ---- TokenCounts --------------------------------------------------------------------------

TEST(TokenCountsTest, TracksPromptMembershipAndOutputCountsIncrementally) {
  TokenCounts counts(10);
  const std::vector<int32_t> prompt = {3, 1, 3};
  counts.add_prompt(prompt);
  counts.add_output(1);
  counts.add_output(7);
  counts.add_output(7);
  EXPECT_TRUE(counts.in_prompt(3));
  EXPECT_TRUE(counts.in_prompt(1));
  EXPECT_FALSE(counts.in_prompt(7));
  EXPECT_EQ(counts.output_count(3), 0);
  EXPECT_EQ(counts.output_count(1), 1);
  EXPECT_EQ(counts.output_count(7), 2);
  EXPECT_EQ(counts.output_count(9), 0);
  EXPECT_EQ(counts.num_output_tokens(), 3);
  ASSERT_EQ(counts.entries().size(), 3u);  // one per distinct token, first-seen order
  EXPECT_EQ(counts.entries()[0].token, 3);
  EXPECT_EQ(counts.entries()[1].token, 1);
  EXPECT_EQ(counts.entries()[2].token, 7);
}

// ---- penalties ----------------------------------------------------------------------------

// Vocab 6. Prompt {0, 1}; output 2, 2, 3, 1. Token 4 never seen; token 5 never seen.
TokenCounts penalty_history() {
  TokenCounts counts(6);
  const std::vector<int32_t> prompt = {0, 1};
  counts.add_prompt(prompt);
  for (const int32_t t : {2, 2, 3, 1}) counts.add_output(t);
  return counts;
}
const std::vector<double> kPenaltyLogits = {2.0, -1.0, 0.5, -3.0, 4.0, 0.0};

TEST(PenaltyTest, RepetitionDividesPositiveAndMultipliesNegativeForPromptAndOutputTokens) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  std::vector<double> logits = kPenaltyLogits;
  apply_penalties(logits, penalty_history(), p);
  EXPECT_EQ(logits, (std::vector<double>{1.0, -2.0, 0.25, -6.0, 4.0, 0.0}));
}

TEST(PenaltyTest, FrequencyAndPresenceApplyToOutputTokensOnly) {
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  std::vector<double> logits = kPenaltyLogits;
  apply_penalties(logits, penalty_history(), p);
  // token 1: once in the output; 2: twice; 3: once; 0 is prompt-only.
  EXPECT_EQ(logits, (std::vector<double>{2.0, -1.5, -0.5, -3.5, 4.0, 0.0}));

  p.frequency_penalty = 0.0f;
  p.presence_penalty = -1.5f;  // negative encourages repeats
  logits = kPenaltyLogits;
  apply_penalties(logits, penalty_history(), p);
  EXPECT_EQ(logits, (std::vector<double>{2.0, 0.5, 2.0, -1.5, 4.0, 0.0}));
}

TEST(PenaltyTest, AllThreeComposeInVllmOrder) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 1.0f;
  std::vector<double> logits = kPenaltyLogits;
  apply_penalties(logits, penalty_history(), p);
  // repetition first, then - 0.25 * count - 1.0 for output tokens.
  EXPECT_EQ(logits, (std::vector<double>{1.0, -3.25, -1.25, -7.25, 4.0, 0.0}));
}

TEST(PenaltyTest, PenaltiesChangeTheGreedyChoiceButNotTheRawLogprobs) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  TokenCounts counts(3);
  counts.add_output(1);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 0;
  p.presence_penalty = 1.5f;  // 3.0 -> 1.5, below token 2
  Sampler sampler(p, 3);
  Result<SampleResult> r = sampler.sample(logits, counts);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 2);
  EXPECT_NEAR(r->logprob, ref_log_softmax(logits)[2], 1e-6);  // raw: before the penalty
}

// ---- greedy -------------------------------------------------------------------------------

TEST(GreedyTest, TakesArgmaxWithTiesToTheLowestId) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  for (const auto& [temperature, top_k] : {std::pair{0.0f, 0}, {1e-6f, 0}, {1.0f, 1}}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    ASSERT_TRUE(p.greedy());
    Sampler sampler(p, 5);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.sample(logits, TokenCounts(5))->token, 1);
    expect_probs_near(probs_of(p, logits), {0, 1, 0, 0, 0});
  }
}

// ---- the distribution drawn from ----------------------------------------------------------

TEST(DistributionTest, TemperatureDividesTheLogits) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  for (const float t : {0.5f, 1.0f, 2.0f}) {
    SamplingParams p;
    p.temperature = t;
    expect_probs_near(probs_of(p, logits), ref_softmax(logits, t));
  }
}

// ln of these probabilities: softmax gives back exactly {0.4, 0.3, 0.2, 0.1}.
const std::vector<float> kFourLogits = {std::log(0.4f), std::log(0.3f), std::log(0.2f),
                                        std::log(0.1f)};

std::vector<double> renormalised(std::vector<double> probs, const std::set<int32_t>& keep) {
  double total = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (!keep.contains(static_cast<int32_t>(i))) probs[i] = 0.0;
    total += probs[i];
  }
  for (double& v : probs) v /= total;
  return probs;
}

TEST(DistributionTest, MinPKeepsTokensWithAtLeastMinPTimesTheLargestProbability) {
  SamplingParams p;
  p.min_p = 0.6f;  // 0.6 * 0.4 = 0.24: keeps 0.4 and 0.3
  expect_probs_near(probs_of(p, kFourLogits), renormalised(ref_softmax(kFourLogits), {0, 1}));
  p.min_p = 0.2f;  // 0.08: keeps all
  expect_probs_near(probs_of(p, kFourLogits), ref_softmax(kFourLogits));
  p.min_p = 1.0f;  // only the top
  expect_probs_near(probs_of(p, kFourLogits), {1, 0, 0, 0});
}

TEST(DistributionTest, TopKKeepsTheKLargestAndTiesWithTheKth) {
  SamplingParams p;
  p.top_k = 3;
  expect_probs_near(probs_of(p, kFourLogits), renormalised(ref_softmax(kFourLogits), {0, 1, 2}));
  const std::vector<float> tied = {0.0f, 2.0f, 1.0f, 1.0f, -1.0f};
  p.top_k = 2;  // the 2nd largest (1.0) is tied: both stay, as in vLLM and HF
  expect_probs_near(probs_of(p, tied), renormalised(ref_softmax(tied), {1, 2, 3}));
  p.top_k = 100;  // larger than the vocab = off
  expect_probs_near(probs_of(p, tied), ref_softmax(tied));
}

TEST(DistributionTest, TopPKeepsTheShortestPrefixReachingP) {
  SamplingParams p;
  p.top_p = 0.65f;  // 0.4 before token 1 (< 0.65, stays), 0.7 before token 2 (goes)
  expect_probs_near(probs_of(p, kFourLogits), renormalised(ref_softmax(kFourLogits), {0, 1}));
  p.top_p = 0.75f;
  expect_probs_near(probs_of(p, kFourLogits), renormalised(ref_softmax(kFourLogits), {0, 1, 2}));
  p.top_p = 1e-6f;  // always at least one token
  expect_probs_near(probs_of(p, kFourLogits), {1, 0, 0, 0});
}

TEST(DistributionTest, TopPStopsExactlyWhenTheMassReachesPWithTiesByLowestId) {
  SamplingParams p;
  p.top_p = 0.5f;  // four equal tokens: two of them hold exactly 0.5, so the third goes
  expect_probs_near(probs_of(p, {1.0f, 1.0f, 1.0f, 1.0f}), {0.5, 0.5, 0, 0});
}

TEST(DistributionTest, TopPRunsOnTheTopKRenormalisedDistribution) {
  SamplingParams p;
  p.top_k = 2;     // {0.4, 0.3} -> {0.571, 0.429}
  p.top_p = 0.5f;  // 0.571 before token 1: only token 0 (on the raw 0.4 it would stay)
  expect_probs_near(probs_of(p, kFourLogits), {1, 0, 0, 0});
}

TEST(DistributionTest, MinPRunsAfterTemperature) {
  SamplingParams p;
  p.temperature = 0.5f;  // probs proportional to {0.16, 0.09, 0.04, 0.01}
  p.min_p = 0.3f;        // 0.048 of the unnormalised: keeps 0.16 and 0.09 only
  expect_probs_near(probs_of(p, kFourLogits), renormalised(ref_softmax(kFourLogits, 0.5), {0, 1}));
}

// The filters on a vocabulary large enough that top_p builds its order in several chunks, against a
// plain full-sort reference. Logits on a 1/4 grid, so there are many ties.
std::vector<double> ref_filtered(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<double> probs = ref_softmax(logits, p.temperature);
  const double max = *std::max_element(probs.begin(), probs.end());
  for (double& v : probs) v = v < p.min_p * max ? 0.0 : v;
  std::vector<int32_t> ids(probs.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
  });
  if (p.top_k > 0) {
    const double kth = probs[static_cast<size_t>(ids[static_cast<size_t>(p.top_k - 1)])];
    for (double& v : probs) v = v < kth ? 0.0 : v;
  }
  double total = 0.0;
  for (const double v : probs) total += v;
  double before = 0.0;
  for (const int32_t id : ids) {
    const double v = probs[static_cast<size_t>(id)] / total;
    if (before >= p.top_p) probs[static_cast<size_t>(id)] = 0.0;
    before += v;
  }
  total = 0.0;
  for (const double v : probs) total += v;
  for (double& v : probs) v /= total;
  return probs;
}

TEST(DistributionTest, LargeVocabularyMatchesAFullSortReference) {
  std::mt19937 gen(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(5000);
  for (float& x : logits) x = std::round(normal(gen) * 4.0f) / 4.0f;
  for (const float top_p : {0.3f, 0.9f, 0.999f}) {
    for (const int32_t top_k : {0, 700}) {
      for (const float min_p : {0.0f, 0.005f}) {
        SCOPED_TRACE(testing::Message()
                     << "top_p " << top_p << " top_k " << top_k << " min_p " << min_p);
        SamplingParams p;
        p.temperature = 0.8f;
        p.top_p = top_p;
        p.top_k = top_k;
        p.min_p = min_p;
        const std::vector<double> got = probs_of(p, logits);
        const std::vector<double> want = ref_filtered(logits, p);
        int32_t support = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i] == 0.0, want[i] == 0.0) << "token " << i;
          ASSERT_NEAR(got[i], want[i], 1e-12) << "token " << i;
          support += got[i] > 0.0;
        }
        if (top_k == 0 && min_p == 0.0f && top_p > 0.5f) {
          EXPECT_GT(support, 256);  // top_p went past its first chunk
        }
      }
    }
  }
}

// ---- drawing ------------------------------------------------------------------------------

TEST(SamplingTest, FrequenciesMatchTheFilteredDistributionAndNeverLeaveItsSupport) {
  const std::vector<float> logits = {1.0f, 0.2f, 2.0f, -0.5f, 1.5f, 0.0f, -2.0f, 0.7f};
  std::vector<std::function<void(SamplingParams&)>> configs = {
      [](SamplingParams&) {},
      [](SamplingParams& p) { p.temperature = 1.7f; },
      [](SamplingParams& p) { p.top_k = 3; },
      [](SamplingParams& p) { p.top_p = 0.8f; },
      [](SamplingParams& p) { p.min_p = 0.2f; },
      [](SamplingParams& p) { p.temperature = 0.7f, p.top_k = 5, p.top_p = 0.9f, p.min_p = 0.1f; },
  };
  constexpr int kDraws = 40000;
  for (size_t c = 0; c < configs.size(); ++c) {
    SCOPED_TRACE("config " + std::to_string(c));
    SamplingParams p = seeded(1000 + c);
    configs[c](p);
    const std::vector<double> expected = probs_of(p, logits);
    Sampler sampler(p, 8);
    expect_matches_distribution(histogram(sampler, logits, TokenCounts(8), kDraws), expected,
                                kDraws);
  }
}

TEST(SamplingTest, FrequenciesFollowThePenalisedDistribution) {
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  TokenCounts counts(4);
  counts.add_output(0);
  counts.add_output(0);
  SamplingParams p = seeded(5);
  p.frequency_penalty = 1.0f;  // token 0: 1 - 2 = -1
  const std::vector<double> expected = ref_softmax({-1.0f, 1.0f, 1.0f, 1.0f});
  Sampler sampler(p, 4);
  expect_matches_distribution(histogram(sampler, logits, counts, 40000), expected, 40000);
}

TEST(SamplingTest, TheDrawIsTheDocumentedInverseCdfOverRawRngOutput) {
  // Eight equal weights: u * 8 = (x >> 11) * 2^-50, so the token is x >> 61, exactly.
  const std::vector<float> logits(8, 0.25f);
  Sampler sampler(seeded(20240601), 8);
  std::mt19937_64 reference(20240601);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(sampler.sample(logits, TokenCounts(8))->token,
              static_cast<int32_t>(reference() >> 61));
  }
}

std::vector<int32_t> sequence(Sampler& sampler, int n) {
  const std::vector<float> logits = {0.1f, 0.3f, 0.2f, 0.0f, 0.25f, 0.15f};
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back(sampler.sample(logits, TokenCounts(6))->token);
  return out;
}

TEST(SeedTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  Sampler a(seeded(42), 6);
  Sampler b(seeded(42), 6);
  Sampler c(seeded(43), 6);
  const std::vector<int32_t> seq_a = sequence(a, 100);
  EXPECT_EQ(seq_a, sequence(b, 100));
  EXPECT_NE(seq_a, sequence(c, 100));
}

TEST(SeedTest, ASequenceDoesNotDependOnOtherSamplersRunningBetweenItsSteps) {
  Sampler alone(seeded(7), 6);
  const std::vector<int32_t> expected = sequence(alone, 50);
  Sampler batched(seeded(7), 6);
  Sampler other(seeded(7), 6);
  Sampler unseeded(SamplingParams{}, 6);
  std::vector<int32_t> got;
  for (int i = 0; i < 50; ++i) {
    sequence(other, 3);  // other sequences of the batch step in between
    sequence(unseeded, 2);
    got.push_back(sequence(batched, 1)[0]);
  }
  EXPECT_EQ(got, expected);
}

TEST(SeedTest, UnseededSamplersDrawFromTheDistribution) {
  Sampler a(SamplingParams{}, 6);
  Sampler b(SamplingParams{}, 6);
  // 200 draws from six tokens: two random_device seeds agreeing would be astronomically unlikely.
  EXPECT_NE(sequence(a, 200), sequence(b, 200));
}

// ---- logprobs -----------------------------------------------------------------------------

const std::vector<float> kLogprobLogits = {0.3f, -1.2f, 2.5f, 0.3f, 7.0f, -4.0f, 2.5f, 0.0f};

TEST(LogprobsTest, EqualADoubleLogSoftmaxAndListTopKByLogprobThenId) {
  const std::vector<double> ref = ref_log_softmax(kLogprobLogits);
  for (int32_t token = 0; token < 8; ++token) {
    const TokenLogprobs lp = compute_logprobs(kLogprobLogits, token, 5);
    EXPECT_EQ(lp.token, token);
    EXPECT_NEAR(lp.logprob, ref[static_cast<size_t>(token)], 1e-6);
    const std::vector<int32_t> want_ids = {4, 2, 6, 0, 3};  // ties 2/6 and 0/3 by id
    ASSERT_EQ(lp.top_logprobs.size(), want_ids.size());
    for (size_t i = 0; i < want_ids.size(); ++i) {
      EXPECT_EQ(lp.top_logprobs[i].first, want_ids[i]);
      EXPECT_NEAR(lp.top_logprobs[i].second, ref[static_cast<size_t>(want_ids[i])], 1e-6);
    }
  }
}

TEST(LogprobsTest, KZeroGivesOnlyTheChosenTokenAndKIsClampedToTheVocab) {
  EXPECT_TRUE(compute_logprobs(kLogprobLogits, 1, 0).top_logprobs.empty());
  EXPECT_EQ(compute_logprobs(kLogprobLogits, 1, 20).top_logprobs.size(), 8u);
}

TEST(LogprobsTest, SampledTokensCarryRawLogprobsOnlyWhenAsked) {
  SamplingParams p = seeded(3);
  p.temperature = 0.4f;
  p.repetition_penalty = 1.8f;
  p.top_k = 4;
  p.logprobs = 2;
  TokenCounts counts(8);
  const std::vector<int32_t> prompt = {4};
  counts.add_prompt(prompt);
  Sampler sampler(p, 8);
  const std::vector<double> ref = ref_log_softmax(kLogprobLogits);
  for (int i = 0; i < 50; ++i) {
    Result<SampleResult> r = sampler.sample(kLogprobLogits, counts);
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->logprob, ref[static_cast<size_t>(r->token)], 1e-6);
    ASSERT_EQ(r->top_logprobs.size(), 2u);
    EXPECT_EQ(r->top_logprobs[0].first, 4);
    EXPECT_EQ(r->top_logprobs[1].first, 2);
  }
  p.logprobs = -1;
  Sampler quiet(p, 8);
  Result<SampleResult> r = quiet.sample(kLogprobLogits, counts);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->logprob, 0.0f);
  EXPECT_TRUE(r->top_logprobs.empty());
}

// ---- NaN and infinities -------------------------------------------------------------------

TEST(NonFiniteTest, NanAndNegativeInfinityAreNeverSampled) {
  const std::vector<float> logits = {kNaN, 0.0f, -kInf, 0.5f, kNaN, -0.3f};
  SamplingParams p = seeded(11);
  p.temperature = 5.0f;  // flatten, so every finite token comes up often
  Sampler sampler(p, 6);
  const std::vector<int64_t> hist = histogram(sampler, logits, TokenCounts(6), 5000);
  EXPECT_EQ(hist[0] + hist[2] + hist[4], 0);
  EXPECT_GT(hist[1] * hist[3] * hist[5], 0);

  const std::vector<float> nan_first = {kNaN, -1.0f, -2.0f};
  p.temperature = 0.0f;
  EXPECT_EQ(Sampler(p, 3).sample(nan_first, TokenCounts(3))->token, 1);
  const TokenLogprobs lp = compute_logprobs(logits, 0, 6);
  EXPECT_EQ(lp.logprob, -kInf);
  EXPECT_EQ(lp.top_logprobs.back().second, -kInf);
  EXPECT_EQ(lp.top_logprobs[0].first, 3);
}

TEST(NonFiniteTest, PositiveInfinityTokensShareAllTheMass) {
  const std::vector<float> logits = {kInf, 3.0f, kInf, kNaN};
  expect_probs_near(probs_of(seeded(1), logits), {0.5, 0, 0.5, 0});
  const TokenLogprobs lp = compute_logprobs(logits, 2, 2);
  EXPECT_NEAR(lp.logprob, -std::log(2.0), 1e-7);
  EXPECT_EQ(compute_logprobs(logits, 1, 0).logprob, -kInf);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(Sampler(greedy, 4).sample(logits, TokenCounts(4))->token, 0);
}

TEST(NonFiniteTest, ARowWithNoFiniteLogitIsAnErrorNotAToken) {
  const std::vector<float> logits = {-kInf, kNaN, -kInf};
  for (const float t : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = t;
    Sampler sampler(p, 3);
    Result<SampleResult> r = sampler.sample(logits, TokenCounts(3));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(compute_logprobs(logits, 0, 1).logprob, -kInf);
}

// ---- validation ---------------------------------------------------------------------------

TEST(ValidationTest, DefaultsAndBoundaryValuesAreValid) {
  EXPECT_TRUE(SamplingParams{}.validate(100).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.top_k = -1;
  p.min_p = 1.0f;
  p.repetition_penalty = 0.01f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.max_tokens = 1;
  p.logprobs = 20;
  p.prompt_logprobs = 0;
  p.stop_token_ids = {0, 99};
  EXPECT_TRUE(p.validate(100).ok()) << p.validate(100).to_string();
}

TEST(ValidationTest, EachOutOfRangeFieldIsAnInvalidArgumentNamingIt) {
  const std::vector<std::pair<std::string, std::function<void(SamplingParams&)>>> cases = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [](SamplingParams& p) { p.temperature = kNaN; }},
      {"temperature", [](SamplingParams& p) { p.temperature = kInf; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = kNaN; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = kNaN; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -2.01f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = kNaN; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -2; }},
      {"prompt_logprobs", [](SamplingParams& p) { p.prompt_logprobs = 21; }},
      {"stop_token_ids",
       [](SamplingParams& p) {
         p.stop_token_ids = {5, 100};
       }},
      {"stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {-1}; }},
  };
  for (const auto& [field, mutate] : cases) {
    SamplingParams p;
    mutate(p);
    const Status s = p.validate(100);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_EQ(s.message().rfind(field, 0), 0u)
        << "message should start with the field: " << s.message();
  }
}

// ---- stop rule ----------------------------------------------------------------------------

TEST(StopTest, StopIdsAlwaysStopAndEosStopsUnlessIgnored) {
  SamplingParams p;
  p.stop_token_ids = {7};
  const std::vector<int32_t> eos = {2, 3};
  EXPECT_TRUE(is_stop_token(7, p, eos));
  EXPECT_TRUE(is_stop_token(3, p, eos));
  EXPECT_FALSE(is_stop_token(4, p, eos));
  p.ignore_eos = true;
  EXPECT_TRUE(is_stop_token(7, p, eos));
  EXPECT_FALSE(is_stop_token(3, p, eos));
  EXPECT_FALSE(is_stop_token(2, SamplingParams{}, {}));
}

}  // namespace
}  // namespace strata::engine

namespace strata::engine {
namespace {

// ---- allowed-token masks (structured outputs) ------------------------------------------------

std::vector<uint64_t> mask_of(std::initializer_list<int32_t> ids, int32_t vocab) {
  std::vector<uint64_t> words(static_cast<size_t>(vocab + 63) / 64, 0);
  for (const int32_t id : ids) words[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  return words;
}

TEST(AllowedMaskTest, GreedyTakesTheBestAllowedTokenAndPenaltiesDoNotRevive) {
  std::vector<float> logits(130, 0.0f);
  logits[3] = 9.0f;    // the argmax, not allowed
  logits[70] = 2.0f;   // allowed, in the second word
  logits[129] = 1.0f;  // allowed, in the third
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler greedy(p, 130);
  EXPECT_EQ(greedy.sample(logits, TokenCounts(130), mask_of({70, 129}, 130))->token, 70);
  EXPECT_EQ(greedy.sample(logits, TokenCounts(130))->token, 3);
  // A penalty that would double token 3's logit does not bring it back.
  p.repetition_penalty = 0.5f;
  TokenCounts counts(130);
  counts.add_prompt(std::vector<int32_t>{3, 70});
  Sampler penalised(p, 130);
  EXPECT_EQ(penalised.sample(logits, counts, mask_of({4, 70}, 130))->token, 70);
}

TEST(AllowedMaskTest, TheDistributionIsTheMaskedOnesRenormalisedAndLogprobsStayRaw) {
  const std::vector<float> logits = {1.0f, 0.2f, 2.0f, -0.5f, 1.5f, 0.0f, -2.0f, 0.7f};
  const std::vector<uint64_t> allowed = mask_of({0, 3, 4, 6}, 8);
  SamplingParams p = seeded(77);
  p.logprobs = 0;
  Sampler sampler(p, 8);
  Result<std::vector<double>> probs = sampler.probabilities(logits, TokenCounts(8), allowed);
  ASSERT_TRUE(probs.ok());
  double sum = 0.0;
  const auto e = [&](int32_t id) { return std::exp(static_cast<double>(logits[static_cast<size_t>(id)])); };
  for (const int32_t id : {0, 3, 4, 6}) sum += e(id);
  for (int32_t id = 0; id < 8; ++id) {
    const bool in = id == 0 || id == 3 || id == 4 || id == 6;
    EXPECT_NEAR((*probs)[static_cast<size_t>(id)],
                in ? e(id) / sum : 0.0, 1e-12);
  }
  std::vector<int64_t> hist(8, 0);
  constexpr int kDraws = 20000;
  const std::vector<double> raw = ref_log_softmax(logits);
  for (int i = 0; i < kDraws; ++i) {
    Result<SampleResult> r = sampler.sample(logits, TokenCounts(8), allowed);
    ASSERT_TRUE(r.ok());
    ++hist[static_cast<size_t>(r->token)];
    if (i == 0) {
      EXPECT_NEAR(r->logprob, raw[static_cast<size_t>(r->token)], 1e-6);
    }
  }
  expect_matches_distribution(hist, *probs, kDraws);
}

TEST(AllowedMaskTest, AMaskWhoseTokensAreAllMinusInfinityIsAnError) {
  const std::vector<float> logits = {1.0f, -kInf, kNaN, 0.5f};
  Sampler sampler(seeded(1), 4);
  EXPECT_FALSE(sampler.sample(logits, TokenCounts(4), mask_of({1, 2}, 4)).ok());
  EXPECT_EQ(sampler.sample(logits, TokenCounts(4), mask_of({1, 3}, 4))->token, 3);
}

}  // namespace
}  // namespace strata::engine
