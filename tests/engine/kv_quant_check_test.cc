// --kv-quant-check (engine/kv_quant_check.h, engine/kv_layout_setup.h): both per-layer figures
// are meaningful (zero for float32, ranking the dtypes as their precision does), a layer with a
// planted large error is kept at full precision while the others stay quantized, and the engine
// builds its pool from the result.

#include "engine/kv_quant_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_on_model.h"
#include "engine/kv_layout_setup.h"
#include "engine/kv_scales_setup.h"
#include "model/kv_scales.h"
#include "model/model.h"
#include "strata/engine.h"

namespace strata::engine {
namespace {

const std::string kModel = std::string(STRATA_TEST_DATA_DIR) + "/models/llama3-gqa";

class KvQuantCheckTest : public ::testing::Test {
 protected:
  KvQuantCheckTest()
      : pool_(2),
        model_(model::Model::load({kModel})),
        tokens_(kv_calibration_tokens(model_, "")) {}

  // The calibrated e4m3 scales (what --calculate-kv-scales gives).
  kv::KvStaticScales e4m3_scales() {
    const auto abs_max = model_.kv_abs_max(tokens_, pool_);
    EXPECT_TRUE(abs_max.ok());
    return model::kv_scales_from_abs_max(abs_max.value(), DType::kF8E4M3);
  }

  std::vector<double> errors(DType dtype, kv::KvStaticScales scales = {}) {
    const auto e =
        model_.kv_quant_error(tokens_, kv::KvLayout(model_.kv_spec(dtype), 16, scales), pool_);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? e.value() : std::vector<double>{};
  }

  ThreadPool pool_;
  model::Model model_;
  std::vector<int32_t> tokens_;
};

TEST_F(KvQuantCheckTest, ErrorsRankTheDtypesByPrecision) {
  const std::vector<double> f32 = errors(DType::kF32);
  const std::vector<double> f16 = errors(DType::kF16);
  const std::vector<double> i8 = errors(DType::kI8);
  const std::vector<double> e4m3 = errors(DType::kF8E4M3, e4m3_scales());
  ASSERT_EQ(f32.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    EXPECT_EQ(f32[l], 0.0) << "the same bytes read the same way";
    EXPECT_GT(f16[l], 0.0);
    EXPECT_LT(f16[l], i8[l]);
    EXPECT_LT(i8[l], e4m3[l]);
  }
}

TEST_F(KvQuantCheckTest, OutputKlIsZeroForFloat32AndRanksTheDtypes) {
  auto kl = [&](DType dtype, kv::KvStaticScales scales = {}) {
    const auto r = model_.kv_quant_output_kl(
        tokens_, kv::KvLayout(model_.kv_spec(dtype), 16, std::move(scales)), pool_);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r.value() : std::vector<double>{};
  };
  const std::vector<double> f32 = kl(DType::kF32);
  const std::vector<double> i8 = kl(DType::kI8);
  const std::vector<double> e4m3 = kl(DType::kF8E4M3, e4m3_scales());
  ASSERT_EQ(f32.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    EXPECT_EQ(f32[l], 0.0) << "an all-F32 pool gives the reference logits bit for bit";
    EXPECT_GT(i8[l], 0.0);
    EXPECT_LT(i8[l], e4m3[l]);
  }
}

TEST_F(KvQuantCheckTest, ALayerWithPlantedLargeErrorIsKeptAtFullPrecision) {
  // Layer 1's V scale 10^6 times too large, as a badly calibrated checkpoint could have it:
  // |v| / scale <= 448e-6, below half of e4m3's smallest subnormal (2^-9), so every V code is
  // zero and the layer's attention output is lost. Layer 0 keeps its calibrated scales.
  kv::KvStaticScales scales = e4m3_scales();
  scales.v[1] *= 1e6f;
  const auto report = run_kv_quant_check(model_, pool_, tokens_,
                                         kv::KvLayout(model_.kv_spec(DType::kF8E4M3), 16, scales),
                                         kDefaultKvQuantCheckThreshold);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  ASSERT_EQ(report.value().layers.size(), 2u);
  EXPECT_NEAR(report.value().layers[1].attn_error, 1.0, 1e-6) << "every V read back as zero";
  EXPECT_GT(report.value().layers[1].output_kl, kDefaultKvQuantCheckThreshold);
  EXPECT_LT(report.value().layers[0].output_kl, kDefaultKvQuantCheckThreshold);
  EXPECT_EQ(report.value().kept_layers(), (std::vector<int32_t>{1}));
  EXPECT_EQ(report.value().num_tokens, static_cast<int32_t>(tokens_.size()));
  const std::string table = format_kv_quant_check(report.value(), DType::kF32);
  EXPECT_NE(table.find("keeps layers 1 at float32; 1 of 2 layers fp8_e4m3"), std::string::npos)
      << table;
}

TEST_F(KvQuantCheckTest, ReportKeepsLayersAboveTheThresholdAndNaN) {
  const std::vector<double> kl = {0.01, 0.2, 0.1, std::nan("")};
  const std::vector<double> attn = {0.5, 0.0, 0.5, 0.0};  // diagnostic only: never decides
  const KvQuantCheckReport r = kv_quant_check_report(DType::kI8, 0.1, 7, kl, attn);
  EXPECT_EQ(r.kept_layers(), (std::vector<int32_t>{1, 3})) << "above, not at, the threshold";
}

TEST_F(KvQuantCheckTest, ResolvedLayoutKeepsCheckedAndSkippedLayers) {
  KvLayoutOptions o;
  o.scales.kv_dtype = DType::kI8;
  o.skip_layers.layers = {0};
  o.quant_check = true;
  o.quant_check_threshold = 1e9;  // nothing fails the check: only the skipped layer is kept
  auto r = resolve_kv_layout(o, model_, pool_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value().spec.layer_dtypes, (std::vector<DType>{DType::kF32, DType::kI8}));
  ASSERT_TRUE(r.value().quant_check.has_value());
  EXPECT_TRUE(r.value().quant_check->kept_layers().empty());
  o.skip_layers = {};
  o.quant_check_threshold = 0.0;  // every quantized layer has some error: all kept
  r = resolve_kv_layout(o, model_, pool_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().spec.layer_dtypes, (std::vector<DType>{DType::kF32, DType::kF32}));
  o.quant_check = false;
  r = resolve_kv_layout(o, model_, pool_);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().spec.layer_dtypes.empty());
  EXPECT_FALSE(r.value().quant_check.has_value());
  o.quant_check = true;
  o.quant_check_threshold = -1.0;
  EXPECT_FALSE(resolve_kv_layout(o, model_, pool_).ok());
  o.scales.kv_dtype = DType::kF32;  // nothing to check on a float32 cache
  o.quant_check_threshold = 0.0;
  r = resolve_kv_layout(o, model_, pool_);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().quant_check.has_value());
  EXPECT_TRUE(r.value().spec.layer_dtypes.empty());
}

TEST_F(KvQuantCheckTest, TheEngineBuildsItsPoolFromTheCheck) {
  EngineConfig c;
  c.num_blocks = 32;
  c.kv_cache_dtype = KvCacheDType::kFp8E5M2;
  c.calculate_kv_scales = true;
  c.kv_quant_check = true;
  c.kv_quant_check_threshold = 0.0;
  auto e = engine::create_engine(model_, pool_, c);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_TRUE((*e)->kv_cache().quant_check.has_value());
  EXPECT_EQ((*e)->kv_cache().quant_check->kept_layers(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ((*e)->kv_cache().layer_dtypes, (std::vector<DType>{DType::kF32, DType::kF32}));
  EXPECT_EQ((*e)->kv_cache().bytes_per_token, model_.kv_spec(DType::kF32).bytes_per_token());
  c.kv_quant_check_threshold = 1e9;
  auto d = engine::create_engine(model_, pool_, c);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE((*d)->kv_cache().quant_check->kept_layers().empty());
  EXPECT_EQ((*d)->kv_cache().bytes_per_token, model_.kv_spec(DType::kF8E5M2).bytes_per_token());
}

TEST_F(KvQuantCheckTest, TheEngineReportsEachForwardPassOfTheCheck) {
  EngineConfig c;
  c.num_blocks = 32;
  c.kv_cache_dtype = KvCacheDType::kInt8;
  c.kv_quant_check = true;
  std::vector<std::pair<int32_t, int32_t>> calls;
  c.kv_quant_check_progress = [&](int32_t pass, int32_t passes) {
    calls.emplace_back(pass, passes);
  };
  auto e = engine::create_engine(model_, pool_, c);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  // Two layers: the float32 reference, one pass per quantized layer, the attention-error pass.
  EXPECT_EQ(calls, (std::vector<std::pair<int32_t, int32_t>>{{1, 4}, {2, 4}, {3, 4}, {4, 4}}));
  ASSERT_TRUE((*e)->kv_cache().quant_check.has_value());
}

}  // namespace
}  // namespace strata::engine
