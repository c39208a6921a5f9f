// Micro-benchmarks of the KV space layer: the block pool's allocate/free round trip (plain, and
// evicting cached blocks), building a batch's paged layout (kv_indptr / kv_indices /
// kv_last_page_len + slot mapping) from its block tables, block hashing, prefix lookup at 0 % and
// 100 % hits, the whole prefix-caching overhead of a request that never hits, and pool
// utilization under a mixed-length workload, paged against the contiguous-preallocation baseline.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <optional>
#include <random>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/contiguous_allocator.h"
#include "kv/kv_accounting.h"
#include "kv/block_mover.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_tiers.h"
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

// allocate(n) + register + free with prefix caching on and every free block cached: each
// allocated block evicts one (hash-index erase + BlockRemoved) and is cached again. Items: blocks.
void BM_BlockPool_AllocateEvictFree(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  constexpr int32_t kBs = 16;
  constexpr int32_t kNumBlocks = 4096 + 1;
  BlockPool pool(BlockPoolConfig{kNumBlocks, kBs, /*enable_prefix_caching=*/true, nullptr});
  BlockHasher hasher;
  // A ring of distinct block contents, twice the pool, so a block is never cached twice.
  std::vector<std::vector<int32_t>> tokens(size_t{2} * kNumBlocks, std::vector<int32_t>(kBs));
  std::vector<BlockHash> hashes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int32_t t = 0; t < kBs; ++t)
      tokens[i][static_cast<size_t>(t)] = static_cast<int32_t>(i) * kBs + t;
    hashes.push_back(hasher.hash(nullptr, tokens[i], {}));
  }
  size_t next = 0;
  auto cycle = [&] {
    std::optional<std::vector<BlockId>> blocks = pool.allocate(n);
    for (const BlockId b : *blocks) {
      (void)pool.cache_block(b, hashes[next], nullptr, kNullBlock, tokens[next], {});
      next = (next + 1) % tokens.size();
    }
    pool.free(*blocks);
  };
  while (pool.num_cached_blocks() < kNumBlocks - 1) cycle();  // fill the cache
  for (auto _ : state) cycle();
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["evictions/iter"] =
      static_cast<double>(pool.num_evictions()) / static_cast<double>(state.iterations() + 1);
}
BENCHMARK(BM_BlockPool_AllocateEvictFree)->Arg(1)->Arg(16)->Arg(256);

// One SHA-256 block hash; range(0) is the block size. Items: blocks; bytes: token ids hashed.
void BM_BlockHasher_Hash(benchmark::State& state) {
  const auto bs = static_cast<int32_t>(state.range(0));
  BlockHasher hasher;
  std::vector<int32_t> tokens(static_cast<size_t>(bs), 7);
  BlockHash parent = hasher.hash(nullptr, tokens, {});
  for (auto _ : state) {
    parent = hasher.hash(&parent, tokens, {});
    benchmark::DoNotOptimize(parent);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * bs * static_cast<int64_t>(sizeof(int32_t)));
}
BENCHMARK(BM_BlockHasher_Hash)->Arg(16)->Arg(128);

std::vector<int32_t> prompt_tokens(int32_t n, int32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 128000);
  return t;
}

// A manager whose cache holds 64 other prompts of n tokens (and, with hit, the queried one).
KvCacheManager filled_manager(int32_t n, const std::vector<int32_t>& query, bool hit) {
  constexpr int32_t kBs = 16;
  KvCacheManager m(
      KvCacheConfig{.block_size = kBs, .groups = {{KvGroupSpec{}, 66 * (n / kBs + 1) + 1}}});
  for (int32_t i = 0; i <= 64; ++i) {
    const std::vector<int32_t> p = i == 64 ? query : prompt_tokens(n, 1000 + i);
    if (i == 64 && !hit) break;
    BlockTable t(kBs);
    if (!m.allocate_slots(t, n)) std::abort();
    m.cache_full_blocks(t, p, n, {});
    m.free(t);
  }
  return m;
}

// find_cached_prefix on an n-token prompt. range(1) = 1: the whole prompt is cached (n / 16 - 1
// or so blocks hash and confirm); 0: a miss at the first block (one hash, one probe).
void BM_PrefixLookup(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  const bool hit = state.range(1) != 0;
  const std::vector<int32_t> query = prompt_tokens(n, 1);
  KvCacheManager m = filled_manager(n, query, hit);
  int64_t hit_tokens = 0;
  for (auto _ : state) {
    const PrefixHit h = m.find_cached_prefix(query, {});
    hit_tokens = h.num_tokens;
    benchmark::DoNotOptimize(h.blocks().data());
  }
  state.counters["hit_tokens"] = static_cast<double>(hit_tokens);
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_PrefixLookup)->Args({1024, 0})->Args({1024, 1})->Args({8192, 0})->Args({8192, 1});

// What the KV tiers' prefetch costs a waiting request each step in which blocks left the pool:
// the walk of its n-token prompt (hashes kept from its first walk) through the pool's cached
// prefix -- here all of it -- to where the tiers would take over. Scheduler::kPrefetchLookahead
// waiting requests walk per such step. Items: tokens.
void BM_TierPrefetchWalk(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  constexpr int32_t kBs = 16;
  const std::vector<int32_t> query = prompt_tokens(n, 1);
  const KvSpec spec{1, 1, 8, DType::kF32};
  KvCacheManager m(KvCacheConfig{.block_size = kBs,
                                 .groups = {{KvGroupSpec::full(spec), n / kBs + 2}}});
  {
    BlockTable t(kBs);
    if (!m.allocate_slots(t, n)) std::abort();
    m.cache_full_blocks(t, query, n, {});
    m.free(t);
  }
  const KvLayout layout(spec, kBs);
  HostKvBuffer pool(layout, m.pool().num_blocks());
  HostBlockMover mover(pool);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "strata_kv_bench_tiers";
  auto tiers = KvTiers::create(KvTierConfig{.host_bytes = 64 * layout.block_bytes(),
                                            .disk_path = dir.string(),
                                            .disk_bytes = int64_t{1} << 30},
                               m, mover);
  if (!tiers.ok()) std::abort();
  PrefetchState prefetch;
  for (auto _ : state) {
    (*tiers)->on_evicted({});  // blocks left the pool: the next prefetch walks again
    (*tiers)->prefetch(query, {}, prefetch);
    benchmark::DoNotOptimize(prefetch.ticket);
  }
  state.SetItemsProcessed(state.iterations() * n);
  tiers.value().reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_TierPrefetchWalk)->Arg(8192)->Arg(131072);

// Everything prefix caching adds to a request that never hits, beside the same request with it
// off (range(1)): lookup, allocate, hash + register every full block, free. Items: tokens.
void BM_Request_NoHitOverhead(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  const bool caching = state.range(1) != 0;
  constexpr int32_t kBs = 16;
  KvCacheManager m(KvCacheConfig{.block_size = kBs,
                                 .enable_prefix_caching = caching,
                                 .groups = {{KvGroupSpec{}, 4 * (n / kBs + 1) + 1}}});
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(64);
  for (int32_t i = 0; i < 64; ++i) prompts.push_back(prompt_tokens(n, 50 + i));
  size_t i = 0;
  for (auto _ : state) {
    const std::vector<int32_t>& p = prompts[i++ % prompts.size()];
    BlockTable t(kBs);
    const PrefixHit h = m.find_cached_prefix(p, {});
    if (!m.allocate_slots(t, n - h.num_tokens, &h)) std::abort();
    m.cache_full_blocks(t, p, n, {});
    m.free(t);
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Request_NoHitOverhead)->Args({1024, 0})->Args({1024, 1});

// ---- utilization under a mixed-length workload
// ---------------------------------------------------
//
// A closed-loop serving simulation: requests of total length uniform in [32, 4064] tokens (mean
// 2048), or short-heavy (range(1) = 1: 32 + exponential, mean ~510); max_model_len 4096; the
// first half prompt, the rest decoded one token per step; a
// finished request's slot is refilled from an endless queue. Paged: a request is admitted when
// its prompt's blocks are free, grows block by block, and the youngest running request is
// preempted (recompute) when a decode finds no block. Contiguous: a request reserves
// max_model_len slots up front (first fit) and is admitted only when such a range is free.
// Utilization = live token slots / pool capacity, averaged over steps 2000..10000.

constexpr int64_t kUtilCapacityTokens = 1 << 17;  // 131,072 token slots
constexpr int32_t kUtilMaxLen = 4096;
constexpr int kUtilWarmup = 2000;
constexpr int kUtilSteps = 10000;

struct SimRequest {
  int32_t len = 0;     // prompt + output
  int32_t done = 0;    // tokens with a slot
  int64_t offset = 0;  // contiguous only
  BlockTable table;
  explicit SimRequest(int32_t block_size) : table(block_size) {}
};

// Uniform in [32, 4064] (mean 2048), or short-heavy: 32 + exponential with mean 480, capped.
int32_t draw_len(std::mt19937_64& rng, bool short_heavy) {
  if (!short_heavy) return std::uniform_int_distribution<int32_t>(32, kUtilMaxLen - 32)(rng);
  const double x = 32.0 + std::exponential_distribution<double>(1.0 / 480.0)(rng);
  return static_cast<int32_t>(std::min(x, static_cast<double>(kUtilMaxLen - 32)));
}

void BM_Utilization_Paged(benchmark::State& state) {
  const auto bs = static_cast<int32_t>(state.range(0));
  const bool short_heavy = state.range(1) != 0;
  double util_sum = 0, packing_sum = 0, mean_len_sum = 0;
  int64_t preemptions = 0;
  for (auto _ : state) {
    std::mt19937_64 rng(7);
    KvCacheManager m(KvCacheConfig{
        .block_size = bs,
        .enable_prefix_caching = false,
        .groups = {{KvGroupSpec{}, static_cast<int32_t>(kUtilCapacityTokens / bs) + 1}}});
    std::deque<SimRequest> running;
    std::deque<int32_t> queue;
    util_sum = packing_sum = mean_len_sum = 0;
    preemptions = 0;
    for (int step = 0; step < kUtilSteps; ++step) {
      // Admit while the next prompt fits (leaving a block per running request for its decode).
      while (true) {
        if (queue.empty()) queue.push_back(draw_len(rng, short_heavy));
        SimRequest r(bs);
        r.len = queue.front();
        const int32_t prompt = r.len / 2;
        if (m.num_blocks_to_allocate(r.table, prompt) + static_cast<int32_t>(running.size()) >
                m.pool().num_free_blocks() ||
            !m.allocate_slots(r.table, prompt)) {
          break;
        }
        queue.pop_front();
        r.done = prompt;
        running.push_back(std::move(r));
      }
      // One decode token each; preempt the youngest when a block is missing.
      for (size_t i = 0; i < running.size(); ++i) {
        while (!m.allocate_slots(running[i].table, 1)) {
          m.free(running.back().table);
          queue.push_front(running.back().len);
          running.pop_back();
          ++preemptions;
          if (i >= running.size()) break;
        }
        if (i < running.size()) ++running[i].done;
      }
      std::vector<const BlockTable*> tables;
      int64_t len_sum = 0;
      for (const SimRequest& r : running) {
        tables.push_back(&r.table);
        len_sum += r.done;
      }
      if (step >= kUtilWarmup) {
        const PoolUsage u = measure_usage(m.pool(), tables);
        util_sum += u.utilization();
        packing_sum += static_cast<double>(u.live_slots) / static_cast<double>(u.allocated_slots);
        mean_len_sum += static_cast<double>(len_sum) / static_cast<double>(running.size());
      }
      for (size_t i = 0; i < running.size();) {
        if (running[i].done >= running[i].len) {
          m.free(running[i].table);
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    }
  }
  const double n = kUtilSteps - kUtilWarmup;
  state.counters["utilization"] = util_sum / n;
  state.counters["live/allocated"] = packing_sum / n;
  state.counters["mean_len"] = mean_len_sum / n;
  state.counters["bound"] = 1.0 - bs / (2.0 * mean_len_sum / n);
  state.counters["preemptions"] = static_cast<double>(preemptions);
}
BENCHMARK(BM_Utilization_Paged)
    ->Args({16, 0})
    ->Args({128, 0})
    ->Args({16, 1})
    ->Args({128, 1})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

void BM_Utilization_Contiguous(benchmark::State& state) {
  const bool short_heavy = state.range(0) != 0;
  double util_sum = 0;
  for (auto _ : state) {
    std::mt19937_64 rng(7);
    ContiguousAllocator a(kUtilCapacityTokens);
    std::vector<SimRequest> running;
    util_sum = 0;
    int32_t next_len = draw_len(rng, short_heavy);
    for (int step = 0; step < kUtilSteps; ++step) {
      while (const std::optional<int64_t> offset = a.reserve(kUtilMaxLen)) {
        SimRequest r(16);
        r.len = next_len;
        r.done = next_len / 2;
        r.offset = *offset;
        running.push_back(std::move(r));
        next_len = draw_len(rng, short_heavy);
      }
      int64_t live = 0;
      for (SimRequest& r : running) live += ++r.done;
      if (step >= kUtilWarmup) util_sum += static_cast<double>(live) / kUtilCapacityTokens;
      for (size_t i = 0; i < running.size();) {
        if (running[i].done >= running[i].len) {
          a.release(running[i].offset, kUtilMaxLen);
          running[i] = std::move(running.back());
          running.pop_back();
        } else {
          ++i;
        }
      }
    }
    a.check_invariants();
  }
  state.counters["utilization"] = util_sum / (kUtilSteps - kUtilWarmup);
}
BENCHMARK(BM_Utilization_Contiguous)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::kv
