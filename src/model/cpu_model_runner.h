#pragma once
// CpuModelRunner: the CPU backend's ModelRunner -- a Model (owned or borrowed), the KV pool in
// host memory, and the thread pool its kernels spread over (borrowed). forward() is
// Model::forward; copy_blocks() is one memcpy per block (kv/block_copy.h). An INT4 pool comes
// with its full-precision residual pool (kv::residual_spec's layout, its own block ids), which
// the runner owns too: forward() passes it to Model::forward, copy_residual_blocks() copies
// its blocks, residual_block_mover() moves them.

#include <memory>
#include <optional>

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
  const kv::KvLayout& kv_layout() const override { return kv_.layout(); }
  int32_t num_blocks() const override { return kv_.num_blocks(); }
  int64_t weight_bytes() const override { return model_.weight_bytes(); }
  bool samples_on_device() const override { return false; }
  Status forward(const ForwardBatch& batch, std::span<float> logits,
                 std::span<SampledToken> sampled) override;
  Status copy_blocks(std::span<const kv::BlockCopy> copies) override;
  kv::BlockMover& block_mover() override { return mover_; }
  int32_t num_residual_blocks() const override { return residual_ ? residual_->num_blocks() : 0; }
  const kv::KvLayout* residual_layout() const override {
    return residual_ ? &residual_->layout() : nullptr;
  }
  Status copy_residual_blocks(std::span<const kv::BlockCopy> copies) override;
  kv::BlockMover* residual_block_mover() override {
    return residual_mover_ ? &*residual_mover_ : nullptr;
  }

 private:
  std::unique_ptr<Model> owned_;
  Model& model_;
  ThreadPool& pool_;
  kv::HostKvBuffer kv_;
  kv::HostBlockMover mover_{kv_};
  std::optional<kv::HostKvBuffer> residual_;
  std::optional<kv::HostBlockMover> residual_mover_;
};

}  // namespace strata::model
