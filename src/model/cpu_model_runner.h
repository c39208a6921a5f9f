#pragma once
// CpuModelRunner: the CPU backend's ModelRunner -- a Model (owned or borrowed), the KV pool in
// host memory, and the thread pool its kernels spread over (borrowed). forward() is
// Model::forward; copy_blocks() is one memcpy per block (kv/block_copy.h). An INT4 pool comes
// with a second pool, its full-precision newest blocks (kv::residual_spec's layout, its own
// block ids), which the runner owns too and passes to Model::forward.

#include <memory>
#include <optional>
#include <utility>

#include "core/thread_pool.h"
#include "kv/host_kv_buffer.h"
#include "model/model.h"
#include "model/model_runner.h"

namespace strata::model {

class CpuModelRunner final : public ModelRunner {
 public:
  // owned may be null (then model is borrowed and must outlive the runner). num_residual_blocks
  // (the null block included): the residual pool's size, > 1 exactly when the layout holds an
  // INT4 layer (kv::needs_residual_pool).
  CpuModelRunner(std::unique_ptr<Model> owned, Model& model, ThreadPool& pool,
                 const kv::KvLayout& layout, int32_t num_blocks, int32_t num_residual_blocks = 0);

  const Model& model() const { return model_; }

  const ModelConfig& config() const override { return model_.config(); }
  int64_t weight_bytes() const override { return model_.weight_bytes(); }
  int32_t num_kv_pools() const override { return residual_ ? 2 : 1; }
  const kv::KvLayout& kv_layout(int32_t pool = 0) const override { return buffer(pool).layout(); }
  int32_t num_blocks(int32_t pool = 0) const override { return buffer(pool).num_blocks(); }
  Status copy_blocks(int32_t pool, std::span<const kv::BlockCopy> copies) override;
  kv::BlockMover& block_mover(int32_t pool = 0) override;
  bool samples_on_device() const override { return false; }
  Status forward(const ForwardBatch& batch, std::span<float> logits,
                 std::span<SampledToken> sampled) override;

 private:
  const kv::HostKvBuffer& buffer(int32_t pool) const;
  kv::HostKvBuffer& buffer(int32_t pool) {
    return const_cast<kv::HostKvBuffer&>(std::as_const(*this).buffer(pool));
  }

  std::unique_ptr<Model> owned_;
  Model& model_;
  ThreadPool& pool_;
  kv::HostKvBuffer kv_;
  kv::HostBlockMover mover_{kv_};
  std::optional<kv::HostKvBuffer> residual_;
  std::optional<kv::HostBlockMover> residual_mover_;
};

}  // namespace strata::model
