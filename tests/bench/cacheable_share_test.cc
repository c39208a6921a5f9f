#include "bench/cacheable_share.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata::bench {
namespace {

using Tokens = std::vector<int32_t>;

CacheableShare share(const std::vector<std::pair<Tokens, Tokens>>& requests, int32_t block_size) {
  std::vector<RequestTokens> r;
  for (const auto& [prompt, output] : requests) r.push_back({prompt, output});
  return compute_cacheable_share(r, block_size);
}

TEST(CacheableShareTest, FirstRequestHasNothingCacheable) {
  const CacheableShare s = share({{{1, 2, 3, 4, 5}, {9}}}, 2);
  EXPECT_EQ(s.prompt_tokens, 5);
  EXPECT_EQ(s.cacheable_tokens, 0);
  EXPECT_EQ(s.share(), 0.0);
}

TEST(CacheableShareTest, WholeBlocksOfASharedPrefixOnly) {
  // Block size 4. The second prompt shares 6 tokens with the first: one whole block.
  const CacheableShare s =
      share({{{1, 2, 3, 4, 5, 6, 7, 8}, {}}, {{1, 2, 3, 4, 5, 6, 0, 0, 0}, {}}}, 4);
  EXPECT_EQ(s.prompt_tokens, 17);
  EXPECT_EQ(s.cacheable_tokens, 4);
}

TEST(CacheableShareTest, LeavesTheLastPromptTokenToCompute) {
  // An identical 8-token prompt: only floor((8 - 1) / 4) = 1 block can come from the cache.
  const CacheableShare s =
      share({{{1, 2, 3, 4, 5, 6, 7, 8}, {}}, {{1, 2, 3, 4, 5, 6, 7, 8}, {}}}, 4);
  EXPECT_EQ(s.cacheable_tokens, 4);
  // One token longer: both blocks.
  const CacheableShare t =
      share({{{1, 2, 3, 4, 5, 6, 7, 8}, {}}, {{1, 2, 3, 4, 5, 6, 7, 8, 9}, {}}}, 4);
  EXPECT_EQ(t.cacheable_tokens, 8);
}

TEST(CacheableShareTest, EarlierOutputCountsButNotItsLastToken) {
  // prompt 1..3 + output 4,5,6: K/V exists for 1..5; block size 2 -> blocks [1,2] [3,4].
  const CacheableShare s = share({{{1, 2, 3}, {4, 5, 6}}, {{1, 2, 3, 4, 5, 6, 7, 8}, {}}}, 2);
  EXPECT_EQ(s.cacheable_tokens, 4);
  // One more output token completes the third block.
  const CacheableShare t = share({{{1, 2, 3}, {4, 5, 6, 7}}, {{1, 2, 3, 4, 5, 6, 7, 8}, {}}}, 2);
  EXPECT_EQ(t.cacheable_tokens, 6);
}

TEST(CacheableShareTest, PrefixMustStartAtTheFirstToken) {
  // The same block at a different position is not a prefix hit (chains start at the root).
  const CacheableShare s = share({{{7, 7, 1, 2, 3}, {}}, {{1, 2, 9, 9, 9}, {}}}, 2);
  EXPECT_EQ(s.cacheable_tokens, 0);
}

TEST(CacheableShareTest, BranchesAreKeptApart) {
  // A: [1 2][3 4][5 6], B: [1 2][8 8][5 6], C: [1 2][8 8][5 6][0] -> C hits 3 blocks through B.
  const CacheableShare s =
      share({{{1, 2, 3, 4, 5, 6}, {}}, {{1, 2, 8, 8, 5, 6}, {}}, {{1, 2, 8, 8, 5, 6, 0}, {}}}, 2);
  // B: 2 tokens ([1 2]); C: 6 tokens.
  EXPECT_EQ(s.cacheable_tokens, 8);
  EXPECT_EQ(s.prompt_tokens, 19);
  EXPECT_DOUBLE_EQ(s.share(), 8.0 / 19.0);
}

TEST(CacheableShareTest, AgenticSessionIsMostlyCacheable) {
  // Turn 2 = turn 1 prompt + output + new tokens, block size 4.
  const Tokens p1 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const Tokens o1 = {11, 12, 13};
  Tokens p2 = p1;
  p2.insert(p2.end(), o1.begin(), o1.end());
  p2.insert(p2.end(), {20, 21, 22, 23, 24});
  // K/V of turn 1: 1..12 = 3 full blocks; p2 has 18 tokens, cap floor(17/4) = 4 blocks.
  const CacheableShare s = share({{p1, o1}, {p2, {}}}, 4);
  EXPECT_EQ(s.cacheable_tokens, 12);
}

TEST(PrefixBlockTrieTest, CountsDistinctBlocks) {
  PrefixBlockTrie trie(2);
  trie.add(std::vector<int32_t>{1, 2, 3, 4, 5});
  trie.add(std::vector<int32_t>{1, 2, 3, 4});
  trie.add(std::vector<int32_t>{1, 2, 9, 9});
  EXPECT_EQ(trie.num_blocks(), 3);
  EXPECT_EQ(trie.cacheable_tokens(std::vector<int32_t>{1, 2, 3, 4, 0}), 4);
  EXPECT_EQ(trie.cacheable_tokens(std::vector<int32_t>{}), 0);
}

}  // namespace
}  // namespace strata::bench
