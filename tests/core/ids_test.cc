#include "core/ids.h"

#include <gtest/gtest.h>

#include <set>
#include <type_traits>
#include <unordered_set>

namespace strata {
namespace {

static_assert(!std::is_convertible_v<BlockId, SeqId>, "ids of different kinds do not mix");
static_assert(!std::is_convertible_v<SeqId, BlockId>, "ids of different kinds do not mix");
static_assert(!std::is_convertible_v<int32_t, BlockId>, "construction from an int is explicit");
static_assert(std::is_constructible_v<BlockId, int32_t>);
static_assert(sizeof(BlockId) == sizeof(int32_t), "an id costs what an int32 costs");
static_assert(std::is_trivially_copyable_v<BlockId>);

TEST(StrongIdTest, DefaultIsInvalid) {
  constexpr BlockId b;
  EXPECT_EQ(b.value, -1);
  EXPECT_FALSE(b.valid());
  EXPECT_FALSE(SeqId{}.valid());
}

TEST(StrongIdTest, NonNegativeValuesAreValid) {
  EXPECT_TRUE(BlockId{0}.valid());
  EXPECT_TRUE(SeqId{7}.valid());
  EXPECT_FALSE(SeqId{-5}.valid());
}

TEST(StrongIdTest, NullBlockIsBlockZero) {
  static_assert(kNullBlock.value == 0);
  EXPECT_TRUE(kNullBlock.valid());
  EXPECT_EQ(kNullBlock, BlockId{0});
}

TEST(StrongIdTest, ComparesLikeItsValue) {
  EXPECT_EQ(BlockId{3}, BlockId{3});
  EXPECT_NE(BlockId{3}, BlockId{4});
  EXPECT_LT(BlockId{3}, BlockId{4});
  EXPECT_GT(BlockId{10}, BlockId{4});
  EXPECT_LE(BlockId{4}, BlockId{4});
  const std::set<SeqId> ordered = {SeqId{5}, SeqId{1}, SeqId{3}};
  EXPECT_EQ(ordered.begin()->value, 1);
}

TEST(StrongIdTest, HashesLikeItsValue) {
  EXPECT_EQ(std::hash<BlockId>{}(BlockId{42}), std::hash<int32_t>{}(42));
  std::unordered_set<SeqId> ids = {SeqId{1}, SeqId{2}, SeqId{1}};
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_TRUE(ids.contains(SeqId{2}));
}

}  // namespace
}  // namespace strata
