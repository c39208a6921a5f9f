#pragma once
// What the KV tiers' tests share: a small KV spec and layout, seeded block bytes, a scratch
// directory, and KvTiersTest -- a one-group cache over a host pool, as the CPU engine has it, with
// the tiers beneath (its mover copying at once, or holding started copies: DeferredMover).

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kv/block_mover.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_tiers.h"
#include "tests/kv/deferred_mover.h"

namespace strata::kv {

inline constexpr int32_t kBs = 4;

inline KvSpec small_spec() { return KvSpec{2, 2, 8, DType::kF32}; }
inline KvLayout small_layout() { return KvLayout(small_spec(), kBs); }

inline void fill(std::span<std::byte> bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng());
}

// A fresh directory under the test's temporary directory.
inline std::string temp_dir(const std::string& name) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  ("strata_kv_tiers_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

// A one-group cache over a host pool, as the CPU engine has it, with the tiers beneath.
class KvTiersTest : public ::testing::Test {
 protected:
  static constexpr int32_t kPoolBlocks = 9;  // 8 usable

  explicit KvTiersTest(uint64_t ns = 42) : ns_(ns) {}

  void SetUp() override { start(/*host_blocks=*/4, /*with_disk=*/false); }
  void TearDown() override {
    tiers_.reset();
    std::filesystem::remove_all(dir_);
  }

  void start(int32_t host_blocks, bool with_disk, uint64_t ns = 42,
             OffloadPolicy policy = OffloadPolicy::kEvict, bool deferred = false) {
    tiers_.reset();
    cache_ = std::make_unique<KvCacheManager>(KvCacheConfig{
        .block_size = kBs, .groups = {{KvGroupSpec::full(small_spec()), kPoolBlocks}}});
    pool_ = std::make_unique<HostKvBuffer>(small_layout(), kPoolBlocks);
    deferred_ = nullptr;
    if (deferred) {
      auto d = std::make_unique<DeferredMover>(*pool_);
      deferred_ = d.get();
      mover_ = std::move(d);
    } else {
      mover_ = std::make_unique<HostBlockMover>(*pool_);
    }
    KvTierConfig c;
    c.host_bytes = host_blocks * small_layout().block_bytes();
    if (with_disk) {
      c.disk_path = dir_;
      c.disk_bytes = 64 * DiskTier::file_bytes_for(kBs, small_layout().block_bytes());
    }
    c.ns = ns;
    c.policy = policy;
    c.remote = remote_;
    Result<std::unique_ptr<KvTiers>> t = KvTiers::create(c, *cache_, *mover_);
    ASSERT_TRUE(t.ok()) << t.status().message();
    tiers_ = std::move(t).value();
  }

  // A prompt of num_blocks full blocks and one more token; its K/V "computed": each block's bytes
  // a function of its tokens, registered in the prefix cache, then the table freed.
  std::vector<int32_t> prompt(int32_t first_token, int32_t num_blocks) {
    std::vector<int32_t> p(static_cast<size_t>(num_blocks * kBs + 1));
    std::iota(p.begin(), p.end(), first_token);
    return p;
  }
  void compute(const std::vector<int32_t>& p) {
    BlockTable t(kBs);
    ASSERT_TRUE(cache_->allocate_slots(t, static_cast<int32_t>(p.size())));
    for (int32_t b = 0; b < static_cast<int32_t>(p.size()) / kBs; ++b) {
      fill(block_bytes(t.blocks(0)[static_cast<size_t>(b)]), static_cast<uint32_t>(p[b * kBs]));
    }
    cache_->cache_full_blocks(t, p, static_cast<int32_t>(p.size()), {});
    cache_->free(t);
  }
  std::span<std::byte> block_bytes(BlockId b) {
    const int64_t n = small_layout().block_bytes();
    return {pool_->data() + b.value * n, static_cast<size_t>(n)};
  }
  // The prefix hit's blocks hold exactly what compute() wrote.
  void expect_hit_bytes(const std::vector<int32_t>& p, int32_t blocks) {
    const PrefixHit hit = cache_->find_cached_prefix(p, {});
    ASSERT_EQ(hit.num_tokens, blocks * kBs);
    for (int32_t b = 0; b < blocks; ++b) {
      std::vector<std::byte> want(static_cast<size_t>(small_layout().block_bytes()));
      fill(want, static_cast<uint32_t>(p[b * kBs]));
      const std::span<std::byte> got = block_bytes(hit.blocks()[static_cast<size_t>(b)]);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "block " << b;
    }
  }
  // The pool's prefix hit for p, extended by the tiers; it must be what a fresh lookup finds.
  KvTiers::Promoted promote(const std::vector<int32_t>& p, const BlockExtraKeys& extra = {}) {
    PrefixHit hit = cache_->find_cached_prefix(p, extra);
    const KvTiers::Promoted up = tiers_->promote(p, extra, hit);
    const PrefixHit fresh = cache_->find_cached_prefix(p, extra);
    EXPECT_EQ(hit.num_tokens, fresh.num_tokens);
    EXPECT_TRUE(std::ranges::equal(hit.blocks(), fresh.blocks()));
    EXPECT_EQ(hit.hashes, fresh.hashes);
    return up;
  }
  // Fills the pool with another prompt's blocks, evicting every cached block.
  void evict_everything() {
    BlockTable t(kBs);
    ASSERT_TRUE(cache_->allocate_slots(t, (kPoolBlocks - 1) * kBs));
    cache_->free(t);
  }

  uint64_t ns_;
  std::string dir_ = temp_dir("tiers");
  std::unique_ptr<KvCacheManager> cache_;
  std::unique_ptr<HostKvBuffer> pool_;
  std::unique_ptr<BlockMover> mover_;
  DeferredMover* deferred_ = nullptr;  // mover_, when start() was asked for one
  std::optional<RedisTarget> remote_;  // the remote tier start() gives the tiers, if any
  std::unique_ptr<KvTiers> tiers_;
};

}  // namespace strata::kv
