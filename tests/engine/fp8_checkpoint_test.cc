// FP8 checkpoints, dequantized to BF16 at load (model_fp8.cc): DeepSeek-V3's block-scaled
// weights (weight_scale_inv per block, 16 x 16 here so that the fixture's small weights hold
// several blocks and partial ones: 24 rows of q_b_proj, 48 of kv_a_proj), and compressed-tensors'
// and FBGEMM's with a weight_scale per output channel or per tensor (float or bfloat16 scales,
// [rows, 1], [rows] or [1]) on a dense Llama fixture. The logits must be those of a float32
// checkpoint of the same dequantized values (bf16(fp8(code) * scale)): a scale applied to the
// wrong rows or columns is far off. And the refusals, each naming what is wrong: an F8 weight
// without its scales, scales of another shape, quantizations that are not FP8 weights.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/runner_factory.h"
#include "engine_testing.h"
#include "fixture_copy.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "reference_testing.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_util::EditedFixture;

constexpr int64_t kVocab = 160;
const fs::path kModels = fs::path(STRATA_TEST_DATA_DIR) / "models";

// How a checkpoint lays out its FP8 weights' scales.
struct ScaleLayout {
  int64_t block_rows = 0, block_cols = 0;  // what one scale covers; 0: the whole dimension
  std::string suffix = "_scale";           // the scale tensor: <weight><suffix>
  std::string dtype = "F32";               // F32 or BF16
  bool rank1 = false;                      // a scale per row as [rows], not [rows, 1]
};

// The linear weights a quantized checkpoint stores as F8_E4M3 (not the embedding, the LM head
// or an MoE router).
bool fp8_quantized(const std::string& name, const std::vector<int64_t>& shape) {
  return shape.size() == 2 && name.find("embed_tokens") == std::string::npos &&
         name != "lm_head.weight" && !name.ends_with("mlp.gate.weight");
}

// The smallest scale of layout's dtype that takes amax to at most the largest e4m3 code.
float scale_for(float amax, const ScaleLayout& layout) {
  const float s = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
  if (layout.dtype == "F32") return s;
  uint16_t b = f32_to_bf16(s);
  if (bf16_to_f32(b) < s) ++b;
  return bf16_to_f32(b);
}

// Quantizes w [rows, cols] with one scale per block of layout: the codes, the scale tensor, and
// w replaced by the values the engine makes of them.
void quantize_fp8(const std::vector<int64_t>& shape, std::vector<float>& w,
                  const ScaleLayout& layout, test_util::RawTensor& codes,
                  test_util::RawTensor& scales) {
  const int64_t rows = shape[0], cols = shape[1];
  const int64_t bm = layout.block_rows > 0 ? layout.block_rows : rows;
  const int64_t bn = layout.block_cols > 0 ? layout.block_cols : cols;
  const int64_t srows = (rows + bm - 1) / bm, scols = (cols + bn - 1) / bn;
  const auto at = [&](int64_t i) {
    return static_cast<size_t>((i / cols / bm) * scols + (i % cols) / bn);
  };
  std::vector<float> amax(static_cast<size_t>(srows * scols), 0.0f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    amax[at(i)] = std::max(amax[at(i)], std::fabs(w[static_cast<size_t>(i)]));
  }
  std::vector<float> s(amax.size());
  for (size_t b = 0; b < s.size(); ++b) s[b] = scale_for(amax[b], layout);
  codes = {"F8_E4M3", shape, std::string(static_cast<size_t>(rows * cols), '\0')};
  for (int64_t i = 0; i < rows * cols; ++i) {
    const uint8_t code = f32_to_fp8_e4m3(w[static_cast<size_t>(i)] / s[at(i)]);
    codes.bytes[static_cast<size_t>(i)] = static_cast<char>(code);
    w[static_cast<size_t>(i)] = bf16_to_f32(f32_to_bf16(fp8_e4m3_to_f32(code) * s[at(i)]));
  }
  scales.dtype = layout.dtype;
  if (layout.block_rows == 1 && layout.block_cols == 0) {
    scales.shape = layout.rank1 ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, 1};
  } else if (layout.block_rows == 0 && layout.block_cols == 0) {
    scales.shape = {1};
  } else {
    scales.shape = {srows, scols};
  }
  scales.bytes.clear();
  for (const float v : s) {
    if (layout.dtype == "F32") {
      scales.bytes.append(reinterpret_cast<const char*>(&v), 4);
    } else {
      const uint16_t b = f32_to_bf16(v);
      scales.bytes.append(reinterpret_cast<const char*>(&b), 2);
    }
  }
}

// `fixture` with its linear weights as F8_E4M3 and scales laid out as `layout` (and, with
// static_input_scales, an input_scale beside each, as static-activation checkpoints carry), under
// quantization_config `quant`; and a float32 copy of the same dequantized values.
struct Fp8Checkpoint {
  std::unique_ptr<EditedFixture> fp8, plain;
  int num_fp8 = 0;
};

Fp8Checkpoint make_fp8(const std::string& fixture, const json& quant, const ScaleLayout& layout,
                       bool static_input_scales = false) {
  Fp8Checkpoint c;
  EditedFixture::Tensors dequantized;
  c.fp8 = std::make_unique<EditedFixture>(
      fixture, json{{"quantization_config", quant}},
      [&](EditedFixture::Tensors& t, test_util::RawTensors& raw) {
        for (auto it = t.begin(); it != t.end();) {
          if (!fp8_quantized(it->first, it->second.first)) {
            ++it;
            continue;
          }
          const std::string name = it->first;
          test_util::RawTensor scales;
          quantize_fp8(it->second.first, it->second.second, layout, raw[name], scales);
          raw[name + layout.suffix] = std::move(scales);
          if (static_input_scales) {  // a checkpoint's static activation scales: not read
            const float one = 1.0f;
            raw[name.substr(0, name.size() - 6) + "input_scale"] = {
                "F32", {1}, std::string(reinterpret_cast<const char*>(&one), 4)};
          }
          dequantized[name] = std::move(it->second);
          ++c.num_fp8;
          it = t.erase(it);
        }
      });
  c.plain = std::make_unique<EditedFixture>(fixture, json::object(),
                                            [&](EditedFixture::Tensors& t, test_util::RawTensors&) {
                                              for (const auto& [name, v] : dequantized) t[name] = v;
                                            });
  return c;
}

json compressed_tensors(const std::string& strategy, int bits = 8,
                        const std::string& type = "float") {
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights",
               {{"num_bits", bits},
                {"type", type},
                {"strategy", strategy},
                {"symmetric", true},
                {"dynamic", false}}},
              {"input_activations",
               {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}},
          {"ignore", {"lm_head"}}};
}

class Fp8CheckpointTest : public ::testing::Test {
 protected:
  Fp8CheckpointTest() : pool_(2) {}

  // The fixture's first prompt through c's FP8 model: the float32 copy's logits within 1e-5,
  // and far (1e-3) from the fixture's own (the quantization reached the forward pass).
  void expect_dequantized(const std::string& fixture, const Fp8Checkpoint& c) {
    const auto ref = model::SafetensorsFile::open(kModels / fixture / "reference.safetensors");
    const std::vector<int32_t> prompt = test_util::int_tensor(ref.tensor("prompt.0"));
    model::Model fp8_model = model::Model::load({c.fp8->dir()});
    model::Model plain_model = model::Model::load({c.plain->dir()});
    const std::vector<float> got = test_util::prompt_logits(fp8_model, pool_, {prompt})[0];
    const std::vector<float> want = test_util::prompt_logits(plain_model, pool_, {prompt})[0];
    ASSERT_EQ(got.size(), want.size());
    const auto rows = static_cast<int64_t>(prompt.size());
    EXPECT_LE(test_util::max_row_rel_err(got.data(), want.data(), rows, kVocab), 1e-5);
    const auto* full = static_cast<const float*>(ref.tensor("logits.0").data);
    EXPECT_GE(test_util::max_row_rel_err(got.data(), full, rows, kVocab), 1e-3);
  }

  // Model::load of dir throws an Error whose message holds every one of `parts`.
  static void expect_refused(const fs::path& dir, const std::vector<std::string>& parts) {
    try {
      (void)model::Model::load({dir});
      ADD_FAILURE() << dir << " loaded";
    } catch (const Error& e) {
      for (const std::string& p : parts) {
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << p << " in " << e.what();
      }
    }
  }

  ThreadPool pool_;
};

TEST_F(Fp8CheckpointTest, DeepseekBlockScaledWeightsAreDequantizedAtLoad) {
  const Fp8Checkpoint c =
      make_fp8("deepseek-v3-mla", {{"quant_method", "fp8"}, {"weight_block_size", {16, 16}}},
               ScaleLayout{.block_rows = 16, .block_cols = 16, .suffix = "_scale_inv"});
  EXPECT_GT(c.num_fp8, 40);
  expect_dequantized("deepseek-v3-mla", c);
}

TEST_F(Fp8CheckpointTest, CompressedTensorsPerChannelAndPerTensorWeightsAreDequantizedAtLoad) {
  const Fp8Checkpoint channel =
      make_fp8("llama3-gqa", compressed_tensors("channel"), ScaleLayout{.block_rows = 1});
  EXPECT_EQ(channel.num_fp8, 14);  // q, k, v, o, gate, up, down in each of 2 layers
  expect_dequantized("llama3-gqa", channel);
  const Fp8Checkpoint tensor =
      make_fp8("llama3-gqa", compressed_tensors("tensor"), ScaleLayout{.dtype = "BF16"},
               /*static_input_scales=*/true);
  expect_dequantized("llama3-gqa", tensor);
}

TEST_F(Fp8CheckpointTest, FbgemmPerChannelWeightsAreDequantizedAtLoad) {
  const json quant = {{"quant_method", "fbgemm_fp8"},
                      {"activation_scale_ub", 1200.0},
                      {"modules_to_not_convert", {"lm_head"}}};
  const Fp8Checkpoint c =
      make_fp8("llama3-gqa", quant, ScaleLayout{.block_rows = 1, .dtype = "BF16", .rank1 = true});
  expect_dequantized("llama3-gqa", c);
}

TEST_F(Fp8CheckpointTest, MissingOrMisshapenScalesAreErrorsNamingTheTensor) {
  const std::string o_proj = "model.layers.0.self_attn.o_proj.weight";
  // One F8 weight whose scales the edit replaces (or drops, with an empty shape).
  const auto with_scales = [&](const json& quant, const std::string& scale_name,
                               std::vector<int64_t> shape) {
    return std::make_unique<EditedFixture>(
        "llama3-gqa", json{{"quantization_config", quant}},
        [&](EditedFixture::Tensors& t, test_util::RawTensors& raw) {
          const auto& [w_shape, values] = t.at(o_proj);
          raw[o_proj] = {"F8_E4M3", w_shape, std::string(values.size(), '\x38')};
          t.erase(o_proj);
          if (shape.empty()) return;
          int64_t n = 1;
          for (const int64_t d : shape) n *= d;
          raw[scale_name] = {"F32", shape, std::string(static_cast<size_t>(n) * 4, '\0')};
        });
  };
  const json fp8 = {{"quant_method", "fp8"}};
  expect_refused(with_scales(fp8, "", {})->dir(), {"o_proj.weight_scale_inv"});
  expect_refused(with_scales(compressed_tensors("channel"), "", {})->dir(),
                 {"o_proj.weight_scale'", "per output channel or tensor"});
  // o_proj is [128, 128]: 64 scales, or 128 in two columns, are neither per row nor per tensor.
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{64, 1}, {64, 2}, {1, 128}}) {
    expect_refused(with_scales(compressed_tensors("channel"), o_proj + "_scale", shape)->dir(),
                   {"o_proj.weight_scale'", "128 rows"});
  }
}

TEST_F(Fp8CheckpointTest, QuantizationsOtherThanFp8WeightsAreErrorsNamingThem) {
  const EditedFixture awq("llama3-gqa", {{"quantization_config", {{"quant_method", "awq"}}}});
  expect_refused(awq.dir(), {"'awq'", "convert the checkpoint to bfloat16"});
  const EditedFixture w4a16("llama3-gqa",
                            {{"quantization_config", compressed_tensors("group", 4, "int")}});
  expect_refused(w4a16.dir(), {"4-bit 'int' weights with strategy 'group'"});
  const EditedFixture fp8_blocks("llama3-gqa",
                                 {{"quantization_config", compressed_tensors("block")}});
  expect_refused(fp8_blocks.dir(), {"8-bit 'float' weights with strategy 'block'"});
  json no_groups = compressed_tensors("channel");
  no_groups.erase("config_groups");
  const EditedFixture missing("llama3-gqa", {{"quantization_config", no_groups}});
  expect_refused(missing.dir(), {"config_groups"});
}

// --quantization auto (the default) runs a checkpoint's FP8 weights in FP8 on the GPU when a
// scale per channel holds them again; everywhere else it keeps BF16 (the CPU has no FP8 path,
// DeepSeek's blocks would coarsen, MLA's latent products take BF16 only, the GPU's FP8 rows are
// multiples of 16 elements).
TEST(WeightQuantizationTest, AutoIsFp8OnTheGpuForPerChannelAndPerTensorFp8CheckpointsOnly) {
  const EditedFixture channel("llama3-gqa",
                              {{"quantization_config", compressed_tensors("channel")}});
  const EditedFixture tensor("llama3-gqa", {{"quantization_config", compressed_tensors("tensor")}});
  const EditedFixture fbgemm("llama3-gqa",
                             {{"quantization_config", {{"quant_method", "fbgemm_fp8"}}}});
  const EditedFixture blocks(
      "llama3-gqa",
      {{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {16, 16}}}}});
  const EditedFixture w4a16("llama3-gqa",
                            {{"quantization_config", compressed_tensors("group", 4, "int")}});
  // Rows of 120 elements: the GPU's FP8 rows are multiples of 16, so auto keeps them bf16.
  const EditedFixture odd_rows(
      "llama3-gqa",
      {{"quantization_config", compressed_tensors("channel")}, {"intermediate_size", 120}});
  const EditedFixture mla("deepseek-v3-mla",
                          {{"quantization_config", compressed_tensors("channel")}});
  const auto resolve = [](const fs::path& dir, Device device, WeightQuantization q) {
    EngineConfig c;
    c.device = device;
    c.quantization = q;
    return resolve_weight_quantization(c, model::load_model_config(dir));
  };
  const WeightQuantization kAuto = EngineConfig{}.quantization;
  ASSERT_EQ(kAuto, WeightQuantization::kAuto);
  for (const fs::path& dir : {channel.dir(), tensor.dir(), fbgemm.dir()}) {
    EXPECT_EQ(resolve(dir, Device::kCuda, kAuto), WeightQuantization::kFp8) << dir;
    EXPECT_EQ(resolve(dir, Device::kCpu, kAuto), WeightQuantization::kNone) << dir;
    EXPECT_EQ(resolve(dir, Device::kCuda, WeightQuantization::kNone), WeightQuantization::kNone);
  }
  const fs::path plain = kModels / "llama3-gqa";
  for (const fs::path& dir : {plain, blocks.dir(), w4a16.dir(), odd_rows.dir(), mla.dir()}) {
    EXPECT_EQ(resolve(dir, Device::kCuda, kAuto), WeightQuantization::kNone) << dir;
    EXPECT_EQ(resolve(dir, Device::kCuda, WeightQuantization::kFp8), WeightQuantization::kFp8);
  }
}

}  // namespace
}  // namespace strata::engine
