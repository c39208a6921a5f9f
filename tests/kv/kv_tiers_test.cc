// KV tiers (docs/kv.md, "KV tiers"): the host tier's LRU and checksums; the disk tier's files
// surviving a reopen and every fault (truncated, corrupt, unreadable file, a failed write) ending
// in a miss, never a wrong block; and KvTiers moving a prefix's blocks down as the pool evicts
// them and back up, byte for byte, into a prefix hit -- from host memory and from disk, across a
// restart, and never into a cache of another namespace.

#include "kv/kv_tiers.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kv/block_mover.h"
#include "kv/host_kv_buffer.h"
#include "tests/kv/kv_tiers_fixture.h"

namespace strata::kv {
namespace {

BlockHash hash_of(int32_t v) {
  BlockHash h;
  std::memcpy(h.bytes.data(), &v, sizeof(v));
  h.bytes[31] = 0xAB;
  return h;
}

TierKey key_of(int32_t v) { return TierKey{7, hash_of(v)}; }

// ---- HostTier ------------------------------------------------------------------------------

TEST(HostTierTest, TakesTheLeastRecentlyUsedUnpinnedSlot) {
  HostTier tier(small_layout(), 3);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<BlockId> slots;
  for (int32_t v : {10, 11, 12}) {
    const std::optional<BlockId> s = tier.insert(key_of(v), tokens);
    ASSERT_TRUE(s);
    fill(tier.bytes(*s), static_cast<uint32_t>(v));
    tier.commit(*s);
    slots.push_back(*s);
  }
  ASSERT_TRUE(tier.find(key_of(10), tokens));  // 11 is now the least recently used
  EXPECT_EQ(tier.least_recent(), slots[1]);
  tier.pin(slots[1]);  // being written down: 12 goes instead
  EXPECT_EQ(tier.least_recent(), slots[2]);
  const std::optional<BlockId> s = tier.insert(key_of(13), tokens);
  ASSERT_EQ(s, slots[2]);
  EXPECT_FALSE(tier.contains(key_of(12)));
  EXPECT_TRUE(tier.pending(key_of(13)));
  EXPECT_FALSE(tier.find(key_of(13), tokens)) << "not findable before commit";
  tier.commit(*s);
  EXPECT_TRUE(tier.find(key_of(13), tokens));
  EXPECT_TRUE(tier.find(key_of(11), tokens)) << "a pinned block is still served";
  tier.unpin(slots[1], /*least_recent=*/true);  // written down: it may go first
  EXPECT_EQ(tier.least_recent(), slots[1]);
  tier.pin(slots[0]);
  tier.pin(slots[1]);
  tier.pin(slots[2]);
  EXPECT_FALSE(tier.insert(key_of(14), tokens)) << "every slot pinned";
  tier.check_invariants();
  tier.erase(slots[0]);  // pinned or not
  EXPECT_EQ(tier.num_pinned(), 2);
  EXPECT_TRUE(tier.insert(key_of(14), tokens));
  EXPECT_EQ(tier.num_blocks(), 3);
  tier.check_invariants();
}

// A block being written down (one pin) and staged up (another) at once: the slot is taken for
// another block only when both are done; erased by one (its bytes failed a check), it is found
// no more, and free once the other pin is undone.
TEST(HostTierTest, PinsNestAndAnErasedSlotIsFreeOnlyAtItsLastUnpin) {
  HostTier tier(small_layout(), 2);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const BlockId a = *tier.insert(key_of(1), tokens);
  tier.commit(a);
  const BlockId b = *tier.insert(key_of(2), tokens);
  tier.commit(b);
  tier.pin(a);  // the writer
  tier.pin(a);  // a stage
  EXPECT_EQ(tier.num_pinned(), 1);
  tier.unpin(a);
  EXPECT_TRUE(tier.pinned(a)) << "the writer's pin holds";
  EXPECT_EQ(tier.least_recent(), b);
  tier.unpin(a);
  EXPECT_FALSE(tier.pinned(a));
  EXPECT_EQ(tier.least_recent(), b);
  tier.check_invariants();
  // Erased while another pin holds it: gone from the index, the slot still held.
  tier.pin(a);
  tier.pin(a);
  tier.erase(a);
  EXPECT_FALSE(tier.contains(key_of(1)));
  EXPECT_FALSE(tier.find(key_of(1), tokens));
  EXPECT_TRUE(tier.pinned(a));
  tier.check_invariants();
  const std::optional<BlockId> c = tier.insert(key_of(1), tokens);
  ASSERT_EQ(c, b) << "the held slot is not taken: the other one is";
  tier.commit(*c);
  tier.pin(*c);
  EXPECT_FALSE(tier.insert(key_of(3), tokens)) << "both slots held";
  tier.unpin(a);  // the last pin: free
  EXPECT_EQ(tier.num_pinned(), 1);
  EXPECT_EQ(tier.insert(key_of(3), tokens), a);
  tier.check_invariants();
}

TEST(HostTierTest, OtherTokensOrChangedBytesAreNeverServed) {
  HostTier tier(small_layout(), 2);
  const BlockId s = *tier.insert(key_of(1), std::vector<int32_t>{1, 2, 3, 4});
  fill(tier.bytes(s), 1);
  tier.commit(s);
  EXPECT_TRUE(tier.verify(s));
  tier.bytes(s)[5] ^= std::byte{1};
  EXPECT_FALSE(tier.verify(s));
  EXPECT_FALSE(tier.find(key_of(1), std::vector<int32_t>{1, 2, 3, 5}));
  EXPECT_FALSE(tier.contains(key_of(1))) << "an entry under another prompt's tokens is dropped";
  tier.check_invariants();
}

// ---- DiskTier ------------------------------------------------------------------------------

class DiskTierTest : public ::testing::Test {
 protected:
  static constexpr int64_t kBlockBytes = 256;
  std::unique_ptr<DiskTier> open(int64_t capacity_blocks, uint64_t ns = 7) {
    Result<std::unique_ptr<DiskTier>> t =
        DiskTier::open(dir_, ns, kBs, kBlockBytes,
                       capacity_blocks * DiskTier::file_bytes_for(kBs, kBlockBytes));
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  std::vector<std::byte> block(uint32_t seed) {
    std::vector<std::byte> b(kBlockBytes);
    fill(b, seed);
    return b;
  }
  std::filesystem::path file(const DiskTier& t, int32_t v) {
    return t.path() / (hash_hex(hash_of(v)) + ".kvb");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_ = temp_dir("disk");
  const std::vector<int32_t> tokens_ = {5, 6, 7, 8};
};

TEST_F(DiskTierTest, BlocksSurviveAReopenAndTheLeastRecentlyUsedGoFirst) {
  {
    std::unique_ptr<DiskTier> t = open(3);
    for (int32_t v = 0; v < 3; ++v) ASSERT_TRUE(t->put(hash_of(v), tokens_, block(v), tier_checksum(block(v))).ok());
    EXPECT_EQ(t->num_blocks(), 3);
  }
  std::unique_ptr<DiskTier> t = open(3);
  ASSERT_EQ(t->num_blocks(), 3) << "a new process over the directory finds the blocks";
  std::vector<std::byte> out(kBlockBytes);
  ASSERT_TRUE(t->get(hash_of(2), tokens_, out).ok());
  ASSERT_TRUE(t->get(hash_of(0), tokens_, out).ok());
  EXPECT_EQ(out, block(0));
  // 2 and 0 were just read: 1 is the least recently used and goes first.
  ASSERT_TRUE(t->put(hash_of(3), tokens_, block(3), tier_checksum(block(3))).ok());
  EXPECT_FALSE(t->contains(hash_of(1)));
  EXPECT_FALSE(std::filesystem::exists(file(*t, 1)));
  EXPECT_TRUE(t->contains(hash_of(0)));
  EXPECT_LE(t->used_bytes(), t->capacity_bytes());
  EXPECT_EQ(t->stats().num_evictions, 1);
  // Another namespace sees none of them.
  std::unique_ptr<DiskTier> other = open(3, /*ns=*/8);
  EXPECT_EQ(other->num_blocks(), 0);
}

TEST_F(DiskTierTest, TruncatedCorruptOrUnreadableFilesAreDroppedNeverServed) {
  std::unique_ptr<DiskTier> t = open(8);
  for (int32_t v = 0; v < 4; ++v) ASSERT_TRUE(t->put(hash_of(v), tokens_, block(v), tier_checksum(block(v))).ok());
  std::filesystem::resize_file(file(*t, 0), 100);  // truncated
  {
    std::fstream f(file(*t, 1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(DiskTier::file_bytes_for(kBs, kBlockBytes) - kBlockBytes + 17);  // in the bytes
    f.put('\x5a');  // one byte of the block flipped (the checksum no longer matches)
  }
  std::filesystem::remove(file(*t, 2));
  std::filesystem::create_directory(file(*t, 2));  // unreadable: a directory
  std::vector<std::byte> out(kBlockBytes);
  for (int32_t v = 0; v < 3; ++v) {
    EXPECT_EQ(t->get(hash_of(v), tokens_, out).code(), StatusCode::kInternal) << v;
    EXPECT_FALSE(t->contains(hash_of(v))) << v;
  }
  EXPECT_EQ(t->stats().num_bad_reads, 3);
  // Other tokens under the same hash: not served, and the file stays.
  EXPECT_EQ(t->get(hash_of(3), std::vector<int32_t>{5, 6, 7, 9}, out).code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(t->get(hash_of(3), tokens_, out).ok());
  EXPECT_EQ(out, block(3));
}

TEST_F(DiskTierTest, AnInterruptedWriteIsCleanedUpAndAFailedWriteLeavesNothing) {
  {
    std::unique_ptr<DiskTier> t = open(8);
    ASSERT_TRUE(t->put(hash_of(0), tokens_, block(0), tier_checksum(block(0))).ok());
    std::ofstream(t->path() / (hash_hex(hash_of(1)) + ".tmp")) << "half a block";
    std::ofstream(t->path() / (hash_hex(hash_of(2)) + ".kvb")) << "a renamed, short file";
  }
  std::unique_ptr<DiskTier> t = open(8);
  EXPECT_EQ(t->num_blocks(), 1);
  EXPECT_FALSE(std::filesystem::exists(t->path() / (hash_hex(hash_of(1)) + ".tmp")));
  EXPECT_FALSE(std::filesystem::exists(file(*t, 2)));
  // A write that fails part way (the file size limit stands in for a full disk).
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, &old);
  rlimit saved{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  rlimit small = saved;
  small.rlim_cur = 100;
  ::setrlimit(RLIMIT_FSIZE, &small);
  const Status s = t->put(hash_of(3), tokens_, block(3), tier_checksum(block(3)));
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &old, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.message();
  EXPECT_FALSE(t->contains(hash_of(3)));
  EXPECT_EQ(t->stats().num_write_errors, 1);
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(t->path())) ++files;
  EXPECT_EQ(files, 1u) << "no partial file is left behind";
}

// Bytes read with O_DIRECT (an aligned buffer, a block of whole pages) and through the page
// cache are the same, and a truncated file is refused either way. (A filesystem without
// O_DIRECT, such as tmpfs, turns the direct reads off: the bytes must still be right.)
TEST_F(DiskTierTest, DirectAndBufferedReadsServeTheSameBytes) {
  constexpr int64_t kPageBlock = 2 * 4096;
  Result<std::unique_ptr<DiskTier>> opened =
      DiskTier::open(dir_, 7, kBs, kPageBlock, 8 * DiskTier::file_bytes_for(kBs, kPageBlock));
  ASSERT_TRUE(opened.ok());
  DiskTier& t = **opened;
  std::vector<std::byte> want(kPageBlock);
  fill(want, 9);
  ASSERT_TRUE(t.put(hash_of(1), tokens_, want, tier_checksum(want)).ok());
  ASSERT_TRUE(t.put(hash_of(2), tokens_, want, tier_checksum(want)).ok());
  const std::unique_ptr<std::byte, decltype(&std::free)> buf(
      static_cast<std::byte*>(std::aligned_alloc(4096, kPageBlock)), &std::free);
  const std::span<std::byte> out(buf.get(), kPageBlock);
  // Out of the page cache (written back, then dropped: no root needed), so the bytes come from
  // the disk, by O_DIRECT where the filesystem has it.
  const auto uncache = [&](int32_t v) {
    const int fd = ::open(file(t, v).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  };
  const auto read_back = [&](const char* what) {
    std::fill(out.begin(), out.end(), std::byte{0});
    ASSERT_TRUE(t.get(hash_of(1), tokens_, out).ok()) << what;
    EXPECT_TRUE(std::equal(out.begin(), out.end(), want.begin())) << what;
  };
  uncache(1);
  read_back("from the disk, by O_DIRECT");
  const bool direct = t.direct_reads();  // false where the filesystem refuses O_DIRECT
  EXPECT_EQ(t.stats().num_direct_reads, direct ? 1 : 0);
  t.set_direct_reads(false);
  read_back("through the page cache");  // which now holds the file
  t.set_direct_reads(direct);
  read_back("copied from the page cache");
  EXPECT_EQ(t.stats().num_direct_reads, direct ? 1 : 0) << "a cached block is not read again";
  t.set_direct_reads(true);
  std::filesystem::resize_file(file(t, 2), DiskTier::file_bytes_for(kBs, kPageBlock) - 4096);
  EXPECT_EQ(t.get(hash_of(2), tokens_, out).code(), StatusCode::kInternal);
  EXPECT_FALSE(t.contains(hash_of(2)));
}

TEST_F(DiskTierTest, RefusesACapacityBelowOneBlock) {
  const Result<std::unique_ptr<DiskTier>> t = DiskTier::open(dir_, 7, kBs, kBlockBytes, 100);
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

// ---- KvTiers: down on eviction, up on a lookup -------------------------------------------------


TEST_F(KvTiersTest, EvictedBlocksComeBackFromHostMemoryByteForByte) {
  const std::vector<int32_t> p = prompt(100, 3);
  compute(p);
  evict_everything();
  EXPECT_EQ(cache_->find_cached_prefix(p, {}).num_tokens, 0) << "the pool lost them";
  EXPECT_EQ(tiers_->stats().num_offloaded_blocks, 3);
  const KvTiers::Promoted up = promote(p);
  EXPECT_EQ(up.host_blocks, 3);
  EXPECT_EQ(up.disk_blocks, 0);
  expect_hit_bytes(p, 3);
  // Evicted again: already in the host tier, so not written twice.
  evict_everything();
  EXPECT_EQ(tiers_->stats().num_offloaded_blocks, 3);
  tiers_->host().check_invariants();
}

TEST_F(KvTiersTest, APrefixPartlyInThePoolContinuesFromTheTier) {
  const std::vector<int32_t> p = prompt(100, 3);
  compute(p);
  evict_everything();
  ASSERT_EQ(promote(p).host_blocks, 3);
  // A longer prompt over the same prefix: the pool has 3 blocks, the tiers nothing more.
  std::vector<int32_t> longer = prompt(100, 5);
  EXPECT_EQ(promote(longer).host_blocks, 0);
  EXPECT_EQ(cache_->find_cached_prefix(longer, {}).num_tokens, 3 * kBs);
  // Another salt is another chain: nothing of it is in the tiers.
  EXPECT_EQ(promote(p, {.cache_salt = "tenant-b"}).host_blocks, 0);
}

TEST_F(KvTiersTest, BlocksTheHostTierDropsGoToDiskAndComeBackAcrossARestart) {
  start(/*host_blocks=*/2, /*with_disk=*/true);
  const std::vector<int32_t> p = prompt(100, 5);
  compute(p);
  evict_everything();  // 5 blocks down; the host tier keeps 2, the others go to disk
  tiers_->drain_io();
  EXPECT_GE(tiers_->stats().num_disk_writes, 3);
  EXPECT_EQ(tiers_->disk()->num_blocks(), tiers_->stats().num_disk_writes) << "each once";
  const KvTiers::Promoted up = promote(p);
  EXPECT_EQ(up.host_blocks + up.disk_blocks, 5);
  EXPECT_GE(up.disk_blocks, 3);
  expect_hit_bytes(p, 5);
  // A new process over the same directory (an empty pool and host tier) serves what is on disk.
  evict_everything();
  start(/*host_blocks=*/8, /*with_disk=*/true);
  const KvTiers::Promoted again = promote(p);
  EXPECT_EQ(again.host_blocks, 0);
  EXPECT_GE(again.disk_blocks, 3);
  // What reached disk before the restart comes back, from block 0 on.
  expect_hit_bytes(p, again.disk_blocks);
}

TEST_F(KvTiersTest, ACorruptDiskBlockEndsThePromotionThereAndIsRecomputed) {
  start(/*host_blocks=*/1, /*with_disk=*/true);
  const std::vector<int32_t> p = prompt(100, 4);
  compute(p);
  evict_everything();  // the tail goes first: blocks 1..3 on disk, block 0 in host memory
  // Corrupt block 1's file: the promotion brings block 0 and stops.
  BlockHasher hasher;
  const std::span<const int32_t> tokens(p);
  const BlockHash b0 = hasher.hash(nullptr, tokens.subspan(0, kBs), {});
  const BlockHash b1 = hasher.hash(&b0, tokens.subspan(kBs, kBs), {});
  const std::filesystem::path f = tiers_->disk()->path() / (hash_hex(b1) + ".kvb");
  ASSERT_TRUE(std::filesystem::exists(f));
  {
    std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(-3, std::ios::end);
    s.put('\x01');
  }
  const KvTiers::Promoted up = promote(p);
  EXPECT_EQ(up.host_blocks, 1);
  EXPECT_EQ(up.disk_blocks, 0);
  EXPECT_EQ(tiers_->stats().num_faults, 1);
  EXPECT_FALSE(std::filesystem::exists(f)) << "the corrupt file is dropped";
  expect_hit_bytes(p, 1);
}

TEST_F(KvTiersTest, AnotherNamespaceNeverSeesTheBlocks) {
  start(/*host_blocks=*/2, /*with_disk=*/true, /*ns=*/1);
  const std::vector<int32_t> p = prompt(100, 4);
  compute(p);
  evict_everything();
  start(/*host_blocks=*/2, /*with_disk=*/true, /*ns=*/2);  // another model over the directory
  EXPECT_EQ(promote(p).disk_blocks, 0);
  EXPECT_EQ(cache_->find_cached_prefix(p, {}).num_tokens, 0);
}

TEST_F(KvTiersTest, APrefetchLoadsTheDiskBlocksIntoHostMemoryBeforeTheLookup) {
  start(/*host_blocks=*/2, /*with_disk=*/true);
  const std::vector<int32_t> p = prompt(100, 5);
  compute(p);
  evict_everything();
  compute(prompt(900, 2));  // p's blocks still in host memory go to disk to make room for these
  evict_everything();
  // A new process over the directory, its host tier empty: a prefetch loads what a quarter of
  // the tier holds.
  start(/*host_blocks=*/8, /*with_disk=*/true);
  PrefetchState state;
  tiers_->prefetch(p, {}, state);
  ASSERT_NE(state.ticket, nullptr);
  const int32_t on_disk = static_cast<int32_t>(tiers_->disk()->num_blocks());
  ASSERT_EQ(on_disk, 5);
  EXPECT_EQ(state.ticket->blocks, 2);
  EXPECT_EQ(state.ticket->pending, 2) << "counted down only when the scheduler applies the reads";
  tiers_->drain_io();
  EXPECT_FALSE(state.pending());
  EXPECT_EQ(tiers_->stats().num_prefetched_blocks, 2);
  EXPECT_EQ(tiers_->host().num_blocks(), 2);
  EXPECT_EQ(tiers_->host().num_prefetched(), 2);
  tiers_->prefetch(p, {}, state);
  EXPECT_EQ(state.ticket->blocks, 2) << "nothing changed since its last walk: no new one";
  // Another request over the prefix finds the budget held by blocks not served yet.
  PrefetchState other;
  tiers_->prefetch(p, {}, other);
  EXPECT_EQ(other.ticket, nullptr);
  // The lookup takes the prefetched blocks from host memory and reads the rest; all count as
  // disk hits, and the served blocks free the budget.
  const KvTiers::Promoted up = promote(p);
  EXPECT_EQ(up.host_blocks, 0);
  EXPECT_EQ(up.disk_blocks, on_disk);
  EXPECT_EQ(tiers_->host().num_prefetched(), 0);
  expect_hit_bytes(p, on_disk);
  PrefetchState after;
  tiers_->prefetch(p, {}, after);
  EXPECT_EQ(after.ticket, nullptr) << "in the pool now";
  tiers_->host().check_invariants();
  EXPECT_EQ(tiers_->host().num_pinned(), 0);
}

TEST_F(KvTiersTest, WriteThroughCopiesABlockDownWhenItIsCached) {
  start(/*host_blocks=*/4, /*with_disk=*/false, /*ns=*/42, OffloadPolicy::kWriteThrough);
  const std::vector<int32_t> p = prompt(100, 3);
  compute(p);
  EXPECT_EQ(tiers_->stats().num_offloaded_blocks, 0) << "copied at the next poll";
  tiers_->poll();
  EXPECT_EQ(tiers_->stats().num_offloaded_blocks, 3);
  EXPECT_EQ(tiers_->host().num_blocks(), 3);
  evict_everything();
  EXPECT_EQ(tiers_->stats().num_offloaded_blocks, 3) << "evicting them copies nothing";
  EXPECT_EQ(promote(p).host_blocks, 3);
  expect_hit_bytes(p, 3);
  // Cached and evicted (and written down then) before a poll: not copied again.
  const std::vector<int32_t> q = prompt(500, 2);
  compute(q);
  evict_everything();
  EXPECT_EQ(tiers_->stats().num_offloaded_blocks, 5);
  tiers_->poll();
  EXPECT_EQ(tiers_->stats().num_offloaded_blocks, 5);
  tiers_->host().check_invariants();
}

// Random prompts over shared prefixes, computed, evicted, prefetched and promoted in random
// order over a small host tier and disk: every hit holds the bytes computed for it, no tier
// passes its capacity, and once the I/O is drained no slot stays pinned and no pool block is
// held.
TEST_F(KvTiersTest, RandomizedOperationsKeepEveryTierConsistent) {
  for (const OffloadPolicy policy : {OffloadPolicy::kEvict, OffloadPolicy::kWriteThrough}) {
    std::filesystem::remove_all(dir_);
    start(/*host_blocks=*/3, /*with_disk=*/true, /*ns=*/42, policy);
    std::mt19937 rng(policy == OffloadPolicy::kEvict ? 1 : 2);
    std::vector<PrefetchState> states;  // one per prefetch: a state belongs to one prompt
    for (int op = 0; op < 400; ++op) {
      // Prompts share their first blocks: 100.. for the first two blocks, then one of 4 tails.
      std::vector<int32_t> p = prompt(100, 2);
      p.pop_back();
      const int32_t tail_blocks = static_cast<int32_t>(rng() % 4);
      const int32_t tail = 1000 * (1 + static_cast<int32_t>(rng() % 4));
      for (int32_t t = 0; t < tail_blocks * kBs + 1; ++t) p.push_back(tail + t);
      switch (rng() % 5) {
        case 0:
          compute(p);
          break;
        case 1:
          evict_everything();
          break;
        case 2:
          states.emplace_back();
          tiers_->prefetch(p, {}, states.back());
          break;
        case 3: {
          PrefixHit hit = cache_->find_cached_prefix(p, {});
          tiers_->promote(p, {}, hit);
          const int32_t blocks = hit.num_tokens / kBs;
          for (int32_t b = 0; b < blocks; ++b) {
            std::vector<std::byte> want(static_cast<size_t>(small_layout().block_bytes()));
            fill(want, static_cast<uint32_t>(p[static_cast<size_t>(b * kBs)]));
            const std::span<std::byte> got = block_bytes(hit.blocks()[static_cast<size_t>(b)]);
            ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "op " << op;
          }
          break;
        }
        default:
          tiers_->poll();
      }
      tiers_->host().check_invariants();
      ASSERT_LE(tiers_->host().num_blocks(), tiers_->host().capacity());
      ASSERT_LE(tiers_->disk()->used_bytes(), tiers_->disk()->capacity_bytes());
      cache_->pool().check_invariants();
    }
    tiers_->drain_io();
    for (const PrefetchState& s : states) EXPECT_FALSE(s.pending());
    EXPECT_EQ(tiers_->host().num_pinned(), 0);
    EXPECT_EQ(cache_->pool().num_free_blocks(), kPoolBlocks - 1) << "no pool block held";
    EXPECT_EQ(tiers_->stats().num_faults, 0);
    EXPECT_GT(tiers_->stats().num_host_hit_blocks + tiers_->stats().num_disk_hit_blocks, 0);
  }
}

TEST_F(KvTiersTest, RefusesCachesItCannotServe) {
  KvCacheManager two(KvCacheConfig{
      .block_size = kBs,
      .groups = {{KvGroupSpec::full(small_spec()), 9}, {KvGroupSpec::newest(1, small_spec()), 9}}});
  KvTierConfig c;
  c.host_bytes = 1 << 20;
  EXPECT_EQ(KvTiers::create(c, two, *mover_).status().code(), StatusCode::kInvalidArgument)
      << "a mover per group";
  c.host_bytes = 1;
  EXPECT_EQ(KvTiers::create(c, *cache_, *mover_).status().code(), StatusCode::kInvalidArgument);
  c.disk_path = dir_;
  EXPECT_EQ(KvTiers::create(c, *cache_, *mover_).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kv
