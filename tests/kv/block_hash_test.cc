// Block hashes: SHA-256 over exactly the documented serialization, a chain through the parent,
// the salt only in the first block, the adapter in every block, and the weakened test mode.

#include "kv/block_hash.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata::kv {
namespace {

const std::vector<int32_t> kTokens = {1, 2, 3, 4};

TEST(BlockHashTest, FirstBlockIsSha256OfTheDocumentedBytes) {
  // Expected values: Python's hashlib.sha256 over 32 zero bytes | u32 4 | 1 2 3 4 (u32 LE) |
  // u32 adapter | u32 salt length | salt.
  BlockHasher hasher;
  EXPECT_EQ(hasher.hash(nullptr, kTokens, {}).short_hex(), "fec8109a3922c417");
  EXPECT_EQ(hasher.hash(nullptr, kTokens, {"alice", 7}).short_hex(), "cf1e4969df337a72");
}

TEST(BlockHashTest, ParentTokensSaltAndAdapterAllChangeTheHash) {
  BlockHasher hasher;
  const BlockHash a = hasher.hash(nullptr, kTokens, {});
  const BlockHash child = hasher.hash(&a, kTokens, {});
  EXPECT_NE(a, child) << "the parent enters the hash";
  EXPECT_NE(hasher.hash(nullptr, std::vector<int32_t>{1, 2, 3, 5}, {}), a);
  EXPECT_NE(hasher.hash(nullptr, kTokens, {"t1", 0}), a);
  EXPECT_NE(hasher.hash(nullptr, kTokens, {"t1", 0}), hasher.hash(nullptr, kTokens, {"t2", 0}));
  EXPECT_NE(hasher.hash(nullptr, kTokens, {"", 3}), a);
  EXPECT_NE(hasher.hash(&a, kTokens, {"", 3}), child) << "the adapter enters every block";
  // The salt enters only the first block: it reaches later blocks through the parent hash.
  EXPECT_EQ(hasher.hash(&a, kTokens, {"t1", 0}), child);
  EXPECT_EQ(hasher.hash(nullptr, kTokens, {}), a) << "deterministic";
}

TEST(BlockHashTest, WeakenedHasherKeepsOnlyItsBits) {
  BlockHasher full;
  BlockHasher weak(8);
  EXPECT_EQ(weak.num_bits(), 8);
  const BlockHash f = full.hash(nullptr, kTokens, {});
  const BlockHash w = weak.hash(nullptr, kTokens, {});
  EXPECT_EQ(w.bytes[0], f.bytes[0]);
  for (size_t i = 1; i < w.bytes.size(); ++i) EXPECT_EQ(w.bytes[i], 0) << i;
  BlockHasher twelve(12);
  const BlockHash t = twelve.hash(nullptr, kTokens, {});
  EXPECT_EQ(t.bytes[1], f.bytes[1] & 0xf0);
  // 8 bits: 300 distinct blocks must collide.
  std::vector<int> seen(256, 0);
  bool collided = false;
  for (int32_t i = 0; i < 300; ++i) {
    const BlockHash h = weak.hash(nullptr, std::vector<int32_t>{i}, {});
    collided = collided || seen[h.bytes[0]]++ > 0;
  }
  EXPECT_TRUE(collided);
}

TEST(BlockHashTest, MovedHasherStillHashes) {
  BlockHasher a;
  const BlockHash h = a.hash(nullptr, kTokens, {});
  BlockHasher b(std::move(a));
  EXPECT_EQ(b.hash(nullptr, kTokens, {}), h);
  BlockHasher c(16);
  c = std::move(b);
  EXPECT_EQ(c.hash(nullptr, kTokens, {}), h);
}

}  // namespace
}  // namespace strata::kv
