#include "model/cpu_model_runner.h"

#include "core/check.h"
#include "kv/block_copy.h"
#include "kv/kv_cache_manager.h"

namespace strata::model {

CpuModelRunner::CpuModelRunner(std::unique_ptr<Model> owned, Model& model, ThreadPool& pool,
                               const kv::KvLayout& layout, int32_t num_blocks,
                               int32_t num_residual_blocks)
    : owned_(std::move(owned)), model_(model), pool_(pool), kv_(layout, num_blocks) {
  STRATA_CHECK(kv::needs_residual_pool(layout.spec()) == (num_residual_blocks > 1),
               "an int4 KV pool needs a residual pool of at least 2 blocks, and only it");
  if (num_residual_blocks > 1) {
    residual_.emplace(kv::KvLayout(kv::residual_spec(layout.spec()), layout.block_size()),
                      num_residual_blocks);
    residual_mover_.emplace(*residual_);
  }
}

Status CpuModelRunner::forward(const ForwardBatch& batch, std::span<float> logits,
                               std::span<SampledToken> /*sampled: none on the CPU*/) {
  return model_.forward(batch, kv_, logits, pool_, residual_ ? &*residual_ : nullptr);
}

Status CpuModelRunner::copy_residual_blocks(std::span<const kv::BlockCopy> copies) {
  if (copies.empty()) return Status::Ok();
  if (!residual_) return Status::InvalidArgument("residual copies without a residual pool");
  kv::copy_blocks(*residual_, copies);
  return Status::Ok();
}

Status CpuModelRunner::copy_blocks(std::span<const kv::BlockCopy> copies) {
  kv::copy_blocks(kv_, copies);
  return Status::Ok();
}

}  // namespace strata::model
