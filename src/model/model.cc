#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "core/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kv/kv_cache_manager.h"
#include "model/forward_batch_check.h"
#include "model/logits_kl.h"
#include "model/rope.h"

namespace strata::model {
namespace {

WeightStore open_weights(const ModelLoadOptions& options, const ModelConfig& config) {
  switch (options.load_format) {
    case LoadFormat::kAuto:
      return WeightStore::open(options.model_dir, options.weight_residency);
    case LoadFormat::kDummy: {
      DummyWeightsConfig dummy;
      dummy.scale = 0.02f;
      // Norm weights near one keep activations in range over many layers, as trained models do
      // (Gemma's norms multiply by 1 + weight: weights near zero).
      const float offset = config.norm_unit_offset ? 1.0f : 0.0f;
      dummy.range_for = [offset](std::string_view name) -> std::optional<DummyRange> {
        if (name.find("norm") != std::string_view::npos) {
          return DummyRange{0.9f - offset, 1.1f - offset};
        }
        return std::nullopt;
      };
      return WeightStore::dummy(llama_family_tensors(config), options.dummy_dtype,
                                options.dummy_seed, dummy);
    }
  }
  throw Error("unknown load format");
}

int64_t span_size(size_t n) { return static_cast<int64_t>(n); }

// Gemma's sqrt(hidden_size) as transformers applies it: a float32 scalar cast to the embedding
// table's dtype.
float embedding_scale(const ModelConfig& c, DType table_dtype) {
  if (!c.scale_embeddings) return 1.0f;
  const auto scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
  if (table_dtype == DType::kBF16) return bf16_to_f32(f32_to_bf16(scale));
  if (table_dtype == DType::kF16) return f16_to_f32(f32_to_f16(scale));
  return scale;
}

}  // namespace

Model::Model(ModelConfig config, WeightStore store)
    : config_(std::move(config)),
      store_(std::move(store)),
      weights_(bind_llama_family(config_, store_)),
      inv_freq_(rope_inv_freq(config_.rope, config_.head_dim)),
      embed_scale_(embedding_scale(config_, weights_.embed.dtype)) {
  if (config_.sliding_rope)
    sliding_inv_freq_ = rope_inv_freq(*config_.sliding_rope, config_.head_dim);
  dequantize_fp8_weights();  // before prepare_mla, which copies kv_b_proj
  prepare_mla();
}

Model Model::load(const ModelLoadOptions& options) {
  ModelConfig config = load_model_config(options.model_dir);
  if (!config.quant_unsupported.empty()) {
    throw Error((options.model_dir / "config.json").string() + ": 'quantization_config' (" +
                config.quant_unsupported +
                "): only FP8 weights load (F8_E4M3: 'fp8' with weight_scale_inv blocks, "
                "'compressed-tensors' or 'fbgemm_fp8' with a weight_scale per channel or "
                "tensor); convert the checkpoint to bfloat16 first");
  }
  WeightStore store = open_weights(options, config);
  return Model(std::move(config), std::move(store));
}

kv::KvSpec Model::kv_spec(DType kv_dtype) const {
  kv::KvSpec spec;
  spec.num_layers = static_cast<int32_t>(config_.num_hidden_layers);
  spec.num_kv_heads = static_cast<int32_t>(config_.num_key_value_heads);
  spec.head_dim = static_cast<int32_t>(config_.head_dim);
  spec.dtype = kv_dtype;
  if (config_.mla.enabled()) {  // one latent row per token and layer
    spec.num_kv_heads = 1;
    spec.head_dim = static_cast<int32_t>(config_.mla.latent_dim());
    spec.latent = true;
  }
  return spec;
}

Status Model::calibration_forward(std::span<const int32_t> tokens, const kv::KvLayout& layout,
                                  std::vector<float>* logits, ThreadPool& pool) {
  if (tokens.empty()) return Status::InvalidArgument("calibration: no tokens");
  constexpr int32_t kBlockSize = 16;
  STRATA_CHECK(layout.block_size() == kBlockSize, "calibration_forward: block size 16");
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (n + kBlockSize - 1) / kBlockSize;
  kv::HostKvBuffer cache(layout, num_blocks + 1);
  if (kv_quant_probe_ != nullptr && kv_quant_probe_->cache->num_blocks() < num_blocks + 1) {
    return Status::InvalidArgument("calibration: the probe cache is too small");
  }
  // INT4 (the cache or the probe's): one chunk, so every block is in the newest-blocks window;
  // that group's pool mirrors the main pool's block ids.
  std::optional<kv::HostKvBuffer> newest;
  if (kv::needs_newest_blocks_group(layout.spec())) {
    newest.emplace(kv::KvLayout(kv::newest_blocks_spec(layout.spec()), kBlockSize), num_blocks + 1);
  }
  kv::HostKvBuffer* newest_pool = newest ? &*newest : nullptr;
  if (newest_pool == nullptr && kv_quant_probe_ != nullptr) newest_pool = kv_quant_probe_->newest;
  std::vector<int32_t> positions(tokens.size());
  std::vector<int64_t> slots(tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    positions[static_cast<size_t>(i)] = i;
    slots[static_cast<size_t>(i)] = kBlockSize + i;  // blocks 1.. in order; 0 is the null block
  }
  std::vector<int32_t> indices(static_cast<size_t>(num_blocks));
  for (int32_t b = 0; b < num_blocks; ++b) indices[static_cast<size_t>(b)] = b + 1;
  const std::vector<int32_t> q_indptr = {0, n};
  const std::vector<int32_t> kv_indptr = {0, num_blocks};
  const std::vector<int32_t> last_len = {n - (num_blocks - 1) * kBlockSize};
  std::vector<int32_t> logits_rows = {n - 1};
  if (logits != nullptr) {
    logits_rows.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) logits_rows[static_cast<size_t>(i)] = i;
  }
  ForwardBatch batch;
  batch.token_ids = tokens;
  batch.positions = positions;
  batch.q_indptr = q_indptr;
  batch.layout.kv_indptr = kv_indptr.data();
  batch.layout.kv_indices = indices.data();
  batch.layout.kv_last_page_len = last_len.data();
  batch.layout.num_seqs = 1;
  batch.layout.block_size = kBlockSize;
  batch.slot_mapping = slots;
  batch.logits_rows = logits_rows;
  const std::vector<int32_t> first_block = {0};
  GroupBatchView newest_view;
  std::vector<kv::HostKvBuffer*> pools = {&cache};
  if (newest_pool != nullptr) {
    newest_view.layout = batch.layout;
    newest_view.layout.first_block = first_block.data();
    newest_view.slot_mapping = slots;
    newest_view.newest_blocks = 1;
    batch.groups = std::span<const GroupBatchView>(&newest_view, 1);
    pools.push_back(newest_pool);
  }
  std::vector<float> last(static_cast<size_t>(config_.vocab_size));
  if (logits != nullptr) logits->resize(static_cast<size_t>(n) * last.size());
  return forward(batch, pools, {}, logits != nullptr ? std::span<float>(*logits) : last, pool);
}

Result<std::vector<double>> Model::kv_quant_output_kl(std::span<const int32_t> tokens,
                                                      const kv::KvLayout& quantized,
                                                      ThreadPool& pool,
                                                      const std::function<void()>& after_pass) {
  if (tokens.empty()) return Status::InvalidArgument("kv_quant_output_kl: no calibration tokens");
  const auto num_layers = static_cast<int32_t>(config_.num_hidden_layers);
  std::vector<float> ref;
  STRATA_RETURN_IF_ERROR(
      calibration_forward(tokens, kv::KvLayout(kv_spec(DType::kF32), 16), &ref, pool));
  if (after_pass) after_pass();
  const int64_t vocab = config_.vocab_size;
  const KlReference reference(ref, vocab, pool);  // ref now holds probabilities
  std::vector<double> kl(static_cast<size_t>(num_layers), 0.0);
  std::vector<float> got;
  for (int32_t l = 0; l < num_layers; ++l) {
    kv::KvSpec spec = kv_spec(quantized.spec().dtype);
    spec.layer_dtypes.assign(static_cast<size_t>(num_layers), DType::kF32);
    spec.layer_dtypes[static_cast<size_t>(l)] = quantized.spec().dtype;
    STRATA_RETURN_IF_ERROR(calibration_forward(
        tokens, kv::KvLayout(spec, 16, quantized.static_scales()), &got, pool));
    if (after_pass) after_pass();
    kl[static_cast<size_t>(l)] = reference.mean_kl(got, pool);
  }
  return kl;
}

Result<std::vector<std::pair<float, float>>> Model::kv_abs_max(std::span<const int32_t> tokens,
                                                              ThreadPool& pool) {
  if (tokens.empty()) return Status::InvalidArgument("kv_abs_max: no calibration tokens");
  std::vector<std::pair<float, float>> abs_max(static_cast<size_t>(config_.num_hidden_layers),
                                               {0.0f, 0.0f});
  kv_abs_max_ = &abs_max;
  const Status status =
      calibration_forward(tokens, kv::KvLayout(kv_spec(DType::kF32), 16), nullptr, pool);
  kv_abs_max_ = nullptr;
  if (!status.ok()) return status;
  return abs_max;
}

Result<std::vector<double>> Model::kv_quant_error(std::span<const int32_t> tokens,
                                                  const kv::KvLayout& quantized,
                                                  ThreadPool& pool) {
  if (tokens.empty()) return Status::InvalidArgument("kv_quant_error: no calibration tokens");
  const kv::KvSpec want = kv_spec(quantized.spec().dtype);
  if (quantized.spec().num_layers != want.num_layers ||
      quantized.spec().num_kv_heads != want.num_kv_heads ||
      quantized.spec().head_dim != want.head_dim || quantized.block_size() != 16) {
    return Status::InvalidArgument("kv_quant_error: the layout is not this model's at block 16");
  }
  const auto num_blocks = static_cast<int32_t>((tokens.size() + 15) / 16);
  kv::HostKvBuffer cache(quantized, num_blocks + 1);
  std::optional<kv::HostKvBuffer> newest;
  if (kv::needs_newest_blocks_group(quantized.spec())) {
    newest.emplace(kv::KvLayout(kv::newest_blocks_spec(quantized.spec()), 16), num_blocks + 1);
  }
  KvQuantProbe probe;
  probe.cache = &cache;
  probe.newest = newest ? &*newest : nullptr;
  probe.diff_sq.assign(static_cast<size_t>(config_.num_hidden_layers), 0.0);
  probe.ref_sq.assign(static_cast<size_t>(config_.num_hidden_layers), 0.0);
  kv_quant_probe_ = &probe;
  const Status status =
      calibration_forward(tokens, kv::KvLayout(kv_spec(DType::kF32), 16), nullptr, pool);
  kv_quant_probe_ = nullptr;
  if (!status.ok()) return status;
  std::vector<double> error(probe.diff_sq.size());
  for (size_t l = 0; l < error.size(); ++l) {
    error[l] = probe.ref_sq[l] > 0.0 ? std::sqrt(probe.diff_sq[l] / probe.ref_sq[l])
                                     : (probe.diff_sq[l] > 0.0 ? 1.0 : 0.0);
  }
  return error;
}

Status Model::probe_quantized_attention(int32_t layer_idx, const ForwardBatch& batch,
                                        const cpu::AttentionParams& reference, ThreadPool& pool) {
  KvQuantProbe& probe = *kv_quant_probe_;
  const PagedKvCacheView cache = probe.cache->layer_view(layer_idx);
  cpu::AppendKvParams append;
  append.k = scratch_.k.data();
  append.v = scratch_.v.data();
  append.slot_mapping = batch.slot_mapping.data();
  append.num_tokens = span_size(batch.token_ids.size());
  append.cache = cache;
  append.num_cache_blocks = probe.cache->num_blocks();
  cpu::AttentionParams attn = reference;
  attn.mass_offsets = nullptr;  // the probe's attention must not touch the forward's mass
  attn.mass = nullptr;
  if (probe.newest != nullptr) {
    const GroupBatchView& group = batch.groups[static_cast<size_t>(batch.newest_group()) - 1];
    append.newest_slot_mapping = group.slot_mapping.data();
    append.newest = probe.newest->layer_view(layer_idx);
    append.num_newest_blocks = probe.newest->num_blocks();
    attn.newest = {append.newest, group.layout, group.newest_blocks};
  }
  STRATA_RETURN_IF_ERROR(cpu::append_kv(append, pool));
  probe.out.resize(scratch_.attn.size());
  attn.cache = cache;
  attn.out = probe.out.data();
  STRATA_RETURN_IF_ERROR(cpu::paged_attention(attn, pool));
  const size_t n = static_cast<size_t>(append.num_tokens) *
                   static_cast<size_t>(config_.num_attention_heads * config_.head_dim);
  double diff_sq = 0.0;
  double ref_sq = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double ref = scratch_.attn[i];
    const double d = static_cast<double>(probe.out[i]) - ref;
    diff_sq += d * d;
    ref_sq += ref * ref;
  }
  probe.diff_sq[static_cast<size_t>(layer_idx)] += diff_sq;
  probe.ref_sq[static_cast<size_t>(layer_idx)] += ref_sq;
  return Status::Ok();
}

Status Model::set_bf16_matmul(bool on) {
  if (on && !cpu::linear_precision_supported(cpu::LinearPrecision::kBf16)) {
    return Status::Unsupported(
        "--cpu-matmul-precision bf16 needs a CPU with AVX-512 BF16 (vdpbf16ps); use fp32");
  }
  bf16_matmul_ = on;
  return Status::Ok();
}

int64_t Model::weight_bytes() const {
  int64_t total = 0;
  for (const std::string& name : store_.names()) total += store_.get(name).nbytes();
  return total;
}

void Model::Scratch::resize(const ModelConfig& c, int64_t num_tokens) {
  const auto n = static_cast<size_t>(num_tokens);
  const auto hidden_size = static_cast<size_t>(c.hidden_size);
  const auto q_size = static_cast<size_t>(c.num_attention_heads * c.head_dim);
  const auto kv_size = static_cast<size_t>(c.num_key_value_heads * c.head_dim);
  const auto inter = static_cast<size_t>(c.intermediate_size);
  hidden.resize(n * hidden_size);
  normed.resize(n * hidden_size);
  proj.resize(n * hidden_size);
  q.resize(n * q_size);
  // MLA's attention output is heads * v_head_dim wide (its head_dim is the RoPE width).
  attn.resize(n * std::max(q_size, static_cast<size_t>(c.num_attention_heads * c.mla.v_head_dim)));
  k.resize(n * kv_size);
  v.resize(n * kv_size);
  gate.resize(n * inter);
  up.resize(n * inter);
}

Status Model::validate(const ForwardBatch& b, const KvPools& kv, size_t logits_size) const {
  const auto num_layers = static_cast<size_t>(config_.num_hidden_layers);
  if (kv.pools.empty() || kv.pools.size() != b.groups.size() + 1 ||
      (!kv.slots.empty() && kv.slots.size() != num_layers)) {
    return Status::InvalidArgument(
        "forward: a pool and a group view per KV group, a slot per layer");
  }
  for (const kv::HostKvBuffer* p : kv.pools) {
    if (p == nullptr || p->layout().block_size() != b.layout.block_size) {
      return Status::InvalidArgument(
          "forward: the paged layout and a KV pool disagree on block size");
    }
  }
  for (const kv::KvLayerSlot& slot : kv.slots) {
    if (slot.group < 0 || static_cast<size_t>(slot.group) >= kv.pools.size() || slot.index < 0 ||
        slot.index >= kv.pools[static_cast<size_t>(slot.group)]->layout().spec().num_layers) {
      return Status::InvalidArgument("forward: a layer's KV group or index is out of range");
    }
  }
  // INT4 layers (pool 0's, every layer in pool 0) read the newest-blocks group beside them: F32
  // blocks of their shape.
  if (kv::needs_newest_blocks_group(kv.pools[0]->layout().spec())) {
    if (kv.newest < 1 || !kv.slots.empty()) {
      return Status::InvalidArgument(
          "forward: an int4 KV cache needs its newest-blocks group, and its layers in pool 0");
    }
    const kv::KvSpec& spec = kv.pools[static_cast<size_t>(kv.newest)]->layout().spec();
    if (spec.dtype != DType::kF32 || spec.num_layers != kv.pools[0]->layout().spec().num_layers) {
      return Status::InvalidArgument(
          "forward: the newest-blocks pool is not F32 of the cache's layers");
    }
  }
  for (size_t p = 1; p < kv.pools.size(); ++p) {
    if (kv::needs_newest_blocks_group(kv.pools[p]->layout().spec())) {
      return Status::InvalidArgument("forward: int4 layers live in pool 0 only");
    }
  }
  if (!b.sample_rows.empty()) {
    return Status::InvalidArgument("forward: the CPU backend samples on the host (no sample rows)");
  }
  constexpr int32_t kUnbounded = std::numeric_limits<int32_t>::max();  // no fixed scratch here
  STRATA_RETURN_IF_ERROR(validate_step_batch(b, config_.vocab_size, kv.pools[0]->num_blocks(),
                                             kUnbounded, kUnbounded, logits_size,
                                             /*num_sampled=*/0));
  // Each later group's view must hold for its own pool what group 0's holds for pool 0.
  for (size_t g = 1; g < kv.pools.size(); ++g) {
    STRATA_RETURN_IF_ERROR(
        validate_step_group(b, static_cast<int32_t>(g), kv.pools[g]->num_blocks()));
  }
  return Status::Ok();
}

Status Model::begin_mass(const ForwardBatch& b) {
  scratch_.mass.clear();
  scratch_.mass_offsets.clear();
  scratch_.mass_rows.clear();
  if (b.mass_offsets.empty()) return Status::Ok();
  if (b.mass_offsets.size() != b.token_ids.size() ||
      (!b.mass_modes.empty() && b.mass_modes.size() != b.token_ids.size())) {
    return Status::InvalidArgument(
        "forward: mass_offsets (and mass_modes, if set) need one entry per token row");
  }
  const int64_t num_kv_heads = cache_kv_heads();
  const auto size = span_size(b.attention_mass.size());
  std::vector<MassRow>& rows = scratch_.mass_rows;
  const auto refuse = [&](const std::string& why) {
    rows.clear();
    scratch_.mass_offsets.clear();
    return Status::InvalidArgument("forward: " + why);
  };
  scratch_.mass_offsets.assign(b.mass_offsets.size(), -1);
  int64_t scratch_size = 0;
  for (int32_t s = 0; s < b.layout.num_seqs; ++s) {
    const int32_t kv_len = b.layout.kv_len(s);
    for (int32_t t = b.q_indptr[static_cast<size_t>(s)]; t < b.q_indptr[static_cast<size_t>(s) + 1];
         ++t) {
      const int64_t out = b.mass_offsets[static_cast<size_t>(t)];
      if (out < 0) continue;
      const MassMode mode =
          b.mass_modes.empty() ? MassMode::kSum : b.mass_modes[static_cast<size_t>(t)];
      if (out > size - mass_row_size(mode, kv_len)) {
        return refuse("token row " + std::to_string(t) +
                      "'s attention mass row does not fit attention_mass");
      }
      scratch_.mass_offsets[static_cast<size_t>(t)] = scratch_size;
      rows.push_back({out, scratch_size, kv_len, mode});
      scratch_size += num_kv_heads * kv_len;
    }
  }
  // Disjoint rows: add_layer_mass fills them in parallel.
  std::sort(rows.begin(), rows.end(),
            [](const MassRow& a, const MassRow& c) { return a.out < c.out; });
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i - 1].out + mass_row_size(rows[i - 1].mode, rows[i - 1].kv_len) > rows[i].out) {
      return refuse("two token rows' attention mass rows overlap");
    }
  }
  if (rows.empty()) {  // every offset < 0: nothing wanted
    scratch_.mass_offsets.clear();
    return Status::Ok();
  }
  for (const MassRow& r : rows) {
    std::fill_n(b.attention_mass.begin() + r.out, mass_row_size(r.mode, r.kv_len), 0.0f);
  }
  scratch_.mass.resize(static_cast<size_t>(scratch_size));
  return Status::Ok();
}

void Model::add_layer_mass(int32_t layer_idx, const ForwardBatch& b, ThreadPool& pool) {
  const auto num_kv_heads = static_cast<int32_t>(cache_kv_heads());
  const std::vector<MassRow>& rows = scratch_.mass_rows;
  pool.parallel_for(
      span_size(rows.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const MassRow& r = rows[static_cast<size_t>(i)];
          float* out = b.attention_mass.data() + r.out;
          const float* heads = scratch_.mass.data() + r.scratch;
          if (r.mode == MassMode::kPerHead) {  // the layer's part: its KV heads in order
            std::copy_n(heads, static_cast<int64_t>(num_kv_heads) * r.kv_len,
                        out + static_cast<int64_t>(layer_idx) * num_kv_heads * r.kv_len);
            continue;
          }
          const bool max = r.mode == MassMode::kMax;
          for (int32_t j = 0; j < r.kv_len; ++j) {
            float acc = out[j];
            for (int32_t h = 0; h < num_kv_heads; ++h) {
              const float v = heads[static_cast<int64_t>(h) * r.kv_len + j];
              acc = max ? std::max(acc, v) : acc + v;
            }
            out[j] = acc;
          }
        }
      },
      /*min_chunk=*/1);
}

Status Model::forward(const ForwardBatch& batch, kv::HostKvBuffer& kv, std::span<float> logits,
                      ThreadPool& pool) {
  kv::HostKvBuffer* const pools[] = {&kv};
  return forward(batch, pools, {}, logits, pool);
}

Status Model::forward(const ForwardBatch& batch, std::span<kv::HostKvBuffer* const> pools,
                      std::span<const kv::KvLayerSlot> slots, std::span<float> logits,
                      ThreadPool& pool) {
  const KvPools kv{pools, slots, batch.newest_group()};
  const cpu::LinearPrecisionScope precision(bf16_matmul_ ? cpu::LinearPrecision::kBf16
                                                         : cpu::LinearPrecision::kF32);
  STRATA_RETURN_IF_ERROR(validate(batch, kv, logits.size()));
  STRATA_RETURN_IF_ERROR(begin_mass(batch));
  const int64_t num_tokens = span_size(batch.token_ids.size());
  scratch_.resize(config_, num_tokens);
  cpu::EmbeddingParams embed;
  embed.token_ids = batch.token_ids.data();
  embed.num_tokens = num_tokens;
  embed.table = weights_.embed;
  embed.out = scratch_.hidden.data();
  embed.scale = embed_scale_;
  STRATA_RETURN_IF_ERROR(cpu::embedding(embed, pool));
  for (int32_t l = 0; l < static_cast<int32_t>(config_.num_hidden_layers); ++l) {
    STRATA_RETURN_IF_ERROR(run_layer(l, batch, kv, pool));
  }
  // Final norm and LM head only for the rows whose logits are wanted.
  const int64_t hidden_size = config_.hidden_size;
  const int64_t num_rows = span_size(batch.logits_rows.size());
  scratch_.rows.resize(static_cast<size_t>(num_rows * hidden_size));
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* src = scratch_.hidden.data() + batch.logits_rows[static_cast<size_t>(r)] * hidden_size;
    std::copy(src, src + hidden_size, scratch_.rows.data() + r * hidden_size);
  }
  STRATA_RETURN_IF_ERROR(rms_norm(scratch_.rows.data(), weights_.final_norm, scratch_.rows.data(),
                                   num_rows, pool));
  STRATA_RETURN_IF_ERROR(cpu::linear(scratch_.rows.data(), weights_.lm_head, TensorView{},
                                     logits.data(), num_rows, pool));
  if (config_.final_logit_softcapping > 0.0)
    soft_cap(logits.first(static_cast<size_t>(num_rows * vocab_size())), pool);
  return Status::Ok();
}

void Model::soft_cap(std::span<float> logits, ThreadPool& pool) const {
  const double cap = config_.final_logit_softcapping;
  pool.parallel_for(
      span_size(logits.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          float& x = logits[static_cast<size_t>(i)];
          x = static_cast<float>(cap * std::tanh(static_cast<double>(x) / cap));
        }
      },
      /*min_chunk=*/16384);
}

Status Model::rms_norm(const float* x, TensorView weight, float* out, int64_t num_rows,
                       ThreadPool& pool) const {
  cpu::RmsNormParams p;
  p.x = x;
  p.out = out;
  p.weight = weight;
  p.num_rows = num_rows;
  p.eps = static_cast<float>(config_.rms_norm_eps);
  p.unit_offset = config_.norm_unit_offset;
  return cpu::rms_norm(p, pool);
}

Status Model::run_layer(int32_t layer_idx, const ForwardBatch& batch, const KvPools& kv,
                        ThreadPool& pool) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer_idx)];
  const int64_t num_tokens = span_size(batch.token_ids.size());
  STRATA_RETURN_IF_ERROR(rms_norm(scratch_.hidden.data(), w.input_norm, scratch_.normed.data(),
                                   num_tokens, pool));
  STRATA_RETURN_IF_ERROR(run_attention(layer_idx, batch, kv, pool));
  STRATA_RETURN_IF_ERROR(cpu::linear(scratch_.attn.data(), w.o_proj, w.o_bias, scratch_.proj.data(),
                                     num_tokens, pool));
  // Gemma 3's sandwich: each block's output is normed before its residual add.
  if (!w.attn_output_norm.empty()) {
    STRATA_RETURN_IF_ERROR(
        rms_norm(scratch_.proj.data(), w.attn_output_norm, scratch_.proj.data(), num_tokens, pool));
  }
  const int64_t hidden_elems = num_tokens * config_.hidden_size;
  STRATA_RETURN_IF_ERROR(cpu::add_inplace(scratch_.hidden.data(), scratch_.proj.data(), hidden_elems, pool));
  STRATA_RETURN_IF_ERROR(rms_norm(scratch_.hidden.data(), w.post_attention_norm, scratch_.normed.data(),
                                   num_tokens, pool));
  STRATA_RETURN_IF_ERROR(run_mlp(layer_idx, num_tokens, pool));
  if (!w.mlp_output_norm.empty()) {
    STRATA_RETURN_IF_ERROR(
        rms_norm(scratch_.proj.data(), w.mlp_output_norm, scratch_.proj.data(), num_tokens, pool));
  }
  return cpu::add_inplace(scratch_.hidden.data(), scratch_.proj.data(), hidden_elems, pool);
}

Status Model::run_attention(int32_t layer_idx, const ForwardBatch& batch, const KvPools& kv,
                            ThreadPool& pool) {
  if (config_.mla.enabled()) return run_mla_attention(layer_idx, batch, kv, pool);
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer_idx)];
  const int64_t num_tokens = span_size(batch.token_ids.size());
  const auto num_heads = static_cast<int32_t>(config_.num_attention_heads);
  const auto num_kv_heads = static_cast<int32_t>(config_.num_key_value_heads);
  const auto head_dim = static_cast<int32_t>(config_.head_dim);
  const float* x = scratch_.normed.data();
  STRATA_RETURN_IF_ERROR(cpu::linear(x, w.q_proj, w.q_bias, scratch_.q.data(), num_tokens, pool));
  STRATA_RETURN_IF_ERROR(cpu::linear(x, w.k_proj, w.k_bias, scratch_.k.data(), num_tokens, pool));
  STRATA_RETURN_IF_ERROR(cpu::linear(x, w.v_proj, w.v_bias, scratch_.v.data(), num_tokens, pool));
  if (config_.qk_norm) {
    STRATA_RETURN_IF_ERROR(rms_norm(scratch_.q.data(), w.q_norm, scratch_.q.data(),
                                     num_tokens * num_heads, pool));
    STRATA_RETURN_IF_ERROR(rms_norm(scratch_.k.data(), w.k_norm, scratch_.k.data(),
                                     num_tokens * num_kv_heads, pool));
  }
  cpu::RopeParams rope;
  rope.q = scratch_.q.data();
  rope.k = scratch_.k.data();
  rope.positions = batch.positions.data();
  const bool sliding = config_.layer_sliding_window[static_cast<size_t>(layer_idx)] > 0;
  rope.inv_freq =
      sliding && !sliding_inv_freq_.empty() ? sliding_inv_freq_.data() : inv_freq_.data();
  rope.num_tokens = num_tokens;
  rope.num_q_heads = num_heads;
  rope.num_kv_heads = num_kv_heads;
  rope.head_dim = head_dim;
  rope.attention_scaling = static_cast<float>(rope_attention_factor(
      sliding && config_.sliding_rope ? *config_.sliding_rope : config_.rope));
  STRATA_RETURN_IF_ERROR(cpu::apply_rope(rope, pool));
  if (kv_abs_max_ != nullptr) {
    auto& [k_max, v_max] = (*kv_abs_max_)[static_cast<size_t>(layer_idx)];
    const int64_t n = num_tokens * num_kv_heads * head_dim;
    for (int64_t i = 0; i < n; ++i) {
      k_max = std::max(k_max, std::fabs(scratch_.k[static_cast<size_t>(i)]));
      v_max = std::max(v_max, std::fabs(scratch_.v[static_cast<size_t>(i)]));
    }
  }
  // The layer's K/V: pool 0 at its own index, unless the layers live in groups.
  const kv::KvLayerSlot at =
      kv.slots.empty() ? kv::KvLayerSlot{0, layer_idx} : kv.slots[static_cast<size_t>(layer_idx)];
  kv::HostKvBuffer* buffer = kv.pools[static_cast<size_t>(at.group)];
  const int32_t kv_layer = at.index;
  const PagedKvLayout* layout = &batch.layout;
  const int64_t* slots = batch.slot_mapping.data();
  if (at.group > 0) {
    const GroupBatchView& group = batch.groups[static_cast<size_t>(at.group) - 1];
    layout = &group.layout;
    slots = group.slot_mapping.data();
  }
  const PagedKvCacheView cache = buffer->layer_view(kv_layer);
  cpu::AppendKvParams append;
  append.k = scratch_.k.data();
  append.v = scratch_.v.data();
  append.slot_mapping = slots;
  append.num_tokens = num_tokens;
  append.cache = cache;
  append.num_cache_blocks = buffer->num_blocks();
  // INT4 layers keep their newest blocks at full precision in the newest-blocks group; the other
  // layers of a mixed layout never touch it.
  cpu::AttentionParams attn;
  if (cache.dtype == DType::kI4) {
    const GroupBatchView& group = batch.groups[static_cast<size_t>(kv.newest) - 1];
    kv::HostKvBuffer& newest = *kv.pools[static_cast<size_t>(kv.newest)];
    append.newest_slot_mapping = group.slot_mapping.data();
    append.newest = newest.layer_view(layer_idx);
    append.num_newest_blocks = newest.num_blocks();
    attn.newest = {append.newest, group.layout, group.newest_blocks};
  }
  STRATA_RETURN_IF_ERROR(cpu::append_kv(append, pool));
  attn.q = scratch_.q.data();
  attn.out = scratch_.attn.data();
  attn.q_indptr = batch.q_indptr.data();
  attn.layout = *layout;
  attn.cache = cache;
  attn.num_q_heads = num_heads;
  attn.scale = config_.query_pre_attn_scalar > 0.0
                   ? static_cast<float>(1.0 / std::sqrt(config_.query_pre_attn_scalar))
                   : 1.0f / std::sqrt(static_cast<float>(head_dim));
  attn.sliding_window = config_.layer_sliding_window[static_cast<size_t>(layer_idx)];
  if (!scratch_.mass.empty()) {
    attn.mass_offsets = scratch_.mass_offsets.data();
    attn.mass = scratch_.mass.data();
  }
  STRATA_RETURN_IF_ERROR(cpu::paged_attention(attn, pool));
  if (!scratch_.mass.empty()) add_layer_mass(layer_idx, batch, pool);
  if (kv_quant_probe_ != nullptr) return probe_quantized_attention(layer_idx, batch, attn, pool);
  return Status::Ok();
}

Status Model::run_mlp(int32_t layer_idx, int64_t num_tokens, ThreadPool& pool) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer_idx)];
  const float* x = scratch_.normed.data();
  if (config_.moe.is_moe(layer_idx)) {
    return moe_forward(config_.moe, w.moe, x, num_tokens, scratch_.proj.data(), moe_scratch_, pool);
  }
  STRATA_RETURN_IF_ERROR(cpu::linear(x, w.gate_proj, w.gate_bias, scratch_.gate.data(), num_tokens, pool));
  STRATA_RETURN_IF_ERROR(cpu::linear(x, w.up_proj, w.up_bias, scratch_.up.data(), num_tokens, pool));
  const int64_t gate_elems = num_tokens * config_.intermediate_size;
  switch (config_.mlp_activation) {
    case MlpActivation::kSilu:
      STRATA_RETURN_IF_ERROR(cpu::silu_and_mul(scratch_.gate.data(), scratch_.up.data(),
                                               scratch_.gate.data(), gate_elems, pool));
      break;
    case MlpActivation::kGeluTanh:
      STRATA_RETURN_IF_ERROR(cpu::gelu_tanh_and_mul(scratch_.gate.data(), scratch_.up.data(),
                                                    scratch_.gate.data(), gate_elems, pool));
      break;
  }
  return cpu::linear(scratch_.gate.data(), w.down_proj, w.down_bias, scratch_.proj.data(), num_tokens,
                     pool);
}

}  // namespace strata::model
