// Per-layer KV dtypes (kv/kv_layer_dtypes.h): --kv-cache-dtype-skip-layers' text form, its
// one-line refusals, the layers it names for a model, and the dtype array the layout takes.

#include "kv/kv_layer_dtypes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::kv {
namespace {

std::string error_of(std::string_view text) {
  const Result<KvSkipLayers> r = parse_kv_skip_layers(text);
  return r.ok() ? "" : r.status().message();
}

TEST(KvSkipLayersTest, ParsesIndicesSlidingWindowAndBoth) {
  EXPECT_TRUE(parse_kv_skip_layers("").value().empty());
  EXPECT_TRUE(parse_kv_skip_layers("  ").value().empty());
  const KvSkipLayers a = parse_kv_skip_layers("0,5").value();
  EXPECT_FALSE(a.sliding_window);
  EXPECT_EQ(a.layers, (std::vector<int32_t>{0, 5}));
  const KvSkipLayers b = parse_kv_skip_layers("sliding_window").value();
  EXPECT_TRUE(b.sliding_window);
  EXPECT_TRUE(b.layers.empty());
  const KvSkipLayers c = parse_kv_skip_layers("3, sliding_window ,12").value();
  EXPECT_TRUE(c.sliding_window);
  EXPECT_EQ(c.layers, (std::vector<int32_t>{3, 12}));
  EXPECT_EQ(kv_skip_layers_text(c), "sliding_window,3,12");
  EXPECT_EQ(kv_skip_layers_text(KvSkipLayers{}), "");
}

TEST(KvSkipLayersTest, GarbageEmptyItemsAndDuplicatesAreOneClearLine) {
  for (const char* bad : {"x", "1a", "-1", "+1", "1.5", "0x2", "sliding", "99999999999"}) {
    const std::string e = error_of(bad);
    EXPECT_NE(e.find("is not a layer index or sliding_window"), std::string::npos)
        << bad << ": " << e;
    EXPECT_EQ(e.rfind("--kv-cache-dtype-skip-layers '", 0), 0u) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  EXPECT_NE(error_of("1,,2").find("empty item"), std::string::npos);
  EXPECT_NE(error_of("1,").find("empty item"), std::string::npos);
  EXPECT_NE(error_of("3,1,3").find("layer 3 is named twice"), std::string::npos);
  EXPECT_NE(error_of("sliding_window,sliding_window").find("sliding_window is named twice"),
            std::string::npos);
}

TEST(KvSkipLayersTest, MaskNamesIndicesAndSlidingWindowLayersAndRefusesOutOfRange) {
  const std::vector<int32_t> hybrid = {4096, 0, 4096, 0, 4096, 0};  // Gemma-like alternation
  const auto sw = kv_skip_layer_mask(parse_kv_skip_layers("sliding_window").value(), hybrid);
  EXPECT_EQ(sw.value(), (std::vector<bool>{true, false, true, false, true, false}));
  const auto both = kv_skip_layer_mask(parse_kv_skip_layers("sliding_window,1").value(), hybrid);
  EXPECT_EQ(both.value(), (std::vector<bool>{true, true, true, false, true, false}));
  const std::vector<int32_t> full(4, 0);
  EXPECT_EQ(kv_skip_layer_mask(parse_kv_skip_layers("sliding_window").value(), full).value(),
            std::vector<bool>(4, false))
      << "a model without windows: sliding_window names no layer";
  const auto out = kv_skip_layer_mask(parse_kv_skip_layers("0,4").value(), full);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "--kv-cache-dtype-skip-layers: layer 4 is out of range (the model has 4 layers, 0..3)");
}

TEST(KvSkipLayersTest, LayerDtypesAreEmptyUnlessSomeLayerIsKept) {
  EXPECT_TRUE(kv_layer_dtypes(DType::kI8, DType::kF32, {false, false}).empty());
  EXPECT_EQ(kv_layer_dtypes(DType::kI8, DType::kF32, {false, true, false}),
            (std::vector<DType>{DType::kI8, DType::kF32, DType::kI8}));
  EXPECT_EQ(kv_dtype_summary(DType::kI8, {}), "int8");
  EXPECT_EQ(kv_dtype_summary(DType::kI8, std::vector<DType>{DType::kF32, DType::kI8, DType::kF32}),
            "int8 (layers 0,2 float32)");
}

}  // namespace
}  // namespace strata::kv
