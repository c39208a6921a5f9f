#pragma once
// Model: one loaded decoder (config, weights, RoPE tables) and its CPU forward pass over a batch
// that reads and writes the paged KV cache.
//
// Owns the WeightStore (mmaped checkpoint or dummy weights), the bound DecoderWeights views into
// it, and activation scratch sized for the largest batch seen so far. Does not own the KV cache or
// the thread pool. forward() is not thread-safe (it reuses the scratch); the step loop calls it
// from one thread and the kernels spread each operation over the pool.
//
// Cost of forward(): every weight is read once per call whatever the number of tokens; attention
// reads each sequence's KV blocks once per layer. Attention mass (token eviction), only when
// asked for: num_kv_heads * kv_len floats of scratch per wanted token row, added (or copied, per
// head) into its row once per layer.

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/paged_kv.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/host_kv_buffer.h"
#include "kv/kv_group.h"
#include "kv/kv_layout.h"
#include "model/hf_config.h"
#include "model/llama_family.h"
#include "model/mla_prefill.h"
#include "model/moe_block.h"
#include "model/weight_store.h"

namespace strata::cpu {
struct AttentionParams;
}

namespace strata::model {

// vLLM's --load-format: "auto" reads the safetensors checkpoint, "dummy" makes seeded random
// weights of the config's shapes (benchmarking real shapes without a checkpoint).
enum class LoadFormat { kAuto, kDummy };

struct ModelLoadOptions {
  std::filesystem::path model_dir;  // holds config.json (and the weights unless dummy)
  LoadFormat load_format = LoadFormat::kAuto;
  uint64_t dummy_seed = 0;
  DType dummy_dtype = DType::kBF16;  // F32, BF16 or F16
  // kAuto: the checkpoint copied into huge-page memory at load, or served from its mapping.
  WeightResidency weight_residency = WeightResidency::kAnonymous;
};

// How one row is sampled on the device (runners that sample there: ModelRunner): the
// SamplingParams fields the device honours, and this draw's seed (the sequence's sampler
// derives it, so a seeded request draws the same tokens on every run).
struct DeviceSampleSpec {
  float temperature = 1.0f;  // < SamplingParams::kGreedyTemperature = greedy
  int32_t top_k = 0;         // <= 0 = off
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  // Nullable, host memory valid through forward(): the tokens the row may draw (a structured
  // output's mask), a bitset of ceil(vocab / 64) words, bit id of word id / 64; every other
  // logit is -inf before sampling (and before the chosen token's logprob, which is then not raw).
  const uint64_t* allowed = nullptr;
  // With allowed null: the row is masked too, by a mask ForwardBatch::fill_masks makes while the
  // device computes the logits.
  bool mask_later = false;
};

// A token drawn on the device and its raw logprob (log_softmax of the unmodified logits).
struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;
};

// A KV cache group's view of one step beyond group 0 (kv/kv_group.h): its paged layout (built by
// kv::PagedLayoutBuilder, covering the same sequences) and the slot of each token.
struct GroupBatchView {
  PagedKvLayout layout;
  std::span<const int64_t> slot_mapping;  // [num_tokens], -1 exactly where group 0's is
  // A newest-blocks group's R (kv::KvGroupKind::kNewestBlocks: an INT4 cache's full-precision
  // newest blocks; layout.first_block set); 0 for an attention group.
  int32_t newest_blocks = 0;
};

// How a wanted attention-mass row (ForwardBatch::mass_offsets) combines layers and KV heads; each
// KV head's share is the sum over the query heads that read it.
enum class MassMode : uint8_t {
  kSum,  // kv_len floats: the sum over every layer and KV head (H2O)
  kMax,  // kv_len floats: the largest share any one (layer, KV head) gave the slot (SnapKV shared)
  // num_layers * num_kv_heads * kv_len floats: (layer l, KV head h)'s share of slot j at
  // (l * num_kv_heads + h) * kv_len + j (SnapKV per head)
  kPerHead,
};

// One step's input. Sequence s owns token rows [q_indptr[s], q_indptr[s+1]); their K/V slots are
// slot_mapping rows, and layout (built by kv::PagedLayoutBuilder) already counts them in kv_len.
struct ForwardBatch {
  std::span<const int32_t> token_ids;     // [num_tokens]
  std::span<const int32_t> positions;     // [num_tokens], position of each token in its sequence
  std::span<const int32_t> q_indptr;      // [num_seqs + 1]
  PagedKvLayout layout;                   // num_seqs == q_indptr.size() - 1
  std::span<const int64_t> slot_mapping;  // [num_tokens]
  std::span<const int32_t> logits_rows;   // token rows whose logits are wanted, e.g. each last
  // Rows sampled where the logits are (the GPU), one spec each: their tokens come back instead
  // of their logits. Disjoint from logits_rows; empty on the CPU backend.
  std::span<const int32_t> sample_rows;
  std::span<const DeviceSampleSpec> sample_specs;
  // Required when a spec has mask_later: the runner calls it once a step, after the forward pass
  // is launched and before any mask is applied, from a thread of its own (never the caller's:
  // forward() may block on the device meanwhile), with one destination of ceil(vocab / 64) words
  // per such row, in sample-row order. It writes each row's mask there. Must not throw; forward()
  // returns only after it has.
  std::function<void(std::span<uint64_t* const> masks)> fill_masks = {};
  // Every KV cache group beyond group 0, group g's view at g - 1: a hybrid model's windowed
  // layers (kv::HybridKvLayers), an INT4 cache's newest-blocks group.
  std::span<const GroupBatchView> groups = {};
  // Token eviction's attention mass (the CPU runner only; the engine never asks a GPU runner):
  // token row t of sequence s with mass_offsets[t] >= 0 owns attention_mass[mass_offsets[t] +
  // j] for every KV slot j < layout.kv_len(s), which receives the sum over every layer and every
  // query head of the softmax probability query t gave slot j (0 past t's own position; a
  // sliding-window layer adds 0 outside its window), so the row sums to num_layers *
  // num_attention_heads up to rounding. Bit-identical whatever the batch mates, the chunking of
  // the prompt and the thread count. Rows of different tokens must not overlap; rows with
  // offset < 0 are not touched. Empty spans: none wanted, at no cost.
  std::span<const int64_t> mass_offsets = {};  // [num_tokens] or empty
  std::span<float> attention_mass = {};
  // Per token row (or empty: every row sums): how the row combines layers and KV heads
  // (MassMode). A kPerHead row owns num_layers * num_kv_heads * kv_len(s) floats instead of
  // kv_len(s). Deterministic alike.
  std::span<const MassMode> mass_modes = {};

  // The newest-blocks group's index (>= 1), or -1 without one.
  int32_t newest_group() const {
    for (size_t i = 0; i < groups.size(); ++i) {
      if (groups[i].newest_blocks > 0) return static_cast<int32_t>(i) + 1;
    }
    return -1;
  }
};

class Model {
 public:
  // Reads config.json (and generation-independent weights); throws strata::Error with a message a
  // user can act on for missing, malformed or mismatched files.
  static Model load(const ModelLoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const WeightStore& weights() const { return store_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  // Floats of one wanted attention-mass row of a sequence of kv_len slots (ForwardBatch::
  // mass_modes).
  int64_t mass_row_size(MassMode mode, int32_t kv_len) const {
    return mode == MassMode::kPerHead
               ? int64_t{config_.num_hidden_layers} *
                     (config_.mla.enabled() ? 1 : config_.num_key_value_heads) * kv_len
               : kv_len;
  }
  // The KV cache shape of this model for a given element type.
  kv::KvSpec kv_spec(DType kv_dtype) const;
  // Bytes of all weights, as stored.
  int64_t weight_bytes() const;
  // Whether forward() multiplies BF16 weights on the BF16 dot-product instructions, activations
  // rounded to BF16 (cpu::LinearPrecision::kBf16), instead of the exact fp32 path (the default).
  // Unsupported (nothing changed) on a CPU without AVX-512 BF16.
  [[nodiscard]] Status set_bf16_matmul(bool on);
  // MLA (DeepSeek): the form of prefill rows, chosen per sequence by mla_prefill.h's rule
  // (kAuto, the default) or forced, for tests and benchmarks. Decode rows stay absorbed.
  void set_mla_prefill(MlaPrefill mode) { mla_prefill_ = mode; }

  // Largest |k| and |v| per layer, as append_kv receives them (after RoPE and the q/k norms), over
  // one forward pass of tokens (positions 0..n-1) through a scratch F32 cache; the pool the model
  // serves from is untouched. What --calculate-kv-scales turns into FP8 scales (kv_scales.h).
  // InvalidArgument for an empty prompt or a token outside the vocabulary.
  Result<std::vector<std::pair<float, float>>> kv_abs_max(std::span<const int32_t> tokens,
                                                          ThreadPool& pool);

  // --kv-quant-check (engine/kv_quant_check.h): per layer, the relative L2 error
  // sqrt(sum |o_q - o|^2 / sum |o|^2) of that layer's attention output o over one forward pass of
  // tokens, where o reads the K/V from a scratch F32 cache and o_q the same K/V from a scratch
  // cache laid out by `quantized` (its dtype, FP8 scales included), with the same queries. The
  // residual stream stays the F32 one, so each figure is the error that layer's own quantization
  // adds, not the accumulated error of the layers before it. InvalidArgument as kv_abs_max.
  Result<std::vector<double>> kv_quant_error(std::span<const int32_t> tokens,
                                             const kv::KvLayout& quantized, ThreadPool& pool);

  // --kv-quant-check's decision figure: per layer l, the mean over every position of tokens of
  // KL(p || p_l), p the next-token distribution with an F32 cache and p_l the one with a cache
  // where only layer l holds `quantized`'s dtype (its FP8 scale included) and every other layer
  // F32 -- what quantizing that layer alone costs at the model's output, errors propagated
  // through the later layers included. num_layers + 1 forward passes of tokens; after_pass, when
  // set, is called after each of them (a caller's progress).
  Result<std::vector<double>> kv_quant_output_kl(std::span<const int32_t> tokens,
                                                 const kv::KvLayout& quantized, ThreadPool& pool,
                                                 const std::function<void()>& after_pass = {});

  // Runs the batch through every layer, writing this step's K/V into kv at the slot mapping, and
  // fills logits [logits_rows.size(), vocab] (row-major) for the requested rows. Returns
  // InvalidArgument / OutOfRange for an inconsistent batch or a token id outside the vocabulary;
  // the KV cache is then unspecified only at this batch's slots (and attention_mass at the wanted
  // rows). Fills batch.attention_mass's wanted rows (ForwardBatch::mass_offsets); InvalidArgument
  // for mass_offsets of other than num_tokens entries or a wanted row that does not fit
  // attention_mass or overlaps another. kv holds every layer (one KV cache group, no INT4 layer).
  Status forward(const ForwardBatch& batch, kv::HostKvBuffer& kv, std::span<float> logits,
                 ThreadPool& pool);
  // The same over the pools of the KV cache groups (kv/kv_group.h): pools[g] is group g's, read
  // through group 0's layout and slots (batch.layout, batch.slot_mapping) or group g's
  // (batch.groups[g - 1]). slots: where layer l's K/V live, pools[slots[l].group] as its layer
  // slots[l].index (kv::HybridKvLayers), or empty for every layer in pool 0 at its own index. An
  // INT4 layer also appends to and reads the newest-blocks group's pool (batch.newest_group(),
  // kv::newest_blocks_spec's layout), which an INT4 cache requires. InvalidArgument as above, and
  // for pools, slots or group views that do not match.
  Status forward(const ForwardBatch& batch, std::span<kv::HostKvBuffer* const> pools,
                 std::span<const kv::KvLayerSlot> slots, std::span<float> logits, ThreadPool& pool);

 private:
  Model(ModelConfig config, WeightStore store);

  // A token row whose attention mass is wanted: its row in ForwardBatch::attention_mass, its
  // per-KV-head rows in Scratch::mass (the kernel's output of one layer), its sequence's kv_len.
  struct MassRow {
    int64_t out;
    int64_t scratch;
    int32_t kv_len;
    MassMode mode;  // ForwardBatch::mass_modes
  };

  struct Scratch {
    std::vector<float> hidden, normed, q, k, v, attn, proj, gate, up, rows;
    // The attention mass of one layer (empty: none wanted this step): mass_offsets is the kernel's
    // [num_tokens] offsets into mass, mass_rows the wanted rows.
    std::vector<float> mass;
    std::vector<int64_t> mass_offsets;
    std::vector<MassRow> mass_rows;
    void resize(const ModelConfig& c, int64_t num_tokens);
  };

  // Where a forward pass's layers keep their K/V (the grouped forward()'s arguments).
  struct KvPools {
    std::span<kv::HostKvBuffer* const> pools;
    std::span<const kv::KvLayerSlot> slots;  // empty: layer l in pool 0 at index l
    int32_t newest = -1;                     // the newest-blocks group (INT4), or -1
  };

  Status validate(const ForwardBatch& batch, const KvPools& kv, size_t logits_size) const;
  // Checks the attention-mass request (InvalidArgument, nothing written); then zero-fills the
  // wanted rows and lays out the per-layer scratch, or clears the scratch when none is wanted.
  Status begin_mass(const ForwardBatch& batch);
  // Adds (kSum; kMax takes the maximum) the layer's per-KV-head mass into the wanted rows, KV
  // head 0, 1, ... for each slot; a kPerHead row copies it into the layer's part.
  void add_layer_mass(int32_t layer_idx, const ForwardBatch& batch, ThreadPool& pool);
  Status run_layer(int32_t layer_idx, const ForwardBatch& batch, const KvPools& kv,
                   ThreadPool& pool);
  Status run_attention(int32_t layer_idx, const ForwardBatch& batch, const KvPools& kv,
                       ThreadPool& pool);
  Status run_mlp(int32_t layer_idx, int64_t num_tokens, ThreadPool& pool);
  // DeepSeek's Multi-head Latent Attention (model_mla.cc): the absorbed per-head weights made at
  // load, the projections, RoPE and absorbed queries of one layer into mla_scratch_, and the
  // attention over the latent pool into scratch_.attn [num_tokens, heads * v_head_dim].
  void prepare_mla();
  Status mla_project(int32_t layer_idx, const ForwardBatch& batch, ThreadPool& pool);
  Status run_mla_attention(int32_t layer_idx, const ForwardBatch& batch, const KvPools& kv,
                           ThreadPool& pool);
  // n query rows q [n, heads, qk] absorbed into mla_scratch_.q_latent [n, heads, latent]; the
  // attention's latent outputs mla_scratch_.attn_latent [n, heads, latent] un-absorbed into out
  // [n, heads * v_head_dim].
  Status mla_absorb(int32_t layer_idx, const float* q, int64_t n, ThreadPool& pool);
  Status mla_unabsorb(int32_t layer_idx, int64_t n, float* out, ThreadPool& pool);
  // The form of each sequence's rows (mla_prefill.h) into mla_scratch_.form; how many sequences
  // take the expanded form (model_mla_prefill.cc).
  int64_t choose_mla_forms(const ForwardBatch& batch);
  // A step with expanded sequences (model_mla_prefill.cc): the absorbed sequences' rows as a
  // batch of their own over the latent cache, the expanded ones' through run_mla_expanded, both
  // into scratch_.attn and the attention mass.
  Status run_mla_split(int32_t layer_idx, const ForwardBatch& batch, const PagedKvCacheView& cache,
                       ThreadPool& pool);
  Status run_mla_absorbed_rows(int32_t layer_idx, const PagedKvCacheView& cache, ThreadPool& pool);
  Status run_mla_expanded(int32_t layer_idx, const ForwardBatch& batch,
                          const PagedKvCacheView& cache, ThreadPool& pool);
  // An FP8 checkpoint (model_fp8.cc): every F8_E4M3 weight and its scales (weight_scale_inv
  // blocks, or weight_scale per row or tensor) dequantized once into BF16 that fp8_dequantized_
  // owns, its view repointed there. Throws strata::Error for an F8 weight without its scales.
  void dequantize_fp8_weights();
  // KV heads per layer in the pool: num_key_value_heads, or MLA's one latent.
  int64_t cache_kv_heads() const { return config_.mla.enabled() ? 1 : config_.num_key_value_heads; }
  // One forward pass of tokens (positions 0..n-1, one sequence) through a scratch cache laid out
  // by layout (block size 16). logits: null, or filled with every position's logits [n, vocab].
  Status calibration_forward(std::span<const int32_t> tokens, const kv::KvLayout& layout,
                             std::vector<float>* logits, ThreadPool& pool);
  // kv_quant_error's per-layer work: attention again over kv_quant_probe_'s cache.
  Status probe_quantized_attention(int32_t layer_idx, const ForwardBatch& batch,
                                   const cpu::AttentionParams& reference, ThreadPool& pool);
  // Gemma's final_logit_softcapping: every logit x becomes cap * tanh(x / cap) (in float64,
  // rounded once), element by element.
  void soft_cap(std::span<float> logits, ThreadPool& pool) const;
  // rms_norm over num_rows rows of weight.dim(0) elements with the config's epsilon (and
  // Gemma's (1 + weight)).
  Status rms_norm(const float* x, TensorView weight, float* out, int64_t num_rows,
                  ThreadPool& pool) const;

  ModelConfig config_;
  WeightStore store_;
  DecoderWeights weights_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  // The sliding-window layers' when their RoPE differs (Gemma 3), else empty.
  std::vector<float> sliding_inv_freq_;
  float embed_scale_ = 1.0f;  // Gemma 3: sqrt(hidden_size) in the embedding table's dtype
  Scratch scratch_;
  MoeScratch moe_scratch_;  // the MoE layers' (Mixtral, Qwen3-MoE, DeepSeek)
  // MLA, per layer: W_UK_h^T [kv_lora_rank, qk_nope] per head (kv_b_proj's K rows transposed,
  // in its dtype, owned here) and W_UV_h [v_head_dim, kv_lora_rank] (views into kv_b_proj).
  struct MlaLayer {
    std::vector<char> uk_t;
    std::vector<TensorView> uk_t_head, uv_head;
  };
  std::vector<MlaLayer> mla_;
  // The BF16 copies of an FP8 checkpoint's weights (dequantize_fp8_weights); a
  // std::deque keeps each buffer where it is as more are added.
  std::deque<std::vector<uint16_t>> fp8_dequantized_;
  struct MlaScratch {
    std::vector<float> q_a, q, latent, c_kv, q_latent, attn_latent, head_in, head_out;
    std::vector<MlaForm> form;  // [num_seqs], choose_mla_forms
    // run_mla_split: each form's sequences as a batch of their own; the expanded form's context
    // latent [ctx rows, latent] and its c_kv [ctx rows, rank], their up-projection [ctx rows,
    // heads * (nope + v)], K [heads, ctx rows, nope + rope], V [heads, ctx rows, v] and
    // per-head mass rows; the absorbed rows' gathered queries and outputs.
    MlaSubBatch absorbed, expanded;
    std::vector<float> ctx, c_ctx, up, k, v, mass_x, rows_in, rows_out;
  };
  MlaScratch mla_scratch_;
  MlaPrefill mla_prefill_ = MlaPrefill::kAuto;  // set_mla_prefill
  // Set only during kv_abs_max: per layer (max |k|, max |v|), updated by run_attention.
  std::vector<std::pair<float, float>>* kv_abs_max_ = nullptr;
  // Set only during kv_quant_error: the quantized scratch cache and per-layer sums of squares.
  struct KvQuantProbe {
    kv::HostKvBuffer* cache = nullptr;
    kv::HostKvBuffer* newest = nullptr;   // INT4 probe caches: their newest-blocks pool
    std::vector<double> diff_sq, ref_sq;  // [num_layers]
    std::vector<float> out;               // the quantized attention output, as scratch_.attn
  };
  KvQuantProbe* kv_quant_probe_ = nullptr;
  bool bf16_matmul_ = false;  // set_bf16_matmul
};

}  // namespace strata::model
