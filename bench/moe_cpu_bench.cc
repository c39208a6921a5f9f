// The CPU MoE block (model/moe_block.h) beside a dense SwiGLU FFN of the same active FLOPs, in
// the same run: hidden 1024, 8 experts of 512 routed top-2 (Mixtral's routing at a small
// shape) against one FFN of 2 x 512 = 1024, BF16 weights as checkpoints store them, 2 threads.
// Items are tokens. A token computes 6 x 1024 x 1024 flops either way (the router's 2 x 1024 x 8
// on top for the MoE), but the MoE reads only the experts its tokens hit: 2 of 8 for one token
// (the dense FFN's bytes), all 8 for a batch (4x the dense FFN's bytes, at the same flops).

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/linear.h"
#include "model/moe_block.h"

namespace {

using strata::TensorView;

constexpr int64_t kHidden = 1024;
constexpr int64_t kExperts = 8;
constexpr int64_t kTopK = 2;
constexpr int64_t kMoeInter = 512;
constexpr int64_t kDenseInter = kTopK * kMoeInter;  // the same active FLOPs per token

// BF16 weights of N(0, 0.02), kept alive by the arena.
class Weights {
 public:
  TensorView make(int64_t rows, int64_t cols) {
    arena_.emplace_back(static_cast<size_t>(rows * cols));
    for (uint16_t& w : arena_.back()) w = strata::f32_to_bf16(normal_(rng_));
    TensorView t;
    t.data = arena_.back().data();
    t.dtype = strata::DType::kBF16;
    t.rank = 2;
    t.shape = {rows, cols, 0, 0};
    return t;
  }

 private:
  std::mt19937 rng_{1};
  std::normal_distribution<float> normal_{0.0f, 0.02f};
  std::vector<std::vector<uint16_t>> arena_;
};

std::vector<float> input(int64_t num_tokens) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(num_tokens * kHidden));
  for (float& v : x) v = normal(rng);
  return x;
}

void count(benchmark::State& state, int64_t num_tokens, double flops_per_token) {
  state.SetItemsProcessed(state.iterations() * num_tokens);
  state.counters["GFLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(num_tokens) *
                             flops_per_token / 1e9,
                         benchmark::Counter::kIsRate);
}

void BM_MoeBlock(benchmark::State& state) {
  const int64_t n = state.range(0);
  strata::ThreadPool pool(2);
  Weights arena;
  strata::model::MoeConfig config;
  config.num_experts = kExperts;
  config.num_experts_per_tok = kTopK;
  config.moe_intermediate_size = kMoeInter;
  config.norm_topk_prob = true;
  strata::model::MoeWeights w;
  w.router = arena.make(kExperts, kHidden);
  for (int64_t e = 0; e < kExperts; ++e) {
    w.experts.push_back({arena.make(kMoeInter, kHidden), arena.make(kMoeInter, kHidden),
                         arena.make(kHidden, kMoeInter)});
  }
  const std::vector<float> x = input(n);
  std::vector<float> out(x.size());
  strata::model::MoeScratch scratch;
  for (auto _ : state) {
    const auto s = strata::model::moe_forward(config, w, x.data(), n, out.data(), scratch, pool);
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  int64_t hit = 0;  // experts this batch reads
  for (int64_t e = 0; e < kExperts; ++e)
    hit += scratch.expert_begin[e + 1] > scratch.expert_begin[e];
  state.counters["experts_hit"] = static_cast<double>(hit);
  count(state, n, 6.0 * kHidden * kDenseInter + 2.0 * kHidden * kExperts);
}

void BM_DenseFfnSameActiveFlops(benchmark::State& state) {
  const int64_t n = state.range(0);
  strata::ThreadPool pool(2);
  Weights arena;
  const TensorView gate = arena.make(kDenseInter, kHidden), up = arena.make(kDenseInter, kHidden);
  const TensorView down = arena.make(kHidden, kDenseInter);
  const std::vector<float> x = input(n);
  std::vector<float> g(static_cast<size_t>(n * kDenseInter)), u(g.size()), out(x.size());
  for (auto _ : state) {
    (void)strata::cpu::linear(x.data(), gate, TensorView{}, g.data(), n, pool);
    (void)strata::cpu::linear(x.data(), up, TensorView{}, u.data(), n, pool);
    (void)strata::cpu::silu_and_mul(g.data(), u.data(), g.data(), n * kDenseInter, pool);
    (void)strata::cpu::linear(g.data(), down, TensorView{}, out.data(), n, pool);
    benchmark::DoNotOptimize(out.data());
  }
  count(state, n, 6.0 * kHidden * kDenseInter);
}

// 1 token (decode), a small decode batch, a prefill chunk.
BENCHMARK(BM_MoeBlock)->Arg(1)->Arg(16)->Arg(256)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DenseFfnSameActiveFlops)
    ->Arg(1)
    ->Arg(16)
    ->Arg(256)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
