#include "model/cpu_model_runner.h"

#include "core/check.h"
#include "kv/block_copy.h"

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

const kv::HostKvBuffer& CpuModelRunner::buffer(int32_t pool) const {
  STRATA_CHECK(pool >= 0 && pool < num_kv_pools(), "no such KV pool");
  return pool == 0 ? kv_ : *residual_;
}

Status CpuModelRunner::copy_blocks(int32_t pool, std::span<const kv::BlockCopy> copies) {
  if (copies.empty()) return Status::Ok();
  if (pool < 0 || pool >= num_kv_pools()) return Status::InvalidArgument("copies in no KV pool");
  kv::copy_blocks(buffer(pool), copies);
  return Status::Ok();
}

kv::BlockMover& CpuModelRunner::block_mover(int32_t pool) {
  STRATA_CHECK(pool >= 0 && pool < num_kv_pools(), "no such KV pool");
  return pool == 0 ? mover_ : *residual_mover_;
}

}  // namespace strata::model
