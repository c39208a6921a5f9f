// Micro-benchmarks of the CPU kernels: paged decode attention (bytes of K/V read per second, the
// number to compare with the machine's copy bandwidth) and linear (weight bytes and flops).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
#include "kv/kv_layout.h"

namespace strata::cpu {
namespace {

constexpr int kThreads = 2;

// One decode row per sequence over kv_len cached tokens; Llama-style GQA 32/8, head_dim 128.
void BM_PagedDecodeAttentionCpu(benchmark::State& state) {
  const auto kv_len = static_cast<int32_t>(state.range(0));
  const auto num_seqs = static_cast<int32_t>(state.range(1));
  const auto dtype = static_cast<DType>(state.range(2));
  const int32_t block_size = 16, num_q_heads = 32, num_kv_heads = 8, head_dim = 128;
  const kv::KvLayout kv_layout(kv::KvSpec{1, num_kv_heads, head_dim, dtype}, block_size);
  const int32_t blocks_per_seq = (kv_len + block_size - 1) / block_size;
  const int32_t num_blocks = num_seqs * blocks_per_seq + 1;
  std::vector<uint8_t> pool_bytes(static_cast<size_t>(kv_layout.pool_bytes(num_blocks)), 0);
  std::vector<int32_t> indptr(1, 0), indices(static_cast<size_t>(num_blocks - 1)), last_len;
  std::iota(indices.begin(), indices.end(), 1);
  std::vector<int32_t> q_indptr(1, 0);
  for (int32_t s = 0; s < num_seqs; ++s) {
    indptr.push_back(indptr.back() + blocks_per_seq);
    last_len.push_back(kv_len - (blocks_per_seq - 1) * block_size);
    q_indptr.push_back(s + 1);
  }
  std::vector<float> q(static_cast<size_t>(num_seqs) * num_q_heads * head_dim, 0.01f);
  std::vector<float> out(q.size());
  AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.q_indptr = q_indptr.data();
  p.layout = PagedKvLayout{indptr.data(), indices.data(), last_len.data(), num_seqs, block_size};
  p.cache = kv_layout.layer_view(pool_bytes.data(), 0);
  p.num_q_heads = num_q_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  ThreadPool pool(kThreads);
  for (auto _ : state) {
    if (!paged_attention(p, pool).ok()) state.SkipWithError("paged_attention failed");
    benchmark::DoNotOptimize(out.data());
  }
  const double kv_bytes = 2.0 * num_seqs * kv_len * num_kv_heads * head_dim * dtype_size(dtype);
  state.counters["GB/s"] = benchmark::Counter(
      kv_bytes * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PagedDecodeAttentionCpu)
    ->ArgNames({"kv_len", "seqs", "dtype"})
    ->Args({1024, 1, static_cast<int64_t>(DType::kF32)})
    ->Args({4096, 1, static_cast<int64_t>(DType::kF32)})
    ->Args({4096, 1, static_cast<int64_t>(DType::kBF16)})
    ->Args({1024, 8, static_cast<int64_t>(DType::kBF16)})
    ->UseRealTime();

// out[m, n] = x[m, k] W[n, k]^T: m = 1 is a decode step (bandwidth bound), m = 64 a prefill chunk.
void BM_LinearCpu(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto dtype = static_cast<DType>(state.range(3));
  std::vector<uint8_t> w(static_cast<size_t>(n * k * dtype_size(dtype)), 0x3c);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), out(static_cast<size_t>(m * n));
  TensorView weight;
  weight.data = w.data();
  weight.dtype = dtype;
  weight.rank = 2;
  weight.shape = {n, k, 0, 0};
  ThreadPool pool(kThreads);
  for (auto _ : state) {
    if (!linear(x.data(), weight, TensorView{}, out.data(), m, pool).ok()) {
      state.SkipWithError("linear failed");
    }
    benchmark::DoNotOptimize(out.data());
  }
  const auto iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(w.size()) * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * iters / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearCpu)
    ->ArgNames({"m", "n", "k", "dtype"})
    ->Args({1, 4096, 4096, static_cast<int64_t>(DType::kF32)})
    ->Args({1, 4096, 4096, static_cast<int64_t>(DType::kBF16)})
    ->Args({64, 4096, 4096, static_cast<int64_t>(DType::kBF16)})
    ->UseRealTime();

}  // namespace
}  // namespace strata::cpu
