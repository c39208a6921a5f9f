// Micro-benchmarks of the KV space layer: the block pool's allocate/free round trip, and building
// a batch's paged layout (kv_indptr / kv_indices / kv_last_page_len + slot mapping) from its block
// tables, the per-step host work that sits in front of every attention launch.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "core/ids.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/paged_layout_builder.h"

namespace strata::kv {
namespace {

// Leaves the free queue in a seeded random order, as after many steps of real traffic, so block
// tables get scattered ids and metadata accesses are not sequential.
void scramble_free_queue(BlockPool& pool, uint64_t seed) {
  std::optional<std::vector<BlockId>> all = pool.allocate(pool.num_free_blocks());
  std::mt19937_64 rng(seed);
  std::shuffle(all->begin(), all->end(), rng);
  pool.free(*all);
}

// One allocate(n) + free of the same n blocks per iteration; items are blocks.
void BM_BlockPool_AllocateFree(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  BlockPool pool(16384 + 1);
  scramble_free_queue(pool, 1);
  for (auto _ : state) {
    std::optional<std::vector<BlockId>> blocks = pool.allocate(n);
    benchmark::DoNotOptimize(blocks->data());
    pool.free(*blocks);
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_BlockPool_AllocateFree)->Arg(1)->Arg(16)->Arg(256)->Arg(4096);

// A batch of 256 sequences x 1024 tokens with block size 16 (16384 blocks). range(0) is the number
// of tokens each sequence writes this step: 1 for a decode batch, 1024 for a whole-prompt prefill.
// Items are sequences; kv_tokens/s counts the tokens the layout addresses.
void BM_PagedLayoutBuilder_Build(benchmark::State& state) {
  constexpr int32_t kNumSeqs = 256;
  constexpr int32_t kKvLen = 1024;
  constexpr int32_t kBlockSize = 16;
  const auto num_new_tokens = static_cast<int32_t>(state.range(0));
  BlockPool pool(kNumSeqs * kKvLen / kBlockSize + 1);
  scramble_free_queue(pool, 2);
  std::vector<BlockTable> tables;
  tables.reserve(kNumSeqs);
  for (int32_t s = 0; s < kNumSeqs; ++s) {
    tables.emplace_back(kBlockSize);
    if (!tables.back().append_slots(pool, kKvLen)) {
      state.SkipWithError("pool too small");
      return;
    }
  }
  PagedLayoutBuilder builder(kBlockSize);
  for (auto _ : state) {
    builder.clear();
    for (const BlockTable& table : tables) builder.add_sequence(table, kKvLen, num_new_tokens);
    benchmark::DoNotOptimize(builder.kv_indices().data());
    benchmark::DoNotOptimize(builder.slot_mapping().data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kNumSeqs);
  state.counters["kv_tokens/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kNumSeqs * kKvLen, benchmark::Counter::kIsRate);
  for (BlockTable& table : tables) table.release(pool);
}
BENCHMARK(BM_PagedLayoutBuilder_Build)->Arg(1)->Arg(1024);

}  // namespace
}  // namespace strata::kv
