// Micro-benchmarks of the CPU kernels: paged decode attention (bytes of K/V read per second, the
// number to compare with the machine's copy bandwidth), paged prefill attention and linear
// (flops, against the FP32 / BF16 peaks measured in the same binary).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/avx512_target.h"
#include "kernels/cpu/cpu_isa.h"
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
  // Random bits, not zeros (METHOD.md): F32/BF16/F16 patterns drawn from a fixed-seed LCG, with
  // the exponent bits masked so that every value is finite and moderate. FP8/INT8 pools read the
  // same bytes as codes and fp16 scales (scales finite; some fp8 codes are NaN: timing only).
  std::vector<uint8_t> pool_bytes(static_cast<size_t>(kv_layout.pool_bytes(num_blocks)));
  uint64_t lcg = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i + 1 < pool_bytes.size(); i += 2) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    const auto bits = static_cast<uint16_t>((lcg >> 48) & 0xbbffu);  // exponent < max: finite
    pool_bytes[i] = static_cast<uint8_t>(bits);
    pool_bytes[i + 1] = static_cast<uint8_t>(bits >> 8);
  }
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
  // INT4: each sequence's last block also in an F32 newest-blocks pool (R = 1), read at full
  // precision by its decode row.
  const kv::KvLayout newest_layout(kv::KvSpec{1, num_kv_heads, head_dim, DType::kF32}, block_size);
  std::vector<float> newest_pool;
  std::vector<int32_t> newest_indptr(1, 0), newest_indices, newest_first;
  if (dtype == DType::kI4) {
    newest_pool.assign(static_cast<size_t>(newest_layout.pool_bytes(num_seqs + 1) / 4), 0.01f);
    for (int32_t s = 0; s < num_seqs; ++s) {
      newest_indices.push_back(s + 1);
      newest_indptr.push_back(s + 1);
      newest_first.push_back(blocks_per_seq - 1);
    }
    p.newest.layout = p.layout;
    p.newest.layout.kv_indptr = newest_indptr.data();
    p.newest.layout.kv_indices = newest_indices.data();
    p.newest.layout.first_block = newest_first.data();
    p.newest.blocks = 1;
    p.newest.cache = newest_layout.layer_view(newest_pool.data(), 0);
  }
  p.num_q_heads = num_q_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  ThreadPool pool(kThreads);
  for (auto _ : state) {
    if (!paged_attention(p, pool).ok()) state.SkipWithError("paged_attention failed");
    benchmark::DoNotOptimize(out.data());
  }
  // Bytes read: codes plus their scales (and INT4's zero points) per token (kv_layout.h).
  const double kv_bytes = static_cast<double>(num_seqs) * kv_len * kv_layout.bytes_per_token();
  state.counters["GB/s"] = benchmark::Counter(
      kv_bytes * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PagedDecodeAttentionCpu)
    ->ArgNames({"kv_len", "seqs", "dtype"})
    ->Args({1024, 1, static_cast<int64_t>(DType::kF32)})
    ->Args({4096, 1, static_cast<int64_t>(DType::kF32)})
    ->Args({4096, 1, static_cast<int64_t>(DType::kBF16)})
    ->Args({1024, 8, static_cast<int64_t>(DType::kBF16)})
    ->Args({4096, 1, static_cast<int64_t>(DType::kF8E4M3)})
    ->Args({4096, 1, static_cast<int64_t>(DType::kI8)})
    ->Args({1024, 8, static_cast<int64_t>(DType::kI8)})
    ->Args({4096, 1, static_cast<int64_t>(DType::kI4)})
    ->Args({1024, 8, static_cast<int64_t>(DType::kI4)})
    ->UseRealTime();

// One whole prefill of `tokens` query rows over their own K/V (causal), the Qwen2-0.5B attention
// shape: 14 query / 2 KV heads, head dim 64, block size 16, on one instruction-set path with up
// to `tile` query tokens per task (1: a task per token, the structure before query tiles). Flops
// count q K^T and p V over the causal triangle (2 x 2 x head_dim per query head and attended
// key), masked work excluded: read GFLOP/s against BM_Fp32FmaPeak / BM_Bf16DotPeak of the run.
void BM_PagedPrefillAttentionCpu(benchmark::State& state) {
  const auto tokens = static_cast<int32_t>(state.range(0));
  const auto dtype = static_cast<DType>(state.range(1));
  const auto isa = static_cast<CpuIsa>(state.range(2));
  const auto tile = static_cast<int32_t>(state.range(3));
  if (!cpu_supports(isa)) {
    state.SkipWithError("this CPU lacks the path");
    return;
  }
  const int32_t block_size = 16, num_q_heads = 14, num_kv_heads = 2, head_dim = 64;
  const kv::KvLayout kv_layout(kv::KvSpec{1, num_kv_heads, head_dim, dtype}, block_size);
  const int32_t num_blocks = (tokens + block_size - 1) / block_size;
  // Values drawn from a fixed-seed LCG in [-1, 1), written through append_kv so that every cache
  // dtype holds what the engine would store.
  uint64_t lcg = 0x9e3779b97f4a7c15ull;
  const auto next = [&lcg] {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(lcg >> 40) / static_cast<double>(1 << 23)) - 1.0f;
  };
  const size_t kv_elems = static_cast<size_t>(tokens) * num_kv_heads * head_dim;
  std::vector<float> k(kv_elems), v(kv_elems);
  std::vector<float> q(static_cast<size_t>(tokens) * num_q_heads * head_dim);
  for (float& x : k) x = next();
  for (float& x : v) x = next();
  for (float& x : q) x = next();
  std::vector<uint8_t> pool_bytes(static_cast<size_t>(kv_layout.pool_bytes(num_blocks + 1)));
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  std::iota(slots.begin(), slots.end(), int64_t{block_size});  // block 0 stays unused
  ThreadPool pool(kThreads);
  AppendKvParams a;
  a.k = k.data();
  a.v = v.data();
  a.slot_mapping = slots.data();
  a.num_tokens = tokens;
  a.cache = kv_layout.layer_view(pool_bytes.data(), 0);
  if (!append_kv(a, pool).ok()) {
    state.SkipWithError("append_kv failed");
    return;
  }
  std::vector<int32_t> indptr = {0, num_blocks}, indices(static_cast<size_t>(num_blocks));
  std::iota(indices.begin(), indices.end(), 1);
  std::vector<int32_t> last_len = {tokens - (num_blocks - 1) * block_size};
  std::vector<int32_t> q_indptr = {0, tokens};
  std::vector<float> out(q.size());
  AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.q_indptr = q_indptr.data();
  p.layout = PagedKvLayout{indptr.data(), indices.data(), last_len.data(), 1, block_size};
  p.cache = a.cache;
  p.num_q_heads = num_q_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (auto _ : state) {
    if (!detail::paged_attention_with(p, pool, isa, tile).ok()) {
      state.SkipWithError("paged_attention failed");
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double attended = static_cast<double>(tokens) * (tokens + 1) / 2.0;
  const double flops = 4.0 * head_dim * num_q_heads * attended;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
void prefill_attention_args(benchmark::internal::Benchmark* b) {
  constexpr auto kF32 = static_cast<int64_t>(DType::kF32);
  constexpr auto kBf16Kv = static_cast<int64_t>(DType::kBF16);
  constexpr int64_t kTile = kAttentionTileTokens;
  for (const auto isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kPortable}) {
    const auto i = static_cast<int64_t>(isa);
    for (const int64_t dtype : {kF32, kBf16Kv}) {
      for (const int64_t tile : {kTile, int64_t{1}, int64_t{8}}) b->Args({512, dtype, i, tile});
      b->Args({2048, dtype, i, kTile});
    }
  }
}
BENCHMARK(BM_PagedPrefillAttentionCpu)
    ->ArgNames({"tokens", "dtype", "isa", "tile"})
    ->Apply(prefill_attention_args)
    ->UseRealTime();

// out[m, n] = x[m, k] W[n, k]^T: m = 1 is a decode step (bandwidth bound), m = 64 a prefill chunk.
// Only weights larger than the last-level cache (the LM head row) measure memory bandwidth; the
// smaller ones are re-read from cache on every iteration.
void BM_LinearCpu(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto dtype = static_cast<DType>(state.range(3));
  const auto isa = static_cast<CpuIsa>(state.range(4));
  if (!cpu_supports(isa)) {
    state.SkipWithError("this CPU lacks the path");
    return;
  }
  std::vector<uint8_t> w(static_cast<size_t>(n * k * dtype_size(dtype)), 0x3c);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), out(static_cast<size_t>(m * n));
  TensorView weight;
  weight.data = w.data();
  weight.dtype = dtype;
  weight.rank = 2;
  weight.shape = {n, k, 0, 0};
  ThreadPool pool(kThreads);
  for (auto _ : state) {
    if (!detail::linear_with_isa(isa, x.data(), weight, TensorView{}, out.data(), m, pool).ok()) {
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
constexpr auto kPortable = static_cast<int64_t>(CpuIsa::kPortable);
constexpr auto kAvx2 = static_cast<int64_t>(CpuIsa::kAvx2);
constexpr auto kAvx512 = static_cast<int64_t>(CpuIsa::kAvx512);
constexpr auto kBf16 = static_cast<int64_t>(DType::kBF16);
BENCHMARK(BM_LinearCpu)
    ->ArgNames({"m", "n", "k", "dtype", "isa"})
    ->Args({1, 4096, 4096, static_cast<int64_t>(DType::kF32), kPortable})
    ->Args({1, 4096, 4096, static_cast<int64_t>(DType::kF32), kAvx2})
    ->Args({1, 4096, 4096, kBf16, kPortable})
    ->Args({1, 4096, 4096, kBf16, kAvx2})
    ->Args({1, 4864, 896, kBf16, kAvx2})        // Qwen2-0.5B gate/up projection, one decode row
    ->Args({1, 896, 4864, kBf16, kAvx2})        // its down projection
    ->Args({1, 151936, 896, kBf16, kPortable})  // its LM head: 272 MB, beyond any cache
    ->Args({1, 151936, 896, kBf16, kAvx2})
    ->Args({64, 4096, 4096, kBf16, kPortable})
    ->Args({64, 4096, 4096, kBf16, kAvx2})
    ->Args({1, 151936, 896, kBf16, kAvx512})   // the LM head, one decode row
    ->Args({16, 151936, 896, kBf16, kAvx512})  // the LM head, 16 streams
    ->Args({16, 4864, 896, kBf16, kAvx2})      // gate/up, 16 streams
    ->Args({16, 896, 4864, kBf16, kAvx2})      // down, 16 streams
    ->Args({512, 4864, 896, kBf16, kAvx2})     // gate/up, a 512-token prefill
    ->Args({512, 896, 4864, kBf16, kAvx2})     // down, a 512-token prefill
    ->Args({512, 896, 896, kBf16, kAvx2})      // q/o, a 512-token prefill
    ->Args({16, 4864, 896, kBf16, kAvx512})
    ->Args({16, 896, 4864, kBf16, kAvx512})   // down, 16 streams
    ->Args({512, 4864, 896, kBf16, kAvx512})  // gate/up, a 512-token prefill
    ->Args({64, 4096, 4096, kBf16, kAvx512})
    ->UseRealTime();

// The BF16 path (LinearPrecision::kBf16: activations rounded to BF16, vdpbf16ps) on the shapes
// of a Qwen2-0.5B prefill and decode; read beside BM_LinearCpu's AVX-512 rows and
// BM_Bf16DotPeak in the same run.
void BM_LinearBf16Cpu(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  if (!cpu_supports_avx512_bf16()) {
    state.SkipWithError("this CPU lacks AVX-512 BF16");
    return;
  }
  std::vector<uint8_t> w(static_cast<size_t>(n * k * 2), 0x3c);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), out(static_cast<size_t>(m * n));
  TensorView weight;
  weight.data = w.data();
  weight.dtype = DType::kBF16;
  weight.rank = 2;
  weight.shape = {n, k, 0, 0};
  ThreadPool pool(kThreads);
  for (auto _ : state) {
    if (!detail::linear_bf16(x.data(), weight, TensorView{}, out.data(), m, pool).ok()) {
      state.SkipWithError("linear_bf16 failed");
    }
    benchmark::DoNotOptimize(out.data());
  }
  const auto iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(w.size()) * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * iters / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearBf16Cpu)
    ->ArgNames({"m", "n", "k"})
    ->Args({1, 151936, 896})  // the LM head, one decode row
    ->Args({1, 4864, 896})    // gate/up, one decode row
    ->Args({16, 4864, 896})   // gate/up, 16 streams
    ->Args({512, 4864, 896})  // gate/up, a 512-token prefill
    ->Args({512, 896, 4864})  // down, a 512-token prefill
    ->Args({512, 896, 896})   // q / o, a 512-token prefill
    ->UseRealTime();

#if defined(__x86_64__)
// The BF16 dot-product ceiling: 12 independent vdpbf16ps chains (more than latency x throughput),
// register operands only, 64 flops each (32 multiply-adds). ->Threads(n) runs n copies at once.
__attribute__((target("avx512f,avx512bf16"))) void BM_Bf16DotPeak(benchmark::State& state) {
  if (!cpu_supports_avx512_bf16()) {
    state.SkipWithError("this CPU lacks AVX-512 BF16");
    return;
  }
  constexpr int kChains = 12;
  constexpr int64_t kIters = 1 << 14;
  const auto a = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0 in BF16
  __m512 acc[kChains];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (auto _ : state) {
    for (int64_t i = 0; i < kIters; ++i) {
      for (auto& v : acc) v = _mm512_dpbf16_ps(v, a, a);
    }
    benchmark::DoNotOptimize(acc);
  }
  // Summed over ->Threads(n)'s threads by Google Benchmark: the total rate.
  state.counters["GFLOP/s"] = benchmark::Counter(
      64.0 * kChains * kIters * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Bf16DotPeak)->Threads(1)->Threads(2)->UseRealTime();
#endif

#if defined(__x86_64__)
// The FP32 fused multiply-add ceiling, as BM_Bf16DotPeak: 12 independent vfmadd231ps chains on
// registers, 32 flops each (16 multiply-adds).
__attribute__((target("avx512f"))) void BM_Fp32FmaPeak(benchmark::State& state) {
  if (!cpu_supports(CpuIsa::kAvx512)) {
    state.SkipWithError("this CPU lacks AVX-512");
    return;
  }
  constexpr int kChains = 12;
  constexpr int64_t kIters = 1 << 14;
  const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-7f);
  __m512 acc[kChains];
  for (auto& v : acc) v = _mm512_setzero_ps();
  for (auto _ : state) {
    for (int64_t i = 0; i < kIters; ++i) {
      for (auto& v : acc) v = _mm512_fmadd_ps(a, b, v);
    }
    benchmark::DoNotOptimize(acc);
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(32.0 * kChains * kIters * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Fp32FmaPeak)->Threads(1)->Threads(2)->UseRealTime();
#endif

// One empty parallel_for over the pool's threads: the fixed cost every kernel call pays (a decode
// step of a 24-layer model makes a few hundred).
void BM_ThreadPoolParallelFor(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<int64_t> sink(64);
  for (auto _ : state) {
    pool.parallel_for(pool.num_threads(),
                      [&](int64_t begin, int64_t) { sink[static_cast<size_t>(begin) * 8] += 1; });
  }
  benchmark::DoNotOptimize(sink.data());
}
BENCHMARK(BM_ThreadPoolParallelFor)->Arg(2)->UseRealTime();

// The machine's memory read bandwidth at the same thread count: the ceiling for the GB/s above.
// Sums a 512 MiB float buffer (far beyond the caches) in 8 lanes per thread.
void BM_MemoryReadCpu(benchmark::State& state) {
  const size_t n = size_t{128} << 20;
  std::vector<float> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i & 1023) * 1e-3f;
  ThreadPool pool(kThreads);
  std::vector<float> partial(static_cast<size_t>(kThreads) * 16);
  for (auto _ : state) {
    pool.parallel_for(kThreads, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const size_t lo = n / kThreads * static_cast<size_t>(t), hi = lo + n / kThreads;
        float lanes[8] = {};
        for (size_t i = lo; i < hi; i += 8) {
          for (int j = 0; j < 8; ++j) lanes[j] += data[i + static_cast<size_t>(j)];
        }
        for (int j = 0; j < 8; ++j) partial[static_cast<size_t>(t) * 16 + static_cast<size_t>(j)] = lanes[j];
      }
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(n * sizeof(float)) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MemoryReadCpu)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace strata::cpu
