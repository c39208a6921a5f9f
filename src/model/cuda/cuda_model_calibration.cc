// CudaModel's start-up passes over calibration tokens (cuda_model.h): the FP8 scales'
// measurement, --kv-quant-check, and the pool's re-layout the check decides. Each pass runs the
// model's own step (run_body) over one sequence through scratch pools swapped in for it.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/prefill_attention.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/cuda_model_impl.h"
#include "model/forward_batch_check.h"
#include "model/logits_kl.h"

namespace strata::model {
namespace {

Result<cuda::DeviceBuffer> zeroed(int64_t bytes, cudaStream_t stream) {
  Result<cuda::DeviceBuffer> b = cuda::DeviceBuffer::allocate(static_cast<size_t>(bytes));
  if (!b.ok()) return b.status();
  STRATA_CUDA_CHECK(cudaMemsetAsync(b->data(), 0, b->bytes(), stream));
  return b;
}

// Host memory for `count` floats of logits: pinned (cudaMallocHost), which the GPU copies into at
// full speed, or pageable when the system has no pinned memory to give.
class HostFloats {
 public:
  HostFloats(const HostFloats&) = delete;
  HostFloats& operator=(const HostFloats&) = delete;
  explicit HostFloats(size_t count) {
    void* p = nullptr;
    if (cudaMallocHost(&p, count * sizeof(float)) == cudaSuccess) {
      pinned_.reset(static_cast<float*>(p));
      span_ = std::span<float>(pinned_.get(), count);
    } else {
      cudaGetLastError();  // a failed allocation leaves its error as the thread's last
      pageable_.resize(count);
      span_ = pageable_;
    }
  }
  std::span<float> span() const { return span_; }

 private:
  cuda::PinnedArray<float> pinned_;
  std::vector<float> pageable_;
  std::span<float> span_;
};

// sqrt(sum |got - ref|^2 / sum |ref|^2) over two bf16 arrays of the same size.
double relative_l2(const std::vector<uint16_t>& got, const std::vector<uint16_t>& ref) {
  STRATA_CHECK(got.size() == ref.size(), "relative_l2: sizes differ");
  double diff_sq = 0.0;
  double ref_sq = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = bf16_to_f32(ref[i]);
    const double d = static_cast<double>(bf16_to_f32(got[i])) - r;
    diff_sq += d * d;
    ref_sq += r * r;
  }
  return ref_sq > 0.0 ? std::sqrt(diff_sq / ref_sq) : (diff_sq > 0.0 ? 1.0 : 0.0);
}

}  // namespace

Status CudaModel::Impl::calibration_pass(std::span<const int32_t> tokens,
                                         const kv::KvLayout& scratch_layout,
                                         std::span<float> logits,
                                         cuda::DeviceBuffer* scratch_pool) {
  if (tokens.empty()) return Status::InvalidArgument("calibration: no tokens");
  const int32_t bs = options.block_size;
  STRATA_CHECK(scratch_layout.block_size() == bs, "calibration_pass: the pool's block size");
  const auto n = static_cast<int32_t>(tokens.size());
  const int32_t used_blocks = (n + bs - 1) / bs;
  const int64_t vocab = config.vocab_size;
  Result<cuda::DeviceBuffer> scratch = zeroed(scratch_layout.pool_bytes(used_blocks + 1), stream.get());
  if (!scratch.ok()) return scratch.status();
  // INT4: a scratch newest-blocks pool mirroring the main pool's block ids, read through the
  // serving R (the newest R blocks at full precision, as a served sequence reads them).
  const bool int4 = kv::needs_newest_blocks_group(scratch_layout.spec());
  std::optional<kv::KvLayout> scratch_newest_layout;
  cuda::DeviceBuffer scratch_newest;
  if (int4) {
    scratch_newest_layout.emplace(kv::newest_blocks_spec(scratch_layout.spec(), DType::kBF16), bs);
    Result<cuda::DeviceBuffer> r =
        zeroed(scratch_newest_layout->pool_bytes(used_blocks + 1), stream.get());
    if (!r.ok()) return r.status();
    scratch_newest = std::move(r).value();
    if (lse_workspace.bytes() == 0 || lse_workspace.data() == nullptr) {
      Result<cuda::DeviceBuffer> lse = cuda::DeviceBuffer::allocate(static_cast<size_t>(
          cuda::prefill_int4_workspace_floats(options.max_num_tokens,
                                              static_cast<int32_t>(config.num_attention_heads)) *
          4));
      if (!lse.ok()) return lse.status();
      lse_workspace = std::move(lse).value();
    }
  }
  if (!logits.empty() && logits.size() != static_cast<size_t>(n * vocab)) {
    return Status::Internal("calibration_pass: logits is not [tokens x vocab]");
  }
  kv::KvLayout swapped = scratch_layout;
  std::swap(layout, swapped);
  std::swap(pool, *scratch);
  std::swap(newest_layout, scratch_newest_layout);
  std::swap(newest_pool, scratch_newest);
  auto run = [&]() -> Status {
    std::vector<int32_t> positions, indices, rows;
    std::vector<int64_t> slots;
    std::vector<float> last(static_cast<size_t>(vocab));
    const std::vector<int32_t> newest_first = {0};  // the newest-blocks group holds every block
    for (int32_t c0 = 0; c0 < n; c0 += options.max_num_tokens) {
      const int32_t c1 = std::min(n, c0 + options.max_num_tokens);
      positions.resize(static_cast<size_t>(c1 - c0));
      slots.resize(positions.size());
      for (int32_t i = c0; i < c1; ++i) {
        positions[static_cast<size_t>(i - c0)] = i;
        slots[static_cast<size_t>(i - c0)] = bs + i;  // blocks 1.. in order; 0 is the null block
      }
      const int32_t blocks = (c1 + bs - 1) / bs;
      indices.resize(static_cast<size_t>(blocks));
      for (int32_t b = 0; b < blocks; ++b) indices[static_cast<size_t>(b)] = b + 1;
      const std::vector<int32_t> q_indptr = {0, c1 - c0};
      const std::vector<int32_t> kv_indptr = {0, blocks};
      const std::vector<int32_t> last_len = {c1 - (blocks - 1) * bs};
      if (!logits.empty()) {
        rows.resize(positions.size());
        for (int32_t i = 0; i < c1 - c0; ++i) rows[static_cast<size_t>(i)] = i;
      } else {
        rows = {c1 - c0 - 1};
      }
      const std::span<float> out =
          !logits.empty() ? logits.subspan(static_cast<size_t>(c0 * vocab), rows.size() * vocab)
                          : std::span<float>(last);
      ForwardBatch batch;
      batch.token_ids = tokens.subspan(static_cast<size_t>(c0), static_cast<size_t>(c1 - c0));
      batch.positions = positions;
      batch.q_indptr = q_indptr;
      batch.layout = PagedKvLayout{kv_indptr.data(), indices.data(), last_len.data(), 1, bs};
      batch.slot_mapping = slots;
      batch.logits_rows = rows;
      // INT4: the newest-blocks group at the same block ids and slots (group 1).
      GroupBatchView newest{
          .layout = batch.layout, .slot_mapping = slots, .newest_blocks = options.newest_blocks};
      newest.layout.first_block = newest_first.data();
      if (int4) batch.groups = std::span<const GroupBatchView>(&newest, 1);
      STRATA_RETURN_IF_ERROR(validate_step_batch(batch, vocab, used_blocks + 1,
                                                 options.max_num_tokens, options.max_num_seqs,
                                                 out.size(), 0));
      if (int4) {
        STRATA_RETURN_IF_ERROR(validate_step_group(batch, batch.newest_group(), used_blocks + 1));
      }
      Result<CudaStepInputs::Device> in = inputs.upload(batch, stream.get());
      if (!in.ok()) return in.status();
      if (attention_capture != nullptr) attention_capture->row0 = c0;
      STRATA_RETURN_IF_ERROR(run_body(*in, out));
      STRATA_RETURN_IF_ERROR(stream.synchronize());
    }
    return Status::Ok();
  };
  const Status status = run();
  std::swap(layout, swapped);
  std::swap(pool, *scratch);
  std::swap(newest_layout, scratch_newest_layout);
  std::swap(newest_pool, scratch_newest);
  STRATA_RETURN_IF_ERROR(status);
  if (scratch_pool != nullptr) *scratch_pool = std::move(scratch).value();
  return Status::Ok();
}

Result<std::vector<std::pair<float, float>>> CudaModel::kv_abs_max(
    std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  if (m.config.mla.enabled()) {
    return Status::Unsupported("kv_abs_max: the MLA latent cache is not quantized");
  }
  if (tokens.empty()) return Status::InvalidArgument("kv_abs_max: no calibration tokens");
  const int32_t bs = m.options.block_size;
  const kv::KvLayout scratch_layout(kv_spec(m.config, DType::kBF16), bs);
  cuda::DeviceBuffer scratch;
  STRATA_RETURN_IF_ERROR(m.calibration_pass(tokens, scratch_layout, {}, &scratch));
  // Every written slot's K and V, per layer (blocks 1..used_blocks; unwritten slots are 0).
  const auto used_blocks = static_cast<int32_t>((tokens.size() + bs - 1) / bs);
  std::vector<uint16_t> host(static_cast<size_t>(scratch.bytes() / 2));
  STRATA_CUDA_CHECK(
      cudaMemcpy(host.data(), scratch.data(), scratch.bytes(), cudaMemcpyDeviceToHost));
  const int64_t area = scratch_layout.kv_area_bytes() / 2;
  std::vector<std::pair<float, float>> abs_max(static_cast<size_t>(m.config.num_hidden_layers),
                                               {0.0f, 0.0f});
  for (int32_t l = 0; l < static_cast<int32_t>(abs_max.size()); ++l) {
    const PagedKvCacheView view = scratch_layout.layer_view(host.data(), l);
    for (int32_t b = 1; b <= used_blocks; ++b) {
      const uint16_t* k = static_cast<const uint16_t*>(view.k_data) + b * view.block_stride;
      const uint16_t* v = static_cast<const uint16_t*>(view.v_data) + b * view.block_stride;
      auto& [k_max, v_max] = abs_max[static_cast<size_t>(l)];
      for (int64_t i = 0; i < area; ++i) {
        k_max = std::max(k_max, std::fabs(bf16_to_f32(k[i])));
        v_max = std::max(v_max, std::fabs(bf16_to_f32(v[i])));
      }
    }
  }
  return abs_max;
}

Result<CudaModel::KvQuantFigures> CudaModel::kv_quant_check(
    std::span<const int32_t> tokens, ThreadPool& pool, const std::function<void()>& after_pass) {
  Impl& m = *impl_;
  const DType dtype = m.options.kv_dtype;
  if (dtype == DType::kBF16) {
    return Status::InvalidArgument("kv_quant_check: a bfloat16 cache has nothing to measure");
  }
  if (tokens.empty()) return Status::InvalidArgument("kv_quant_check: no calibration tokens");
  const auto num_layers = static_cast<int32_t>(m.config.num_hidden_layers);
  const int32_t bs = m.options.block_size;
  const int64_t vocab = m.config.vocab_size;
  AttentionCapture capture;
  capture.out.assign(static_cast<size_t>(num_layers), nullptr);
  struct Detach {
    Impl& m;
    ~Detach() { m.attention_capture = nullptr; }
  } detach{m};
  m.attention_capture = &capture;

  std::vector<std::vector<uint16_t>> ref_attn(static_cast<size_t>(num_layers));
  for (int32_t l = 0; l < num_layers; ++l) capture.out[static_cast<size_t>(l)] = &ref_attn[l];
  // The reference's and each pass's logits, [tokens x vocab] each (256 MB for 512 tokens of a
  // 128K vocabulary), in pinned host memory: 33 passes of pageable copies cost seconds.
  const HostFloats ref(tokens.size() * static_cast<size_t>(vocab));
  const HostFloats got(tokens.size() * static_cast<size_t>(vocab));
  const std::span<float> ref_logits = ref.span();
  const std::span<float> got_logits = got.span();
  STRATA_RETURN_IF_ERROR(m.calibration_pass(
      tokens, kv::KvLayout(kv_spec(m.config, DType::kBF16), bs), ref_logits, nullptr));
  if (after_pass) after_pass();
  const KlReference reference(ref_logits, vocab, pool);  // ref now holds probabilities

  KvQuantFigures figures;
  std::vector<uint16_t> got_attn;
  std::fill(capture.out.begin(), capture.out.end(), nullptr);
  for (int32_t l = 0; l < num_layers; ++l) {
    kv::KvSpec spec = kv_spec(m.config, dtype);
    spec.layer_dtypes.assign(static_cast<size_t>(num_layers), DType::kBF16);
    spec.layer_dtypes[static_cast<size_t>(l)] = dtype;
    capture.out[static_cast<size_t>(l)] = &got_attn;
    STRATA_RETURN_IF_ERROR(m.calibration_pass(
        tokens, kv::KvLayout(spec, bs, m.layout.static_scales()), got_logits, nullptr));
    capture.out[static_cast<size_t>(l)] = nullptr;
    if (after_pass) after_pass();
    figures.output_kl.push_back(reference.mean_kl(got_logits, pool));
    figures.attn_error.push_back(relative_l2(got_attn, ref_attn[static_cast<size_t>(l)]));
  }
  return figures;
}

Status CudaModel::set_kv_static_scales(kv::KvStaticScales scales) {
  Impl& m = *impl_;
  const kv::KvSpec& spec = m.layout.spec();
  if (spec.dtype != DType::kF8E4M3 && spec.dtype != DType::kF8E5M2) {
    return Status::InvalidArgument("static KV scales are for an fp8 pool");
  }
  if (!m.graphs.empty()) {
    return Status::InvalidArgument("KV scales cannot change after the first decode graph");
  }
  if (scales.k.size() != static_cast<size_t>(spec.num_layers) ||
      scales.v.size() != static_cast<size_t>(spec.num_layers)) {
    return Status::InvalidArgument("one K and one V scale per layer");
  }
  m.layout = kv::KvLayout(spec, m.options.block_size, std::move(scales));
  return Status::Ok();
}

Status CudaModel::set_kv_layer_dtypes(std::vector<DType> layer_dtypes) {
  Impl& m = *impl_;
  if (m.config.mla.enabled()) {
    return Status::Unsupported("the MLA latent cache has no per-layer KV dtypes");
  }
  if (m.stepped) {
    return Status::InvalidArgument("the KV pool's layout cannot change after the first step");
  }
  STRATA_RETURN_IF_ERROR(check_layer_dtypes(m.config, m.options.kv_dtype, layer_dtypes));
  CudaModelOptions o = m.options;
  o.kv_layer_dtypes = std::move(layer_dtypes);
  const kv::KvSpec spec = pool_spec(m.config, o);
  const bool int4 = kv::needs_newest_blocks_group(spec);
  if (int4 && !m.newest_layout) {
    return Status::InvalidArgument(
        "an int4 layer needs the newest-blocks pool, and this model was created without one");
  }
  // Free the old pool first: the new one is sized from the same budget.
  m.mover.reset();
  m.pool = cuda::DeviceBuffer{};
  m.options.kv_layer_dtypes = std::move(o.kv_layer_dtypes);
  m.layout = kv::KvLayout(spec, m.options.block_size, m.layout.static_scales());
  if (!int4 && m.newest_layout) {
    m.newest_mover.reset();
    m.newest_pool = cuda::DeviceBuffer{};
    m.newest_layout.reset();
    m.options.num_newest_blocks = 0;
    m.info.num_newest_blocks = 0;
    m.info.newest_pool_bytes = 0;
    STRATA_RETURN_IF_ERROR(m.make_graph_inputs(0));
  }
  try {
    m.allocate_pool();
  } catch (const Error& e) {
    return Status::ResourceExhausted(e.what());
  }
  return Status::Ok();
}

}  // namespace strata::model
