// --kv-quant-check on the GPU (CudaModel::kv_quant_check) and the pool's re-layout it decides
// (CudaModel::set_kv_layer_dtypes), on the transformers fixtures of
// tools/fixtures/make_gpu_fixtures.py:
//   - the per-layer figures agree with the CPU model's measurement of the same dtype and scales
//     (a bf16 cache and bf16 activations there against float32 here, so within a factor, not
//     bit for bit);
//   - a layer whose V scale is planted a million times too large reads attention error 1 and
//     stands out in the output KL, for the engine to keep, while the other layer's figures do
//     not move (each pass quantizes one layer only);
//   - INT4 measures through its R newest blocks; the serving pool is untouched by the passes;
//   - a re-laid-out pool holds bf16 exactly where asked (the same logits as a model created that
//     way), is sized from the same budget, drops an INT4 newest-blocks pool no layer uses, and is
//     refused after the first step.
// Skips without a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "cuda_step_runner.h"
#include "kv/kv_cache_manager.h"
#include "model/cuda/cuda_model.h"
#include "model/hf_config.h"
#include "model/kv_scales.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace strata::model {
namespace {

const std::string kModelsDir = std::string(STRATA_TEST_DATA_DIR) + "/models-gpu/";

std::vector<int32_t> fixture_prompt(const std::string& fixture, int i) {
  const SafetensorsFile f = SafetensorsFile::open(kModelsDir + fixture + "/reference.safetensors");
  const TensorView t = f.tensor("prompt." + std::to_string(i));
  const auto* p = static_cast<const int32_t*>(t.data);
  return {p, p + t.numel()};
}

// The fixture's two prompts end to end: a calibration text of a few hundred tokens.
std::vector<int32_t> calibration_tokens(const std::string& fixture) {
  std::vector<int32_t> t = fixture_prompt(fixture, 0);
  const std::vector<int32_t> more = fixture_prompt(fixture, 1);
  t.insert(t.end(), more.begin(), more.end());
  return t;
}

CudaModelOptions options(const std::string& fixture, DType kv_dtype) {
  CudaModelOptions o;
  o.model_dir = kModelsDir + fixture;
  o.kv_dtype = kv_dtype;
  o.block_size = kBlockSize;
  o.num_blocks = 64;
  o.max_num_tokens = 512;
  o.max_num_seqs = 4;
  if (kv_dtype == DType::kI4) {
    o.num_newest_blocks = 64;
    o.newest_blocks = kNewestBlocks;
  }
  return o;
}

int32_t num_layers(const std::string& fixture) {
  return static_cast<int32_t>(load_model_config(kModelsDir + fixture).num_hidden_layers);
}

// FP8 scales calibrated on the device over tokens, set on the model and returned.
kv::KvStaticScales calibrate(CudaModel& model, const std::vector<int32_t>& tokens, DType dtype) {
  Result<std::vector<std::pair<float, float>>> abs_max = model.kv_abs_max(tokens);
  EXPECT_TRUE(abs_max.ok()) << abs_max.status().to_string();
  if (!abs_max.ok()) return {};
  kv::KvStaticScales scales = kv_scales_from_abs_max(*abs_max, dtype);
  EXPECT_TRUE(model.set_kv_static_scales(scales).ok());
  return scales;
}

// The GPU's figures against the CPU model's for FP8 E5M2 (the coarsest format, so its error is
// far above the bf16 activations' noise) with the same scales and tokens. Measured on an H200
// GPU: see docs/kv-quant.md, "On the GPU".
TEST(CudaKvQuantCheckTest, FiguresAgreeWithTheCpuModel) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  for (const std::string fixture : {"llama3-gqa-hd128", "mistral-swa-hd64"}) {
    SCOPED_TRACE(fixture);
    const std::vector<int32_t> tokens = calibration_tokens(fixture);
    std::unique_ptr<CudaModel> gpu = CudaModel::create(options(fixture, DType::kF8E5M2));
    const kv::KvStaticScales scales = calibrate(*gpu, tokens, DType::kF8E5M2);
    ThreadPool pool(2);
    int passes = 0;
    Result<CudaModel::KvQuantFigures> got =
        gpu->kv_quant_check(tokens, pool, [&] { ++passes; });
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(passes, num_layers(fixture) + 1);

    Model cpu = Model::load(ModelLoadOptions{.model_dir = kModelsDir + fixture});
    const kv::KvLayout quantized(cpu.kv_spec(DType::kF8E5M2), 16, scales);
    Result<std::vector<double>> kl = cpu.kv_quant_output_kl(tokens, quantized, pool);
    Result<std::vector<double>> err = cpu.kv_quant_error(tokens, quantized, pool);
    ASSERT_TRUE(kl.ok() && err.ok());
    ASSERT_EQ(got->output_kl.size(), kl->size());
    ASSERT_EQ(got->attn_error.size(), err->size());
    for (size_t l = 0; l < kl->size(); ++l) {
      std::printf("  %s layer %zu: output KL gpu %.3e cpu %.3e, attn error gpu %.3e cpu %.3e\n",
                  fixture.c_str(), l, got->output_kl[l], (*kl)[l], got->attn_error[l], (*err)[l]);
      EXPECT_GT((*kl)[l], 0.0);
      EXPECT_GT(got->output_kl[l], 0.5 * (*kl)[l]) << "layer " << l;
      EXPECT_LT(got->output_kl[l], 2.0 * (*kl)[l]) << "layer " << l;
      EXPECT_GT(got->attn_error[l], 0.5 * (*err)[l]) << "layer " << l;
      EXPECT_LT(got->attn_error[l], 2.0 * (*err)[l]) << "layer " << l;
    }
  }
}

// A layer whose V codes all underflow (its scale a million times the calibrated one) reads
// back zeros: its attention output is lost (error 1) and its output KL rises far above its
// healthy figure. The other layer's figures are those of the healthy check bit for bit: in its
// pass the planted layer holds bf16.
TEST(CudaKvQuantCheckTest, APlantedLayerStandsOut) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const std::string fixture = "llama3-gqa-hd128";
  const std::vector<int32_t> tokens = calibration_tokens(fixture);
  std::unique_ptr<CudaModel> gpu = CudaModel::create(options(fixture, DType::kF8E4M3));
  kv::KvStaticScales scales = calibrate(*gpu, tokens, DType::kF8E4M3);
  ThreadPool pool(2);
  Result<CudaModel::KvQuantFigures> healthy = gpu->kv_quant_check(tokens, pool);
  ASSERT_TRUE(healthy.ok()) << healthy.status().to_string();
  scales.v[1] *= 1e6f;
  ASSERT_TRUE(gpu->set_kv_static_scales(scales).ok());
  Result<CudaModel::KvQuantFigures> got = gpu->kv_quant_check(tokens, pool);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  std::printf("  layer 1 planted: output KL %.3e (healthy %.3e), attn error %.3e (healthy %.3e)\n",
              got->output_kl[1], healthy->output_kl[1], got->attn_error[1],
              healthy->attn_error[1]);
  EXPECT_GT(got->attn_error[1], 0.99);
  EXPECT_LT(healthy->attn_error[1], 0.1);
  EXPECT_GT(got->output_kl[1], 10.0 * healthy->output_kl[1]);
  EXPECT_EQ(got->output_kl[0], healthy->output_kl[0]);
  EXPECT_EQ(got->attn_error[0], healthy->attn_error[0]);
}

// Every dtype: figures that are finite, positive and below a lost layer's, and a serving pool
// the passes did not touch (a prompt run after the check gives the logits of a fresh model).
TEST(CudaKvQuantCheckTest, EveryDtypeMeasuresAndLeavesTheServingPoolAlone) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const std::string fixture = "qwen2-bias-hd64";
  const std::vector<int32_t> tokens = calibration_tokens(fixture);
  const std::vector<int32_t> prompt = fixture_prompt(fixture, 0);
  for (const DType dtype : {DType::kF8E4M3, DType::kI8, DType::kI4}) {
    const std::string name(dtype_name(dtype));
    SCOPED_TRACE(name);
    std::unique_ptr<CudaModel> fresh = CudaModel::create(options(fixture, dtype));
    std::unique_ptr<CudaModel> checked = CudaModel::create(options(fixture, dtype));
    if (dtype == DType::kF8E4M3) {
      calibrate(*fresh, tokens, dtype);
      calibrate(*checked, tokens, dtype);
    }
    Runner fresh_runner(*fresh);
    const std::vector<float> want = chunk_then_decode_logits(fresh_runner, prompt, 6);
    ThreadPool pool(2);
    Result<CudaModel::KvQuantFigures> got = checked->kv_quant_check(tokens, pool);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    for (size_t l = 0; l < got->output_kl.size(); ++l) {
      std::printf("  %s layer %zu: output KL %.3e, attn error %.3e\n", name.c_str(), l,
                  got->output_kl[l], got->attn_error[l]);
      EXPECT_TRUE(std::isfinite(got->output_kl[l]) && got->output_kl[l] > 0.0);
      EXPECT_GT(got->attn_error[l], 0.0);
      EXPECT_LT(got->attn_error[l], 0.5);
    }
    Runner runner(*checked);
    EXPECT_EQ(chunk_then_decode_logits(runner, prompt, 6), want);
  }
  std::unique_ptr<CudaModel> bf16 = CudaModel::create(options(fixture, DType::kBF16));
  ThreadPool pool(1);
  EXPECT_EQ(bf16->kv_quant_check(tokens, pool).status().code(), StatusCode::kInvalidArgument);
  std::unique_ptr<CudaModel> int8 = CudaModel::create(options(fixture, DType::kI8));
  EXPECT_EQ(int8->kv_quant_check({}, pool).status().code(), StatusCode::kInvalidArgument);
}

// Re-laying the pool out: the same logits as a model created with those per-layer dtypes, the
// blocks sized from the same budget, and refusals for a foreign dtype and after a step.
TEST(CudaKvRelayoutTest, KeptLayersHoldBf16FromTheSameBudget) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const std::string fixture = "llama3-gqa-hd128";
  const std::vector<int32_t> prompt = fixture_prompt(fixture, 0);
  const auto layers = static_cast<size_t>(num_layers(fixture));
  std::vector<DType> one(layers, DType::kI8);
  one[0] = DType::kBF16;
  CudaModelOptions o = options(fixture, DType::kI8);
  o.num_blocks = 0;
  o.kv_cache_memory_bytes = int64_t{8} << 20;
  std::unique_ptr<CudaModel> model = CudaModel::create(o);
  const int32_t int8_blocks = model->num_blocks();
  EXPECT_EQ(model->set_kv_layer_dtypes(std::vector<DType>(layers, DType::kF8E4M3)).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(model->set_kv_layer_dtypes(one).ok());
  EXPECT_EQ(model->kv_layout().spec().layer_dtypes, one);
  EXPECT_EQ(model->num_blocks(), (int64_t{8} << 20) / model->kv_layout().block_bytes());
  EXPECT_LT(model->num_blocks(), int8_blocks);
  o.kv_layer_dtypes = one;
  std::unique_ptr<CudaModel> created = CudaModel::create(o);
  EXPECT_EQ(created->num_blocks(), model->num_blocks());
  Runner a(*model);
  Runner b(*created);
  EXPECT_EQ(chunk_then_decode_logits(a, prompt, 6), chunk_then_decode_logits(b, prompt, 6));
  EXPECT_EQ(model->set_kv_layer_dtypes({}).code(), StatusCode::kInvalidArgument);
}

// INT4 with every layer kept: no newest-blocks pool is left, and the model runs as a bf16 one
// (decode steps through CUDA graphs too, whose fixed inputs now carry no newest-blocks arrays).
TEST(CudaKvRelayoutTest, Int4WithEveryLayerKeptDropsTheNewestBlocksPool) {
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device";
  const std::string fixture = "llama3-gqa-hd128";
  const std::vector<int32_t> prompt = fixture_prompt(fixture, 0);
  const auto layers = static_cast<size_t>(num_layers(fixture));
  std::unique_ptr<CudaModel> model = CudaModel::create(options(fixture, DType::kI4));
  ASSERT_GT(model->num_kv_pools(), 1);
  ASSERT_TRUE(model->set_kv_layer_dtypes(std::vector<DType>(layers, DType::kBF16)).ok());
  EXPECT_EQ(model->num_kv_pools(), 1);
  EXPECT_EQ(model->info().num_newest_blocks, 0);
  std::unique_ptr<CudaModel> bf16 = CudaModel::create(options(fixture, DType::kBF16));
  Runner a(*model);
  Runner b(*bf16);
  EXPECT_EQ(chunk_then_decode_logits(a, prompt, 6), chunk_then_decode_logits(b, prompt, 6));
  EXPECT_GT(expect_graph_draws_match_eager(a, prompt), 20);
}

}  // namespace
}  // namespace strata::model
