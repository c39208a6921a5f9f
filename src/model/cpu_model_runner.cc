#include "model/cpu_model_runner.h"

#include "core/check.h"
#include "kv/block_copy.h"

namespace strata::model {

CpuModelRunner::CpuModelRunner(std::unique_ptr<Model> owned, Model& model, ThreadPool& pool,
                               const kv::KvLayout& layout, int32_t num_blocks,
                               int32_t num_newest_blocks)
    : owned_(std::move(owned)), model_(model), pool_(pool) {
  STRATA_CHECK(kv::needs_newest_blocks_group(layout.spec()) == (num_newest_blocks > 1),
               "an int4 KV pool needs a newest-blocks pool of at least 2 blocks, and only it");
  pools_.push_back(std::make_unique<kv::HostKvBuffer>(layout, num_blocks));
  if (num_newest_blocks > 1) {
    pools_.push_back(std::make_unique<kv::HostKvBuffer>(
        kv::KvLayout(kv::newest_blocks_spec(layout.spec()), layout.block_size()),
        num_newest_blocks));
  }
  for (const auto& p : pools_) {
    movers_.push_back(std::make_unique<kv::HostBlockMover>(*p));
    pool_ptrs_.push_back(p.get());
  }
}

CpuModelRunner::CpuModelRunner(std::unique_ptr<Model> owned, Model& model, ThreadPool& pool,
                               const std::vector<kv::KvLayout>& layouts,
                               const std::vector<int32_t>& num_blocks,
                               std::vector<kv::KvLayerSlot> slots)
    : owned_(std::move(owned)), model_(model), pool_(pool), slots_(std::move(slots)) {
  STRATA_CHECK(!layouts.empty() && layouts.size() == num_blocks.size(),
               "a block count per KV pool");
  STRATA_CHECK(slots_.size() == static_cast<size_t>(model_.config().num_hidden_layers),
               "a KV slot per layer");
  for (size_t g = 0; g < layouts.size(); ++g) {
    pools_.push_back(std::make_unique<kv::HostKvBuffer>(layouts[g], num_blocks[g]));
    movers_.push_back(std::make_unique<kv::HostBlockMover>(*pools_.back()));
    pool_ptrs_.push_back(pools_.back().get());
  }
}

Status CpuModelRunner::forward(const ForwardBatch& batch, std::span<float> logits,
                               std::span<SampledToken> /*sampled: none on the CPU*/) {
  return model_.forward(batch, pool_ptrs_, slots_, logits, pool_);
}

const kv::HostKvBuffer& CpuModelRunner::buffer(int32_t pool) const {
  STRATA_CHECK(pool >= 0 && pool < num_kv_pools(), "no such KV pool");
  return *pools_[static_cast<size_t>(pool)];
}

Status CpuModelRunner::copy_blocks(int32_t pool, std::span<const kv::BlockCopy> copies) {
  if (copies.empty()) return Status::Ok();
  if (pool < 0 || pool >= num_kv_pools()) return Status::InvalidArgument("copies in no KV pool");
  kv::copy_blocks(buffer(pool), copies);
  return Status::Ok();
}

Status CpuModelRunner::copy_slots(std::span<const kv::SlotCopy> copies) {
  if (copies.empty()) return Status::Ok();
  if (!kv::can_copy_slots(buffer(0).layout())) {
    return Status::Unsupported("an INT4 KV cache moves whole blocks only");
  }
  kv::copy_slots(buffer(0), copies);
  return Status::Ok();
}

kv::BlockMover& CpuModelRunner::block_mover(int32_t pool) {
  STRATA_CHECK(pool >= 0 && pool < num_kv_pools(), "no such KV pool");
  return *movers_[static_cast<size_t>(pool)];
}

std::unique_ptr<kv::BlockMover> CpuModelRunner::new_block_mover(int32_t pool) {
  STRATA_CHECK(pool >= 0 && pool < num_kv_pools(), "no such KV pool");
  return std::make_unique<kv::HostBlockMover>(*pools_[static_cast<size_t>(pool)]);
}

}  // namespace strata::model
