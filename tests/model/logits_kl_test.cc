// KL between logit rows (model/logits_kl.h), what --kv-quant-check decides by: against a
// long-double computation of the definition, on distributions a check meets (close to the
// reference, peaked, and a 128K vocabulary), plus the properties the check relies on.

#include "model/logits_kl.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/thread_pool.h"

namespace strata::model {
namespace {

// KL(softmax(p) || softmax(q)) of one row straight from the definition, in long double.
long double kl_by_definition(const float* p, const float* q, int64_t vocab) {
  auto lse = [vocab](const float* x) {
    long double max = x[0];
    for (int64_t i = 1; i < vocab; ++i) max = std::max<long double>(max, x[i]);
    long double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<long double>(x[i]) - max);
    return std::log(sum) + max;
  };
  const long double lse_p = lse(p);
  const long double lse_q = lse(q);
  long double kl = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const long double lp = p[i] - lse_p;
    kl += std::exp(lp) * (lp - (q[i] - lse_q));
  }
  return kl;
}

// rows x vocab logits: N(0, spread) with a few large entries per row (a peaked distribution),
// and q = p plus N(0, noise) (a quantized cache's small perturbation).
struct LogitPair {
  std::vector<float> p, q;
};
LogitPair logit_pair(int64_t rows, int64_t vocab, float noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> base(0.0f, 2.0f);
  std::normal_distribution<float> delta(0.0f, noise);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  LogitPair l;
  l.p.resize(static_cast<size_t>(rows * vocab));
  for (float& x : l.p) x = base(rng);
  for (int64_t r = 0; r < rows; ++r) {
    for (int k = 0; k < 3; ++k) l.p[static_cast<size_t>(r * vocab + pick(rng))] += 18.0f - 4 * k;
  }
  l.q = l.p;
  for (float& x : l.q) x += delta(rng);
  return l;
}

double mean_by_definition(const LogitPair& l, int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(l.p.size()) / vocab;
  long double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    sum += kl_by_definition(l.p.data() + r * vocab, l.q.data() + r * vocab, vocab);
  }
  return static_cast<double>(sum / rows);
}

TEST(LogitsKlTest, MatchesTheDefinitionFromTinyToLargeDivergences) {
  ThreadPool pool(2);
  constexpr int64_t kVocab = 4096;
  for (const float noise : {1e-3f, 3e-2f, 0.3f, 2.0f}) {
    LogitPair l = logit_pair(16, kVocab, noise, 7);
    const double want = mean_by_definition(l, kVocab);
    const KlReference reference(l.p, kVocab, pool);
    const double got = reference.mean_kl(l.q, pool);
    // The stored p are floats, so the result is the KL weighted by p rounded to 24 bits: off by
    // at most 2^-24 of sum p |log p - log q| (about 1e-4 of the KL for the smallest noise here),
    // far below any threshold a check would use (its default is 1e-2 nats).
    EXPECT_NEAR(got, want, 1e-4 * want + 1e-10) << "noise " << noise;
    EXPECT_GT(got, 0.0);
  }
}

TEST(LogitsKlTest, OneReferenceServesManyComparisons) {
  ThreadPool pool(2);
  constexpr int64_t kVocab = 1000;
  LogitPair a = logit_pair(5, kVocab, 0.1f, 11);
  LogitPair b = logit_pair(5, kVocab, 0.5f, 11);  // the same p (same seed), another q
  ASSERT_EQ(a.p, b.p);
  const double want_a = mean_by_definition(a, kVocab);
  const double want_b = mean_by_definition(b, kVocab);
  const KlReference reference(a.p, kVocab, pool);
  // In either order, and again: the reference is not consumed by a comparison.
  EXPECT_NEAR(reference.mean_kl(b.q, pool), want_b, 1e-5 * want_b);
  EXPECT_NEAR(reference.mean_kl(a.q, pool), want_a, 1e-5 * want_a);
  EXPECT_NEAR(reference.mean_kl(b.q, pool), want_b, 1e-5 * want_b);
  EXPECT_GT(want_b, 5 * want_a);
}

TEST(LogitsKlTest, ZeroForTheSameDistributionShiftedAndNeverNegative) {
  ThreadPool pool(2);
  constexpr int64_t kVocab = 2048;
  LogitPair l = logit_pair(8, kVocab, 0.0f, 3);
  for (float& x : l.q) x += 37.5f;  // softmax is shift-invariant
  const KlReference reference(l.p, kVocab, pool);
  const double kl = reference.mean_kl(l.q, pool);
  EXPECT_GE(kl, 0.0);
  EXPECT_LT(kl, 1e-12);
}

TEST(LogitsKlTest, IdenticalLogitsGiveExactlyZero) {
  // What the check's float32 test relies on: a pool that reproduces the reference's logits bit
  // for bit reads a KL of exactly 0, not a rounding residue.
  ThreadPool pool(2);
  constexpr int64_t kVocab = 128256;
  LogitPair l = logit_pair(3, kVocab, 0.0f, 9);
  ASSERT_EQ(l.p, l.q);
  const KlReference reference(l.p, kVocab, pool);
  EXPECT_EQ(reference.mean_kl(l.q, pool), 0.0);
}

TEST(LogitsKlTest, KnownValueOnTwoTokens) {
  // p = softmax(0, 0) = (1/2, 1/2), q = softmax(0, ln 3) = (1/4, 3/4):
  // KL = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3).
  ThreadPool pool(1);
  std::vector<float> p = {0.0f, 0.0f};
  const std::vector<float> q = {0.0f, static_cast<float>(std::log(3.0))};
  const KlReference reference(p, 2, pool);
  EXPECT_NEAR(reference.mean_kl(q, pool), 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_EQ(reference.rows(), 1);
}

TEST(LogitsKlTest, TheRowsOfAFullVocabularyAreAveraged) {
  // Llama-3's 128,256 entries, two rows with different divergences: the mean of the two.
  ThreadPool pool(2);
  constexpr int64_t kVocab = 128256;
  LogitPair l = logit_pair(2, kVocab, 0.05f, 5);
  for (int64_t i = 0; i < kVocab; ++i) l.q[static_cast<size_t>(kVocab + i)] += 0.2f * (i % 3);
  const double row0 = static_cast<double>(kl_by_definition(l.p.data(), l.q.data(), kVocab));
  const double row1 = static_cast<double>(
      kl_by_definition(l.p.data() + kVocab, l.q.data() + kVocab, kVocab));
  const KlReference reference(l.p, kVocab, pool);
  EXPECT_NEAR(reference.mean_kl(l.q, pool), 0.5 * (row0 + row1), 1e-5 * (row0 + row1));
}

TEST(LogitsKlTest, NoRowsIsZero) {
  ThreadPool pool(1);
  std::vector<float> none;
  const KlReference reference(none, 16, pool);
  EXPECT_EQ(reference.rows(), 0);
  EXPECT_EQ(reference.mean_kl(none, pool), 0.0);
}

}  // namespace
}  // namespace strata::model
