// `strata plan` against hand-computed figures: GQA (Llama 3.2 1B), MLA (DeepSeek-V3),
// all-sliding-window (Mistral 7B: window-capped), hybrid windows (a note, full length),
// quantized KV dtypes with their scales, int4's residual pool subtracted as each engine
// subtracts it (bf16 blocks on cuda, float32 on cpu), and clear errors for impossible settings.

#include "../../tools/strata/plan_command.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_layout.h"

namespace strata::cli {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kLlama1B =
    read(std::string(STRATA_SOURCE_DIR) + "/bench/models/llama-3.2-1b/config.json");

const char* kDeepSeekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
  "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
  "n_routed_experts": 256, "n_shared_experts": 1, "first_k_dense_replace": 3,
  "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}})";

const char* kMistral7B = R"({
  "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
  "sliding_window": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";

const char* kHybrid = R"({
  "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 2304,
  "intermediate_size": 9216, "num_hidden_layers": 4, "num_attention_heads": 8,
  "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
  "max_position_embeddings": 8192, "sliding_window": 4096, "tie_word_embeddings": true,
  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]})";

PlanSettings settings(int64_t gpu_bytes, KvCacheDType dtype = KvCacheDType::kBF16) {
  PlanSettings s;
  s.kv_dtype = dtype;
  s.gpu_memory_bytes = gpu_bytes;
  return s;
}

constexpr int64_t kGiB = 1LL << 30;

TEST(PlanTest, Llama32OneBOnA24GiBDevice) {
  const PlanModel m = parse_plan_model(kLlama1B, "llama-3.2-1b");
  EXPECT_TRUE(m.engine_supported);
  // 16 + 16 x (attention 10,485,760 + norms 4,096 + MLP 50,331,648) + embeddings (tied)
  // 262,668,288 + final norm 2,048 = 1,235,814,400 parameters, bf16.
  EXPECT_EQ(m.weight_bytes, 2'471'628'800);
  const PlanReport r = compute_plan(m, settings(24 * kGiB));
  EXPECT_EQ(r.kv_bytes_per_token, 32768.0);  // 2 x 16 x 8 x 64 x 2
  EXPECT_EQ(r.kv_bytes_per_token_per_layer, 2048.0);
  EXPECT_EQ(r.scale_bytes_per_token, 0.0);
  EXPECT_EQ(r.naive_mha_bytes_per_token, 131072.0);  // 32 heads instead of 8
  EXPECT_EQ(r.block_bytes, 524'288);
  // floor(0.9 x 24 GiB) - weights = 20,721,194,598 bytes; / 524,288 = 39,522 blocks, one null.
  EXPECT_EQ(r.kv_pool_bytes, 20'721'194'598);
  EXPECT_EQ(r.num_blocks, 39'521);
  EXPECT_EQ(r.capacity_tokens, 39'521 * 16);
  EXPECT_EQ(r.naive_capacity_tokens, 158'090);
  EXPECT_EQ(r.max_model_len, 131'072);
  EXPECT_EQ(r.blocks_per_seq, 8192);
  EXPECT_EQ(r.max_concurrent_seqs, 4);
  EXPECT_EQ(r.longest_context, 131'072);
  EXPECT_EQ(r.window, 0);
}

TEST(PlanTest, QuantizedKvDtypesCountTheirScales) {
  const PlanModel m = parse_plan_model(kLlama1B, "llama-3.2-1b");
  // fp8: one scale per tensor.
  EXPECT_EQ(compute_plan(m, settings(24 * kGiB, KvCacheDType::kFp8E4M3)).kv_bytes_per_token,
            16384.0);
  // int8: data 16,384 + one fp16 scale per token per KV head for K and V: 2 x 16 x 8 x 2 = 512.
  const PlanReport i8 = compute_plan(m, settings(24 * kGiB, KvCacheDType::kInt8));
  EXPECT_EQ(i8.kv_bytes_per_token, 16896.0);
  EXPECT_EQ(i8.scale_bytes_per_token, 512.0);
  // int4 (KIVI: a scale and a zero point each): data 8,192; K per channel per block
  // 16 x 8 x 64 x 2 x 2 = 32,768 bytes and V per token 16 x 8 x 16 x 2 x 2 = 8,192 bytes per
  // block of 16: 2,560 per token.
  const PlanReport i4 = compute_plan(m, settings(24 * kGiB, KvCacheDType::kInt4));
  EXPECT_EQ(i4.scale_bytes_per_token, 2560.0);
  EXPECT_EQ(i4.kv_bytes_per_token, 10752.0);
  EXPECT_EQ(compute_plan(m, settings(24 * kGiB, KvCacheDType::kF32)).kv_bytes_per_token, 65536.0);
}

TEST(PlanTest, Int4OnTheLlama8BShapeIsAThirdOfBf16) {
  // docs/kv-quant.md: codes 1,024 bytes per token per layer, K's per-block scale and zero point
  // 2 x 8 x 128 x 2 x 2 / 16 = 256, V's 2 x 8 x 2 = 32: 1,312 x 32 layers = 41,984 bytes, 0.32x
  // of bf16's 131,072 -- and byte for byte the pool KvLayout allocates (kv_layout_test).
  const PlanModel m = parse_plan_model(
      read(std::string(STRATA_SOURCE_DIR) + "/bench/models/llama-3.1-8b/config.json"),
      "llama-3.1-8b");
  const PlanReport bf16 = compute_plan(m, settings(80 * kGiB));
  const PlanReport i4 = compute_plan(m, settings(80 * kGiB, KvCacheDType::kInt4));
  EXPECT_EQ(bf16.kv_bytes_per_token, 131072.0);
  EXPECT_EQ(i4.kv_bytes_per_token, 41984.0);
  EXPECT_EQ(i4.kv_bytes_per_token_per_layer, 1312.0);
  EXPECT_EQ(i4.scale_bytes_per_token, 9216.0);
  EXPECT_EQ(i4.block_bytes, 16 * 41984);
  EXPECT_NEAR(i4.kv_bytes_per_token / bf16.kv_bytes_per_token, 0.32, 0.001);
}

// int4 with --device cpu: the CPU engine's float32 residual pool (kv::residual_pool_blocks
// blocks of kv::newest_blocks_spec's shape) comes out of the KV memory before it is divided into
// blocks.
TEST(PlanTest, Int4SubtractsTheResidualPoolAsTheEngineDoes) {
  const PlanModel m = parse_plan_model(kLlama1B, "llama-3.2-1b");
  PlanSettings s = settings(0, KvCacheDType::kInt4);
  s.device = PlanDevice::kCpu;
  s.kv_cache_memory_bytes = 4 * kGiB;
  const PlanReport r = compute_plan(m, s);
  // The engine's defaults: 256 sequences, 2048 batched tokens, R = 1:
  // 256 x 2 + 2048 / 16 + 1 = 641 blocks of 16 tokens x 65,536 bytes (float32 K and V, 16
  // layers, 8 KV heads, head_dim 64) = 1,048,576 bytes: 672,137,216 bytes.
  const kv::KvSpec f32{.num_layers = 16, .num_kv_heads = 8, .head_dim = 64, .dtype = DType::kF32};
  const int64_t residual_block_bytes = kv::KvLayout(f32, 16).block_bytes();
  EXPECT_EQ(residual_block_bytes, 1'048'576);
  const int32_t residual_blocks = kv::newest_blocks_pool_size(256, 1, 2048, 16);
  EXPECT_EQ(residual_blocks, 641);
  const int64_t residual_bytes = residual_blocks * residual_block_bytes;
  EXPECT_EQ(r.int4_residual_pool_blocks, 641);
  EXPECT_EQ(r.int4_residual_pool_bytes, residual_bytes);
  EXPECT_EQ(r.kv_pool_bytes, 4 * kGiB);
  const int64_t int4_block_bytes = 16 * 10'752;  // QuantizedKvDtypesCountTheirScales
  EXPECT_EQ(r.block_bytes, int4_block_bytes);
  EXPECT_EQ(r.num_blocks, (4 * kGiB - residual_bytes) / int4_block_bytes - 1) << "one null block";
  EXPECT_EQ(r.capacity_tokens, r.num_blocks * 16);
  const std::string text = format_plan_text(r);
  EXPECT_NE(text.find("int4 residual  0.63 GiB: 641 float32 blocks (672137216 bytes)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("note           int4 (--device cpu): the full-precision residual pool"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("641 float32 blocks of 1048576 bytes (0.63 GiB), is subtracted"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("not subtracted here"), std::string::npos) << text;
  const std::string json = format_plan_json(r);
  EXPECT_NE(json.find("\"device\": \"cpu\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"int4_residual_pool_blocks\": 641"), std::string::npos) << json;
  EXPECT_NE(json.find("\"int4_residual_pool_bytes\": 672137216"), std::string::npos) << json;
  EXPECT_NE(json.find("\"int4_residual_pool_dtype\": \"float32\""), std::string::npos) << json;

  // Fewer sequences: a smaller residual pool, more int4 blocks.
  s.max_num_seqs = 8;
  const PlanReport few = compute_plan(m, s);
  EXPECT_EQ(few.int4_residual_pool_blocks, kv::newest_blocks_pool_size(8, 1, 2048, 16));
  EXPECT_EQ(few.int4_residual_pool_blocks, 8 * 2 + 128 + 1);
  EXPECT_EQ(
      few.num_blocks,
      (4 * kGiB - few.int4_residual_pool_blocks * residual_block_bytes) / int4_block_bytes - 1);
  EXPECT_GT(few.num_blocks, r.num_blocks);

  // --kv-int4-residual 64 (R = 4) and a smaller step budget.
  s.max_num_seqs = 256;
  s.max_num_batched_tokens = 512;
  s.kv_int4_residual = 64;
  const PlanReport wide = compute_plan(m, s);
  EXPECT_EQ(wide.int4_residual_pool_blocks, kv::newest_blocks_pool_size(256, 4, 512, 16));
  EXPECT_EQ(wide.int4_residual_pool_blocks, 256 * 5 + 32 + 1);
  EXPECT_EQ(wide.num_blocks, (4 * kGiB - wide.int4_residual_pool_bytes) / int4_block_bytes - 1);

  // Layers kept at bf16 hold no residual blocks but the residual pool keeps every layer's shape.
  s = settings(0, KvCacheDType::kInt4);
  s.device = PlanDevice::kCpu;
  s.kv_cache_memory_bytes = 4 * kGiB;
  s.skip_layers.layers = {0, 1};
  EXPECT_EQ(compute_plan(m, s).int4_residual_pool_bytes, residual_bytes);
}

// int4 with --device cuda (the default): the GPU's residual pool holds bf16 blocks
// (kv::newest_blocks_spec(spec, DType::kBF16), cuda_model.cc), as many as the CPU's float32 ones
// and half their bytes, so the same KV memory leaves more int4 blocks.
TEST(PlanTest, Int4ResidualPoolIsBf16OnCudaAndHalfTheCpusBytes) {
  const PlanModel m = parse_plan_model(kLlama1B, "llama-3.2-1b");
  PlanSettings s = settings(0, KvCacheDType::kInt4);
  s.kv_cache_memory_bytes = 4 * kGiB;
  EXPECT_EQ(s.device, PlanDevice::kCuda) << "plan sizes a GPU deployment by default";
  const PlanReport cuda = compute_plan(m, s);
  s.device = PlanDevice::kCpu;
  const PlanReport cpu = compute_plan(m, s);
  // 641 blocks (Int4SubtractsTheResidualPoolAsTheEngineDoes) of 16 tokens x 32,768 bytes (bf16 K
  // and V, 16 layers, 8 KV heads, head_dim 64) = 524,288 bytes: 336,068,608 bytes.
  const kv::KvSpec bf16{.num_layers = 16, .num_kv_heads = 8, .head_dim = 64, .dtype = DType::kBF16};
  EXPECT_EQ(kv::KvLayout(bf16, 16).block_bytes(), 524'288);
  EXPECT_EQ(cuda.int4_residual_pool_blocks, 641);
  EXPECT_EQ(cuda.int4_residual_pool_blocks, cpu.int4_residual_pool_blocks);
  EXPECT_EQ(cuda.int4_residual_pool_bytes, 641 * 524'288);
  EXPECT_EQ(2 * cuda.int4_residual_pool_bytes, cpu.int4_residual_pool_bytes);
  EXPECT_EQ(cuda.block_bytes, cpu.block_bytes) << "the int4 pool itself is the same";
  EXPECT_EQ(cuda.num_blocks, (4 * kGiB - 641 * 524'288) / cuda.block_bytes - 1);
  EXPECT_GT(cuda.num_blocks, cpu.num_blocks);
  const std::string text = format_plan_text(cuda);
  EXPECT_NE(text.find("int4 residual  0.31 GiB: 641 bfloat16 blocks (336068608 bytes)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("note           int4 (--device cuda): the full-precision residual pool"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("641 bfloat16 blocks of 524288 bytes (0.31 GiB), is subtracted"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("float32"), std::string::npos) << text;
  const std::string json = format_plan_json(cuda);
  EXPECT_NE(json.find("\"device\": \"cuda\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"int4_residual_pool_bytes\": 336068608"), std::string::npos) << json;
  EXPECT_NE(json.find("\"int4_residual_pool_dtype\": \"bfloat16\""), std::string::npos) << json;

  // Other settings scale both devices alike: R = 4 and a smaller step budget.
  s.kv_int4_residual = 64;
  s.max_num_batched_tokens = 512;
  const PlanReport wide_cpu = compute_plan(m, s);
  s.device = PlanDevice::kCuda;
  const PlanReport wide_cuda = compute_plan(m, s);
  EXPECT_EQ(wide_cuda.int4_residual_pool_blocks, 256 * 5 + 32 + 1);
  EXPECT_EQ(2 * wide_cuda.int4_residual_pool_bytes, wide_cpu.int4_residual_pool_bytes);

  // MLA (the engine loads none): blocks of the latent's shape, bf16 on cuda, float32 on cpu.
  const PlanModel v3 = parse_plan_model(kDeepSeekV3, "deepseek-v3");
  PlanSettings mla = settings(0, KvCacheDType::kInt4);
  mla.kv_cache_memory_bytes = 64 * kGiB;
  mla.max_model_len = 4096;
  const PlanReport mla_cuda = compute_plan(v3, mla);
  mla.device = PlanDevice::kCpu;
  const PlanReport mla_cpu = compute_plan(v3, mla);
  EXPECT_EQ(mla_cuda.int4_residual_pool_bytes, 641 * 1'124'352) << "61 x 576 x 2 x 16 per block";
  EXPECT_EQ(mla_cpu.int4_residual_pool_bytes, 641 * 2'248'704) << "61 x 576 x 4 x 16 per block";
}

TEST(PlanTest, Int4ResidualSettingsAreCheckedAsTheEngineChecksThem) {
  const PlanModel m = parse_plan_model(kLlama1B, "llama-3.2-1b");
  const auto error_of = [&](const PlanSettings& s) -> std::string {
    try {
      (void)compute_plan(m, s);
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  PlanSettings s = settings(0, KvCacheDType::kInt4);
  s.kv_cache_memory_bytes = 4 * kGiB;
  s.kv_int4_residual = 24;
  EXPECT_EQ(error_of(s),
            "--kv-int4-residual 24 must be a positive multiple of the block size (16)");
  s.kv_int4_residual = -16;
  EXPECT_EQ(error_of(s),
            "--kv-int4-residual -16 must be a positive multiple of the block size (16)");
  s.kv_int4_residual = 16;
  s.kv_dtype = KvCacheDType::kBF16;
  EXPECT_EQ(error_of(s), "--kv-int4-residual applies to --kv-cache-dtype int4 only");
  s.kv_dtype = KvCacheDType::kInt8;
  EXPECT_EQ(error_of(s), "--kv-int4-residual applies to --kv-cache-dtype int4 only");
  // A residual pool as large as the KV memory: the engine's message, on either device.
  s = settings(0, KvCacheDType::kInt4);
  s.kv_cache_memory_bytes = 256 * (1 << 20);
  EXPECT_EQ(error_of(s),
            "the KV cache memory (268435456 bytes) does not exceed the int4 residual pool's "
            "336068608 bytes (lower --max-num-seqs, --max-num-batched-tokens or "
            "--kv-int4-residual)");
  s.device = PlanDevice::kCpu;
  EXPECT_EQ(error_of(s),
            "the KV cache memory (268435456 bytes) does not exceed the int4 residual pool's "
            "672137216 bytes (lower --max-num-seqs, --max-num-batched-tokens or "
            "--kv-int4-residual)");
  s.max_num_seqs = 0;
  EXPECT_EQ(error_of(s), "--max-num-seqs must be at least 1");
}

// Without int4 the residual settings change nothing and the JSON field is 0.
TEST(PlanTest, Bf16PlanHasNoResidualPool) {
  const PlanModel m = parse_plan_model(kLlama1B, "llama-3.2-1b");
  PlanSettings s = settings(24 * kGiB);
  s.max_num_seqs = 1;
  s.max_num_batched_tokens = 16;
  const PlanReport r = compute_plan(m, s);
  EXPECT_EQ(r.int4_residual_pool_blocks, 0);
  EXPECT_EQ(r.int4_residual_pool_bytes, 0);
  EXPECT_EQ(r.num_blocks, 39'521);  // Llama32OneBOnA24GiBDevice's
  EXPECT_EQ(r.num_blocks, compute_plan(m, settings(24 * kGiB)).num_blocks);
  EXPECT_EQ(format_plan_text(r).find("int4"), std::string::npos);
  const std::string json = format_plan_json(r);
  EXPECT_NE(json.find("\"int4_residual_pool_blocks\": 0,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"int4_residual_pool_bytes\": 0,"), std::string::npos) << json;
}

TEST(PlanTest, DeepSeekV3MlaLatentCache) {
  const PlanModel m = parse_plan_model(kDeepSeekV3, "deepseek-v3");
  EXPECT_TRUE(m.kv.is_mla());
  EXPECT_TRUE(m.engine_supported) << "parsed by the engine's own config parser";
  EXPECT_FALSE(m.cpu_only) << "its latent of 576 and 128 heads are the GPU MLA kernels' shape";
  // ~671e9 parameters at 1 byte (fp8 weights).
  EXPECT_NEAR(static_cast<double>(m.weight_bytes), 671e9, 2e9);
  PlanSettings s = settings(80 * kGiB);
  s.kv_cache_memory_bytes = 64 * kGiB;
  const PlanReport r = compute_plan(m, s);
  EXPECT_EQ(r.kv_bytes_per_token, 70272.0);  // 61 x (512 + 64) x 2
  EXPECT_EQ(r.kv_bytes_per_token_per_layer, 1152.0);
  // Naive MHA: 61 x 128 heads x (K 128 + 64, V 128) x 2 bytes.
  EXPECT_EQ(r.naive_mha_bytes_per_token, 4'997'120.0);
  EXPECT_EQ(r.block_bytes, 1'124'352);
  EXPECT_EQ(r.num_blocks, 61'118);  // 64 GiB / 1,124,352 = 61,119 blocks, one of them null
  EXPECT_EQ(r.naive_capacity_tokens, 13'751);
  EXPECT_EQ(r.blocks_per_seq, 10'240);  // 163,840 / 16
  EXPECT_EQ(r.max_concurrent_seqs, 5);
  s.kv_dtype = KvCacheDType::kFp8E4M3;
  EXPECT_EQ(compute_plan(m, s).kv_bytes_per_token, 35136.0) << "fp8 latent: 61 x 576";
  // --device cuda keeps the same bf16 latent pool, and the plan says so without a refusal.
  s.kv_dtype = KvCacheDType::kBF16;
  s.device = PlanDevice::kCuda;
  const PlanReport cuda = compute_plan(m, s);
  EXPECT_EQ(cuda.kv_bytes_per_token, 70272.0);
  EXPECT_EQ(cuda.block_bytes, 1'124'352);
  for (const std::string& note : cuda.notes) {
    EXPECT_EQ(note.find("only the CPU engine"), std::string::npos) << note;
  }
}

// An MLA shape the GPU kernels do not take (a latent other than 512 + 64, heads not a multiple
// of 16) plans as CPU-only, as the runner factory refuses it on --device cuda.
TEST(PlanTest, AnMlaShapeOutsideTheGpuKernelsIsCpuOnly) {
  std::string v3 = kDeepSeekV3;
  const std::string key = "\"kv_lora_rank\": 512";
  v3.replace(v3.find(key), key.size(), "\"kv_lora_rank\": 256");
  EXPECT_TRUE(parse_plan_model(v3, "deepseek-v3-rank-256").cpu_only);
  std::string heads = kDeepSeekV3;
  const std::string heads_key = "\"num_attention_heads\": 128, \"num_key_value_heads\": 128";
  heads.replace(heads.find(heads_key), heads_key.size(),
                "\"num_attention_heads\": 56, \"num_key_value_heads\": 56");
  EXPECT_TRUE(parse_plan_model(heads, "deepseek-v3-56-heads").cpu_only);
}

// MoE models the engine loads: every expert is resident, so the weights are the total
// parameters, not the active ones (Mixtral-8x7B: 46.7e9, Qwen3-30B-A3B: 30.5e9, bf16).
TEST(PlanTest, MoeWeightsCountEveryExpert) {
  const char* mixtral = R"({
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
    "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
    "rope_theta": 1e6, "sliding_window": null, "torch_dtype": "bfloat16"})";
  const PlanModel m = parse_plan_model(mixtral, "mixtral-8x7b");
  EXPECT_TRUE(m.engine_supported);
  // 2 x 32000 x 4096 + 32 x (41,943,040 attention + 8,192 norms + 8 x 3 x 4096 x 14336 experts
  // + 8 x 4096 router) + 4096 = 46,702,792,704 parameters.
  EXPECT_EQ(m.weight_bytes, 93'405'585'408);
  EXPECT_EQ(m.kv.num_kv_heads, 8);
  const char* qwen = R"({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 40960,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
  // 2 x 151936 x 2048 + 48 x (18,874,368 + 4,096 + 128 x (3 x 2048 x 768 + 2048)) + 2048.
  EXPECT_EQ(parse_plan_model(qwen, "qwen3-30b-a3b").weight_bytes, 61'064'220'672);
  // Layer 0 dense: its 3 x 2048 x 6144 MLP instead of 128 experts and the router.
  std::string dense_first = qwen;
  dense_first.replace(dense_first.find("\"mlp_only_layers\": []"), 21, "\"mlp_only_layers\": [0]");
  EXPECT_EQ(parse_plan_model(dense_first, "qwen3-30b-a3b").weight_bytes,
            61'064'220'672 - 2 * (128 * (3 * 2048 * 768 + 2048) - 3 * 2048 * 6144));
}

TEST(PlanTest, AllSlidingWindowLayersCapEachSequence) {
  const PlanModel m = parse_plan_model(kMistral7B, "mistral-7b");
  // 7,241,732,096 parameters (untied), bf16.
  EXPECT_EQ(m.weight_bytes, 14'483'464'192);
  const PlanReport r = compute_plan(m, settings(80 * kGiB));
  EXPECT_EQ(r.kv_bytes_per_token, 131072.0);  // 2 x 32 x 8 x 128 x 2
  EXPECT_EQ(r.num_blocks, 29'956);
  EXPECT_EQ(r.window, 4096);
  EXPECT_EQ(r.blocks_per_seq, 257) << "4096 / 16 + the block the window straddles";
  EXPECT_EQ(r.max_concurrent_seqs, 116);
  EXPECT_EQ(r.longest_context, 32'768);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].find("sliding window of 4096"), std::string::npos);
}

TEST(PlanTest, HybridWindowsPlanFullLengthWithANote) {
  const PlanModel m = parse_plan_model(kHybrid, "hybrid");
  PlanSettings s = settings(0);
  s.kv_cache_memory_bytes = 8 * kGiB;
  const PlanReport r = compute_plan(m, s);
  EXPECT_EQ(r.kv_bytes_per_token, 16384.0);  // 2 x 4 x 4 x 256 x 2
  EXPECT_EQ(r.window, 0);
  EXPECT_EQ(r.blocks_per_seq, 512);  // the full 8192 tokens
  EXPECT_EQ(r.num_blocks, 8 * kGiB / (16384 * 16) - 1);
  EXPECT_EQ(r.max_concurrent_seqs, r.num_blocks / 512);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].find("2 of 4 layers"), std::string::npos);
}

// --device cpu keeps a hybrid model's windowed layers in a pool of their own, sized as the engine
// sizes it (kv::plan_kv_groups): max_num_seqs x (ceil(W / B) + 3) + ceil(tokens / B) + 1 blocks
// of the windowed layers, taken from the KV memory first; group 0 holds the full-attention
// layers only. --disable-hybrid-kv-cache-manager goes back to one pool of every layer.
TEST(PlanTest, HybridWindowsOnTheCpuHaveAPoolOfTheirOwn) {
  const PlanModel m = parse_plan_model(kHybrid, "hybrid");
  PlanSettings s = settings(0);
  s.device = PlanDevice::kCpu;
  s.kv_cache_memory_bytes = 8 * kGiB;
  s.max_num_seqs = 16;
  const PlanReport r = compute_plan(m, s);
  // Two layers of 2 x 4 heads x 16 tokens x 256 x 2 bytes in either pool.
  const int64_t block_bytes = 2 * 2 * 4 * 16 * 256 * 2;
  EXPECT_EQ(r.block_bytes, block_bytes);
  ASSERT_EQ(r.limit_sized_groups.size(), 1u);
  const PlanGroup& w = r.limit_sized_groups[0];
  EXPECT_EQ(w.kind, "sliding window");
  EXPECT_EQ(w.num_layers, 2);
  EXPECT_EQ(w.window, 4096);
  EXPECT_EQ(w.num_blocks, 16 * (256 + 3) + 2048 / 16 + 1);  // 4273
  EXPECT_EQ(w.bytes, 4273 * block_bytes);
  EXPECT_EQ(r.num_blocks, (8 * kGiB - w.bytes) / block_bytes - 1) << "one null block";
  EXPECT_EQ(r.blocks_per_seq, 512) << "the full-attention layers keep every block";
  const std::string text = format_plan_text(r);
  EXPECT_NE(text.find("windowed pool  0.52 GiB: 4273 bfloat16 blocks (560070656 bytes) for the 2 "
                      "layers with a sliding window of 4096"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("their K/V lives in a pool of its own"), std::string::npos) << text;
  const std::string json = format_plan_json(r);
  EXPECT_NE(json.find("\"limit_sized_groups\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"num_blocks\": 4273"), std::string::npos) << json;

  s.disable_hybrid_kv_cache_manager = true;
  const PlanReport one = compute_plan(m, s);
  EXPECT_TRUE(one.limit_sized_groups.empty());
  EXPECT_EQ(one.block_bytes, 2 * block_bytes);
  EXPECT_EQ(one.num_blocks, 8 * kGiB / (2 * block_bytes) - 1);
}

// Gemma-3-12B as published (Gemma3ForConditionalGeneration: the text model's sizes under
// text_config, transformers' defaults for the rest): 48 layers of 8 KV heads x 256, every sixth
// global, the other 40 windowed at 1024. On the CPU the windowed layers' pool holds, per
// sequence, ceil(1024 / 16) + 1 = 65 blocks whatever its length, so in 8 GiB of bf16 KV one
// sequence reaches 115,376 tokens; with every layer in one pool, 21,824 (docs/benchmarks.md).
TEST(PlanTest, Gemma3_12BWindowGroupOnTheCpu) {
  const PlanModel m = parse_plan_model(
      read(std::string(STRATA_SOURCE_DIR) + "/bench/models/gemma-3-12b/config.json"),
      "gemma-3-12b");
  EXPECT_TRUE(m.engine_supported);
  // Per layer: attention 3,840 x (4,096 + 4,096) + 4,096 x 3,840, four norms of 3,840 and the
  // q/k norms of 256; MLP 3 x 3,840 x 15,360; the tied embedding 262,208 x 3,840 (the text
  // model's default vocabulary); the final norm: 11,766,034,176 parameters, bf16.
  EXPECT_EQ(m.weight_bytes, 23'532'068'352);
  PlanSettings s = settings(0, KvCacheDType::kBF16);
  s.device = PlanDevice::kCpu;
  s.kv_cache_memory_bytes = 8 * kGiB;
  s.max_num_seqs = 1;
  s.max_model_len = 115'376;
  const PlanReport r = compute_plan(m, s);
  EXPECT_EQ(r.kv_bytes_per_token, 393'216.0);  // 2 x 48 x 8 x 256 x 2, every layer
  EXPECT_EQ(r.block_bytes, 16 * 65'536);       // the 8 global layers only
  ASSERT_EQ(r.limit_sized_groups.size(), 1u);
  const PlanGroup& w = r.limit_sized_groups[0];
  EXPECT_EQ(w.num_layers, 40);
  EXPECT_EQ(w.window, 1024);
  EXPECT_EQ(w.block_bytes, 16 * 327'680);
  EXPECT_EQ(w.num_blocks, 1 * (64 + 3) + 2048 / 16 + 1);                          // 196
  EXPECT_EQ(r.num_blocks, (8 * kGiB - 196 * w.block_bytes) / r.block_bytes - 1);  // 7,211
  EXPECT_EQ(r.longest_context, 115'376);
  const std::string text = format_plan_text(r);
  EXPECT_NE(text.find("window cap     65 blocks (340787200 bytes) of the 40 windowed layers per "
                      "sequence whatever its length; the kv pool: 65536 bytes per token"),
            std::string::npos)
      << text;
  EXPECT_NE(format_plan_json(r).find("\"held_blocks_per_sequence\": 65"), std::string::npos);

  s.disable_hybrid_kv_cache_manager = true;
  s.max_model_len = 21'824;
  const PlanReport one = compute_plan(m, s);
  EXPECT_TRUE(one.limit_sized_groups.empty());
  EXPECT_EQ(one.block_bytes, 16 * 393'216);
  EXPECT_EQ(one.num_blocks, 8 * kGiB / one.block_bytes - 1);  // 1,364
  EXPECT_EQ(one.longest_context, 21'824);
  s.max_model_len = 21'825;
  EXPECT_THROW(compute_plan(m, s), Error) << "one pool cannot hold a longer sequence";

  // --device cuda: the GPU runner keeps every layer's whole context in one pool (no window
  // group), and the plan says what it allocates, as with the hybrid manager disabled.
  EXPECT_FALSE(m.cpu_only);
  s.device = PlanDevice::kCuda;
  s.disable_hybrid_kv_cache_manager = false;
  s.max_model_len = 4096;
  const PlanReport cuda = compute_plan(m, s);
  EXPECT_TRUE(cuda.limit_sized_groups.empty());
  EXPECT_EQ(cuda.block_bytes, 16 * 393'216);
  EXPECT_EQ(format_plan_text(cuda).find("only the CPU engine runs this model"), std::string::npos);
}

// auto, and the layers --kv-cache-dtype-skip-layers names, hold the engine's precision on each
// device whatever the checkpoint stores: bfloat16 on the GPU, float32 on the CPU (the CPU engine
// resolves auto to float32), so a CPU plan of a bf16 checkpoint counts 4-byte elements.
TEST(PlanTest, AutoIsTheEnginesPrecisionOnEachDevice) {
  const PlanModel m = parse_plan_model(kLlama1B, "llama-3.2-1b");
  PlanSettings s = settings(0, KvCacheDType::kAuto);
  s.kv_cache_memory_bytes = 16 * kGiB;
  const PlanReport cuda = compute_plan(m, s);
  EXPECT_EQ(cuda.settings.kv_dtype, KvCacheDType::kBF16);
  EXPECT_EQ(cuda.kv_bytes_per_token, 2.0 * 16 * 8 * 64 * 2);
  s.device = PlanDevice::kCpu;
  const PlanReport cpu = compute_plan(m, s);
  EXPECT_EQ(cpu.settings.kv_dtype, KvCacheDType::kF32);
  EXPECT_EQ(cpu.kv_bytes_per_token, 2.0 * 16 * 8 * 64 * 4);
  EXPECT_NE(format_plan_text(cpu).find("kv cache       float32"), std::string::npos);
  s.kv_dtype = KvCacheDType::kInt8;
  s.skip_layers.layers = {0};
  const PlanReport skipped = compute_plan(m, s);
  // Layer 0 float32 (2 x 8 x 64 x 4), the other 15 int8 (2 x 8 x (64 + 2)).
  EXPECT_EQ(skipped.kv_bytes_per_token, 4096.0 + 15 * 1056.0);
  EXPECT_NE(format_plan_text(skipped).find("int8 (layers 0 float32)"), std::string::npos);
}

// --kv-cache-dtype-skip-layers: the skipped layers keep auto's dtype (bf16 on the GPU), counted
// byte for byte; sliding_window names the windowed layers of a hybrid model; an index beyond it is
// an error.
TEST(PlanTest, SkippedLayersKeepTheModelDtypeAndCountExactly) {
  const PlanModel m = parse_plan_model(kHybrid, "hybrid");
  PlanSettings s = settings(0, KvCacheDType::kInt8);
  s.kv_cache_memory_bytes = 8 * kGiB;
  s.skip_layers.sliding_window = true;
  const PlanReport r = compute_plan(m, s);
  EXPECT_EQ(r.skipped_layers, (std::vector<int32_t>{0, 2}));
  // Layers 0 and 2 bf16: 2 x 4 x 256 x 2 = 4,096 each; layers 1 and 3 int8: 2 x 4 x (256 + 2).
  EXPECT_EQ(r.kv_bytes_per_token, 2 * 4096.0 + 2 * 2064.0);
  EXPECT_EQ(r.scale_bytes_per_token, 2 * 16.0);
  EXPECT_EQ(r.block_bytes, 16 * (2 * 4096 + 2 * 2064));
  EXPECT_NE(format_plan_text(r).find("int8 (layers 0,2 bfloat16)"), std::string::npos);
  s.skip_layers = {.sliding_window = false, .layers = {3}};
  EXPECT_EQ(compute_plan(m, s).kv_bytes_per_token, 4096.0 + 3 * 2064.0);
  s.skip_layers.layers = {4};
  try {
    (void)compute_plan(m, s);
    ADD_FAILURE() << "layer 4 of 4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 4 is out of range (the model has 4 layers, 0..3)"),
              std::string::npos);
  }
}

TEST(PlanTest, ImpossibleSettingsAreClearErrors) {
  const PlanModel v3 = parse_plan_model(kDeepSeekV3, "deepseek-v3");
  try {
    (void)compute_plan(v3, settings(80 * kGiB));
    FAIL() << "671 GB of weights fit in 80 GiB?";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit"), std::string::npos) << e.what();
  }
  const PlanModel m = parse_plan_model(kLlama1B, "llama-3.2-1b");
  PlanSettings tiny = settings(0);
  tiny.kv_cache_memory_bytes = 1000;
  EXPECT_THROW((void)compute_plan(m, tiny), Error);  // zero blocks
  PlanSettings small = settings(4 * kGiB);           // 1 GiB of KV: 32,767 tokens < 131,072
  try {
    (void)compute_plan(m, small);
    FAIL() << "a 131k-token sequence fit in ~1 GiB";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lower --max-model-len"), std::string::npos) << e.what();
  }
  small.max_model_len = 16384;
  EXPECT_EQ(compute_plan(m, small).max_model_len, 16384);
  small.max_model_len = 200'000;
  EXPECT_THROW((void)compute_plan(m, small), Error);  // beyond max_position_embeddings
  EXPECT_THROW((void)parse_plan_model("{\"num_hidden_layers\": 2}", "x"), Error);
  EXPECT_THROW((void)parse_plan_model("not json", "x"), Error);
}

TEST(PlanTest, ByteSizes) {
  EXPECT_EQ(parse_byte_size("80GiB"), 80 * kGiB);
  EXPECT_EQ(parse_byte_size("141e9"), 141'000'000'000);
  EXPECT_EQ(parse_byte_size("1.5T"), 1'500'000'000'000);
  EXPECT_EQ(parse_byte_size("4096"), 4096);
  EXPECT_EQ(parse_byte_size("512Mi"), 512LL << 20);
  EXPECT_EQ(parse_byte_size("abc"), std::nullopt);
  EXPECT_EQ(parse_byte_size("-1"), std::nullopt);
  EXPECT_EQ(parse_byte_size(""), std::nullopt);
}

}  // namespace
}  // namespace strata::cli
