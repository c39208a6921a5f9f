#include "model/cpu_model_runner.h"

#include "kv/block_copy.h"

namespace strata::model {

CpuModelRunner::CpuModelRunner(std::unique_ptr<Model> owned, Model& model, ThreadPool& pool,
                               const kv::KvLayout& layout, int32_t num_blocks)
    : owned_(std::move(owned)), model_(model), pool_(pool), kv_(layout, num_blocks) {}

Status CpuModelRunner::forward(const ForwardBatch& batch, std::span<float> logits,
                               std::span<SampledToken> /*sampled: none on the CPU*/) {
  return model_.forward(batch, kv_, logits, pool_);
}

Status CpuModelRunner::copy_blocks(std::span<const kv::BlockCopy> copies) {
  kv::copy_blocks(kv_, copies);
  return Status::Ok();
}

}  // namespace strata::model
