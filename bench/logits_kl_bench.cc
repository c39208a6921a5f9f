// --kv-quant-check's host cost per pass: the KL of 32 rows of Llama-3's 128,256 logits against a
// prepared reference (model/logits_kl.h), beside the same KL taken from the definition (three
// exps per logit: both log-sum-exps and p itself), as the check computed it before the
// reference was prepared once. One thread; items are logits.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "model/logits_kl.h"

namespace {

constexpr int64_t kVocab = 128256;
constexpr int64_t kRows = 32;

std::vector<float> random_logits(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(kRows * kVocab));
  for (float& x : v) x = d(rng);
  return v;
}

double log_sum_exp(const float* row) {
  const double max = *std::max_element(row, row + kVocab);
  double sum = 0.0;
  for (int64_t i = 0; i < kVocab; ++i) sum += std::exp(row[i] - max);
  return std::log(sum) + max;
}

void BM_KlByDefinition(benchmark::State& state) {
  const std::vector<float> p = random_logits(1);
  const std::vector<float> q = random_logits(2);
  for (auto _ : state) {
    double total = 0.0;
    for (int64_t r = 0; r < kRows; ++r) {
      const float* pr = p.data() + r * kVocab;
      const float* qr = q.data() + r * kVocab;
      const double lse_p = log_sum_exp(pr);
      const double lse_q = log_sum_exp(qr);
      double kl = 0.0;
      for (int64_t i = 0; i < kVocab; ++i) {
        const double lp = pr[i] - lse_p;
        kl += std::exp(lp) * (lp - (qr[i] - lse_q));
      }
      total += kl;
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(state.iterations() * kRows * kVocab);
}
BENCHMARK(BM_KlByDefinition)->Unit(benchmark::kMillisecond);

void BM_KlReferenceMeanKl(benchmark::State& state) {
  strata::ThreadPool pool(1);
  std::vector<float> p = random_logits(1);
  const std::vector<float> q = random_logits(2);
  const strata::model::KlReference reference(p, kVocab, pool);
  for (auto _ : state) benchmark::DoNotOptimize(reference.mean_kl(q, pool));
  state.SetItemsProcessed(state.iterations() * kRows * kVocab);
}
BENCHMARK(BM_KlReferenceMeanKl)->Unit(benchmark::kMillisecond);

}  // namespace
