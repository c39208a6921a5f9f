// FP8 KV scales read from a checkpoint (model/kv_scales.h): every accepted name form, the refusals
// (some layers only, non-scalar, non-positive), and scales from calibration maxima.

#include "model/kv_scales.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/weight_store.h"
#include "model_test_files.h"

namespace strata::model {
namespace {

using testing::TempDir;
using testing::TestTensor;

TestTensor scalar(const std::string& name, float value, std::vector<int64_t> shape = {}) {
  return {name, "F32", std::move(shape), testing::raw_bytes(std::vector<float>{value})};
}

WeightStore store_of(const TempDir& dir, const std::vector<TestTensor>& tensors) {
  std::vector<TestTensor> all = tensors;
  all.push_back({"model.embed_tokens.weight",
                 "F32",
                 {2, 2},
                 testing::raw_bytes(std::vector<float>{1, 2, 3, 4})});
  testing::write_file(dir / "model.safetensors", testing::safetensors_bytes(all));
  return WeightStore::open(dir.path());
}

std::string error_of(const std::vector<TestTensor>& tensors, int32_t layers) {
  TempDir dir;
  const WeightStore w = store_of(dir, tensors);
  try {
    (void)read_checkpoint_kv_scales(w, layers);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KvScalesTest, ReadsPerLayerKAndVScales) {
  TempDir dir;
  const WeightStore w = store_of(dir, {scalar("model.layers.0.self_attn.k_scale", 0.5f),
                                       scalar("model.layers.0.self_attn.v_scale", 0.25f),
                                       scalar("model.layers.1.self_attn.k_scale", 2.0f, {1}),
                                       scalar("model.layers.1.self_attn.v_scale", 4.0f, {1})});
  const auto s = read_checkpoint_kv_scales(w, 2);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->k, (std::vector<float>{0.5f, 2.0f}));
  EXPECT_EQ(s->v, (std::vector<float>{0.25f, 4.0f}));
}

TEST(KvScalesTest, OlderNameFormsAreRead) {
  TempDir dir;
  const WeightStore w =
      store_of(dir, {scalar("model.layers.0.self_attn.kv_scale", 0.125f),
                     scalar("model.layers.1.self_attn.k_proj.output_scale", 3.0f),
                     scalar("model.layers.1.self_attn.v_proj.output_scale", 5.0f)});
  const auto s = read_checkpoint_kv_scales(w, 2);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->k, (std::vector<float>{0.125f, 3.0f}));
  EXPECT_EQ(s->v, (std::vector<float>{0.125f, 5.0f}));
}

TEST(KvScalesTest, ACheckpointWithoutScalesHasNone) {
  TempDir dir;
  EXPECT_FALSE(read_checkpoint_kv_scales(store_of(dir, {}), 2).has_value());
}

TEST(KvScalesTest, RefusesPartialNonScalarAndNonPositiveScales) {
  EXPECT_NE(error_of({scalar("model.layers.0.self_attn.k_scale", 1.0f),
                      scalar("model.layers.0.self_attn.v_scale", 1.0f)},
                     2)
                .find("not layer 1"),
            std::string::npos);
  EXPECT_NE(error_of({scalar("model.layers.0.self_attn.k_scale", 1.0f)}, 1).find("v_scale missing"),
            std::string::npos);
  EXPECT_NE(error_of({{"model.layers.0.self_attn.kv_scale",
                       "F32",
                       {2},
                       testing::raw_bytes(std::vector<float>{1, 2})}},
                     1)
                .find("must be a scalar"),
            std::string::npos);
  EXPECT_NE(error_of({scalar("model.layers.0.self_attn.kv_scale", -1.0f)}, 1)
                .find("not a finite positive"),
            std::string::npos);
  EXPECT_NE(error_of({scalar("model.layers.0.self_attn.kv_scale", 0.0f)}, 1)
                .find("not a finite positive"),
            std::string::npos);
}

TEST(KvScalesTest, CalibrationMaximaMapToTheFormatsLargestValue) {
  const std::vector<std::pair<float, float>> abs_max = {{448.0f, 57344.0f}, {0.0f, 1.0f}};
  const kv::KvStaticScales e4m3 = kv_scales_from_abs_max(abs_max, DType::kF8E4M3);
  EXPECT_EQ(e4m3.k, (std::vector<float>{1.0f, 1.0f}));  // a zero maximum gives 1.0
  EXPECT_EQ(e4m3.v, (std::vector<float>{128.0f, 1.0f / 448.0f}));
  const kv::KvStaticScales e5m2 = kv_scales_from_abs_max(abs_max, DType::kF8E5M2);
  EXPECT_EQ(e5m2.k[0], 448.0f / 57344.0f);
  EXPECT_EQ(e5m2.v[0], 1.0f);
}

}  // namespace
}  // namespace strata::model
