// The KV host tier's way back into the GPU's pool against the PCIe link (docs/benchmarks.md, "KV
// tiers under the pool"): with a device pool and a host tier each holding a prompt of N blocks of
// a model's shape (Llama-3.1-8B by default: 2 MiB blocks), measures in one run
//
//   h2d / d2h       one cudaMemcpyAsync of the N blocks' bytes between the tier's pinned buffer
//                   and the pool: the link's rate, the limit the rows below are held to
//   mover up        CudaBlockMover::from_host of the N blocks (one run, and scattered slots)
//   xxh3 xT         the tier's checksum of the N blocks on T threads (what verifying costs)
//   down / promote  the real path: the pool evicts the prompt's cached blocks (KvTiers copies
//                   them down, checksummed), then KvTiers::promote brings the prompt back
//   overlap         a loop of bf16 GEMMs on another stream (about as long as the promotion)
//                   alone, then started with a promotion left running (promote_async): the share
//                   of the promotion's time hidden under the GEMMs is
//                   (promote + gemm - both) / promote
//
// Each row is the median of --repeats runs; GB/s of block bytes, and the ratio to h2d.
//
// Usage: strata_tier_copy_bench [--blocks N] [--layers L] [--kv-heads H] [--head-dim D]
//                               [--block-size B] [--repeats R] [--json]

#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "guarded_main.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kv/block_table.h"
#include "kv/host_tier.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_tiers.h"
#include "kv/tier_key.h"
#include "model/cuda/cuda_block_mover.h"

namespace {

using namespace strata;
using namespace strata::kv;
using Clock = std::chrono::steady_clock;

void die_if(bool bad, const std::string& what) {
  if (bad) {
    std::fprintf(stderr, "strata_tier_copy_bench: %s\n", what.c_str());
    std::exit(1);
  }
}

void check(cudaError_t err, const char* what) {
  die_if(err != cudaSuccess, std::string(what) + ": " + cudaGetErrorString(err));
}

double median_seconds(int repeats, const std::function<void()>& run) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    run();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  std::string name;
  double seconds = 0;
};

int run(int argc, char** argv) {
  CLI::App app{"The KV host tier's copies into the GPU pool against the PCIe link"};
  int32_t blocks = 2048, layers = 32, kv_heads = 8, head_dim = 128, block_size = 16, repeats = 5;
  bool json = false;
  app.add_option("--blocks", blocks, "the prompt's blocks")->check(CLI::Range(1, 1 << 20));
  app.add_option("--layers", layers)->check(CLI::Range(1, 1024));
  app.add_option("--kv-heads", kv_heads)->check(CLI::Range(1, 1024));
  app.add_option("--head-dim", head_dim)->check(CLI::Range(1, 1024));
  app.add_option("--block-size", block_size)->check(CLI::Range(1, 1024));
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 100));
  app.add_flag("--json", json, "one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);

  const KvSpec spec{layers, kv_heads, head_dim, DType::kBF16};
  const KvLayout layout(spec, block_size);
  const int64_t block_bytes = layout.block_bytes();
  const int32_t pool_blocks =
      blocks + 2;  // the prompt's blocks, its partial last one, the null block
  KvCacheManager cache(
      KvCacheConfig{.block_size = block_size, .groups = {{KvGroupSpec::full(spec), pool_blocks}}});
  Result<cuda::DeviceBuffer> pool =
      cuda::DeviceBuffer::allocate(static_cast<size_t>(pool_blocks * block_bytes));
  die_if(!pool.ok(), "device pool: " + pool.status().to_string());
  check(cudaMemset(pool->data(), 1, static_cast<size_t>(pool_blocks * block_bytes)), "memset");
  model::CudaBlockMover mover(pool->data(), pool_blocks, block_bytes);
  KvTierConfig config;
  config.host_bytes = (blocks + 16) * block_bytes;
  Result<std::unique_ptr<KvTiers>> made = KvTiers::create(config, cache, mover);
  die_if(!made.ok(), made.status().to_string());
  KvTiers& tiers = **made;

  // The prompt: cached, then evicted (written down) by an allocation of the whole pool.
  std::vector<int32_t> prompt(static_cast<size_t>(blocks) * static_cast<size_t>(block_size) + 1);
  std::iota(prompt.begin(), prompt.end(), 7);
  const auto n_tokens = static_cast<int32_t>(prompt.size());
  {
    BlockTable t(block_size);
    die_if(!cache.allocate_slots(t, n_tokens), "allocate the prompt");
    cache.cache_full_blocks(t, prompt, n_tokens, {});
    cache.free(t);
  }
  const auto evict_all = [&] {
    BlockTable t(block_size);
    die_if(!cache.allocate_slots(t, (pool_blocks - 1) * block_size), "allocate the pool");
    cache.free(t);
  };
  std::vector<Row> rows;
  const auto down_start = Clock::now();
  evict_all();
  rows.push_back({"down: evicted blocks to the host tier (checksummed)",
                  std::chrono::duration<double>(Clock::now() - down_start).count()});
  die_if(tiers.host().num_blocks() < blocks, "the host tier did not take the prompt");

  // The link: one copy of the N blocks' bytes each way between the tier's pinned buffer and the
  // pool (h2d first, so d2h writes the host slots back with the bytes they held: their checksums
  // still hold for promote below).
  const HostTier& host = tiers.host();
  const void* host_bytes = host.bytes(BlockId{0}).data();
  const auto bytes = static_cast<size_t>(blocks * block_bytes);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "stream");
  rows.push_back(
      {"h2d: one cudaMemcpyAsync, pinned host -> device", median_seconds(repeats, [&] {
         check(cudaMemcpyAsync(pool->data(), host_bytes, bytes, cudaMemcpyHostToDevice, stream),
               "h2d");
         check(cudaStreamSynchronize(stream), "sync");
       })});
  rows.push_back({"d2h: one cudaMemcpyAsync, device -> pinned host", median_seconds(repeats, [&] {
                    check(cudaMemcpyAsync(const_cast<void*>(host_bytes), pool->data(), bytes,
                                          cudaMemcpyDeviceToHost, stream),
                          "d2h");
                    check(cudaStreamSynchronize(stream), "sync");
                  })});

  // The mover, slots in order and scattered (a run of one block each).
  std::vector<BlockCopy> in_order, scattered;
  for (int32_t i = 0; i < blocks; ++i) in_order.push_back(BlockCopy{BlockId{i}, BlockId{i + 1}});
  scattered = in_order;
  std::mt19937 rng(5);
  std::shuffle(scattered.begin(), scattered.end(), rng);
  rows.push_back({"mover up: from_host, consecutive slots",
                  median_seconds(repeats, [&] { mover.from_host(in_order, host.buffer()); })});
  rows.push_back({"mover up: from_host, scattered slots",
                  median_seconds(repeats, [&] { mover.from_host(scattered, host.buffer()); })});

  // The checksums of the N blocks on T threads.
  for (const int threads : {1, 2, 4, 8, 16}) {
    ThreadPool pool_threads(threads);
    std::vector<uint64_t> sums(static_cast<size_t>(blocks));
    rows.push_back({"xxh3 x" + std::to_string(threads), median_seconds(repeats, [&] {
                      pool_threads.parallel_for(blocks, [&](int64_t b, int64_t e) {
                        for (int64_t i = b; i < e; ++i) {
                          sums[static_cast<size_t>(i)] =
                              tier_checksum(host.bytes(BlockId{static_cast<int32_t>(i)}));
                        }
                      });
                    })});
  }

  // The real way up: the prompt's pool hit is empty (evicted), promote brings every block back.
  const double up_before = tiers.stats().up_seconds;
  std::vector<double> promote_t;
  for (int r = 0; r < repeats; ++r) {
    evict_all();
    PrefixHit hit = cache.find_cached_prefix(prompt, {});
    die_if(hit.num_tokens != 0, "the prompt is still in the pool");
    const auto start = Clock::now();
    const KvTiers::Promoted p = tiers.promote(prompt, {}, hit);
    promote_t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    die_if(p.host_blocks != blocks, "promote brought " + std::to_string(p.host_blocks) + " of " +
                                        std::to_string(blocks) + " blocks");
  }
  std::sort(promote_t.begin(), promote_t.end());
  rows.push_back({"promote: KvTiers::promote of the prompt", promote_t[promote_t.size() / 2]});
  const double promote_s = rows.back().seconds;
  const double up_mean = (tiers.stats().up_seconds - up_before) / repeats;

  // The GEMM loop on its own stream, alone and beside a promotion left running.
  constexpr int64_t kDim = 4096;
  Result<cuda::Gemm> gemm = cuda::Gemm::create();
  die_if(!gemm.ok(), gemm.status().to_string());
  Result<cuda::DeviceBuffer> mats = cuda::DeviceBuffer::allocate(3 * kDim * kDim * 2);
  die_if(!mats.ok(), mats.status().to_string());
  check(cudaMemset(mats->data(), 0, 3 * kDim * kDim * 2), "memset");
  auto* m0 = static_cast<std::byte*>(mats->data());
  cuda::GemmParams gp;
  gp.a = m0;
  gp.w = m0 + kDim * kDim * 2;
  gp.d = m0 + 2 * kDim * kDim * 2;
  gp.lda = gp.ldw = gp.ldd = kDim;
  gp.m = gp.n = gp.k = kDim;
  cudaStream_t compute = nullptr;
  check(cudaStreamCreate(&compute), "stream");
  const auto gemms = [&](int n) {
    for (int i = 0; i < n; ++i) die_if(!gemm->run(gp, compute).ok(), "gemm");
  };
  gemms(4);  // the algorithm chosen, the clocks up
  check(cudaStreamSynchronize(compute), "sync");
  const double one = median_seconds(repeats,
                                    [&] {
                                      gemms(10);
                                      check(cudaStreamSynchronize(compute), "sync");
                                    }) /
                     10;
  const int n_gemms = std::max(1, static_cast<int>(promote_s / one));
  rows.push_back({"gemm loop alone (bf16 4096^3 x " + std::to_string(n_gemms) + ")",
                  median_seconds(repeats, [&] {
                    gemms(n_gemms);
                    check(cudaStreamSynchronize(compute), "sync");
                  })});
  const double gemm_s = rows.back().seconds;
  std::vector<double> both_t;
  const int owner = 0;
  for (int r = 0; r < repeats; ++r) {
    evict_all();
    PrefixHit hit = cache.find_cached_prefix(prompt, {});
    const auto start = Clock::now();
    die_if(!tiers.promote_async(&owner, prompt, {}, hit).pending, "the promotion did not wait");
    gemms(n_gemms);
    tiers.wait_promotion();
    hit = cache.find_cached_prefix(prompt, {});
    const KvTiers::Progress p = tiers.promote_async(&owner, prompt, {}, hit);
    die_if(p.pending || p.promoted.host_blocks != blocks, "the promotion did not finish");
    check(cudaStreamSynchronize(compute), "sync");
    both_t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(both_t.begin(), both_t.end());
  rows.push_back({"promote_async beside the gemm loop", both_t[both_t.size() / 2]});
  const double hidden = (promote_s + gemm_s - rows.back().seconds) / promote_s;
  cudaStreamDestroy(compute);
  cudaStreamDestroy(stream);

  const double h2d = rows[1].seconds;
  const double gb = static_cast<double>(bytes) / 1e9;
  nlohmann::json out;
  out["blocks"] = blocks;
  out["block_bytes"] = block_bytes;
  out["gb"] = gb;
  out["promote_up_seconds_mean"] = up_mean;
  out["promote_hidden_share"] = hidden;
  if (!json) {
    std::printf("%d blocks of %lld bytes (%.2f GB); medians of %d\n", blocks,
                static_cast<long long>(block_bytes), gb, repeats);
    std::printf("%-56s %10s %8s %8s\n", "", "ms", "GB/s", "of h2d");
  }
  for (const Row& r : rows) {
    const double rate = gb / r.seconds;
    out["rows"].push_back({{"name", r.name},
                           {"seconds", r.seconds},
                           {"gb_per_s", rate},
                           {"of_h2d", h2d / r.seconds}});
    if (!json) {
      std::printf("%-56s %10.2f %8.1f %8.2f\n", r.name.c_str(), r.seconds * 1e3, rate,
                  h2d / r.seconds);
    }
  }
  if (json) {
    std::printf("%s\n", out.dump(1).c_str());
  } else {
    std::printf("promote's time on the calling thread (KvTiers stats, mean): %.2f ms\n",
                up_mean * 1e3);
    std::printf("share of the promotion hidden under the GEMMs: %.2f\n", hidden);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return strata::bench::guarded_main("strata_tier_copy_bench", run, argc, argv);
}
