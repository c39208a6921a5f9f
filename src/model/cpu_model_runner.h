#pragma once
// CpuModelRunner: the CPU backend's ModelRunner -- a Model (owned or borrowed), the KV pool in
// host memory, and the thread pool its kernels spread over (borrowed). forward() is
// Model::forward; copy_blocks() is one memcpy per block (kv/block_copy.h).

#include <memory>

#include "core/thread_pool.h"
#include "kv/host_kv_buffer.h"
#include "model/model.h"
#include "model/model_runner.h"

namespace strata::model {

class CpuModelRunner final : public ModelRunner {
 public:
  // owned may be null (then model is borrowed and must outlive the runner).
  CpuModelRunner(std::unique_ptr<Model> owned, Model& model, ThreadPool& pool,
                 const kv::KvLayout& layout, int32_t num_blocks);

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

 private:
  std::unique_ptr<Model> owned_;
  Model& model_;
  ThreadPool& pool_;
  kv::HostKvBuffer kv_;
  kv::HostBlockMover mover_{kv_};
};

}  // namespace strata::model
