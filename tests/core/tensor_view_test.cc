#include "core/tensor_view.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace strata {
namespace {

TEST(TensorViewTest, DefaultIsEmptyScalar) {
  const TensorView t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.rank, 0);
  EXPECT_EQ(t.numel(), 1);
  EXPECT_EQ(t.nbytes(), 4);
}

TEST(TensorViewTest, NumelAndNbytesFollowShapeAndDType) {
  const std::vector<uint16_t> data(2 * 3 * 5);
  TensorView t;
  t.data = data.data();
  t.dtype = DType::kBF16;
  t.rank = 3;
  t.shape = {2, 3, 5, 0};
  EXPECT_FALSE(t.empty());
  EXPECT_EQ(t.dim(0), 2);
  EXPECT_EQ(t.dim(2), 5);
  EXPECT_EQ(t.numel(), 30);
  EXPECT_EQ(t.nbytes(), 60);
}

TEST(TensorViewDeathTest, DimOutOfRangeAborts) {
  TensorView t;
  t.rank = 2;
  t.shape = {4, 4, 0, 0};
  EXPECT_DEATH((void)t.dim(2), "TensorView::dim index out of range");
  EXPECT_DEATH((void)t.dim(-1), "TensorView::dim index out of range");
}

TEST(LoadAsF32Test, ReadsF32BF16AndF16) {
  const std::vector<float> f32 = {1.5f, -2.0f};
  const std::vector<uint16_t> bf16 = {f32_to_bf16(3.0f), f32_to_bf16(-0.25f)};
  const std::vector<uint16_t> f16 = {f32_to_f16(0.125f), f32_to_f16(-7.0f)};
  EXPECT_EQ(load_as_f32(f32.data(), DType::kF32, 1), -2.0f);
  EXPECT_EQ(load_as_f32(bf16.data(), DType::kBF16, 0), 3.0f);
  EXPECT_EQ(load_as_f32(bf16.data(), DType::kBF16, 1), -0.25f);
  EXPECT_EQ(load_as_f32(f16.data(), DType::kF16, 0), 0.125f);
  EXPECT_EQ(load_as_f32(f16.data(), DType::kF16, 1), -7.0f);
}

TEST(LoadAsF32DeathTest, NonFloatDTypeAborts) {
  const std::vector<int32_t> data = {1};
  EXPECT_DEATH((void)load_as_f32(data.data(), DType::kI32, 0), "not a float weight dtype");
}

}  // namespace
}  // namespace strata
