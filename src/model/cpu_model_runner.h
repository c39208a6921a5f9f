#pragma once
// CpuModelRunner: the CPU backend's ModelRunner -- a Model (owned or borrowed), the KV pools in
// host memory (one per KV cache group), and the thread pool its kernels spread over (borrowed).
// forward() is Model::forward over the pools; copy_blocks() is one memcpy per block
// (kv/block_copy.h). Two ways to have a second pool:
//   - an INT4 cache: pool 1 is the newest-blocks group, the full-precision newest blocks
//     (kv::newest_blocks_spec's layout, its own block ids), which INT4 layers read beside the
//     codes;
//   - a model whose layers mix sliding-window and full attention (kv::HybridKvLayers): pool 0
//     holds the full-attention layers, pool 1 the windowed ones (kv_layer_slots() says which
//     layer is where).

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kv/host_kv_buffer.h"
#include "model/model.h"
#include "model/model_runner.h"

namespace strata::model {

class CpuModelRunner final : public ModelRunner {
 public:
  // owned may be null (then model is borrowed and must outlive the runner). num_newest_blocks
  // (the null block included): the newest-blocks group's pool size, > 1 exactly when the layout
  // holds an INT4 layer (kv::needs_newest_blocks_group).
  CpuModelRunner(std::unique_ptr<Model> owned, Model& model, ThreadPool& pool,
                 const kv::KvLayout& layout, int32_t num_blocks, int32_t num_newest_blocks = 0);
  // Layers in groups: pool g laid out by layouts[g] with num_blocks[g] blocks, layer l in pool
  // slots[l].group as its layer slots[l].index.
  CpuModelRunner(std::unique_ptr<Model> owned, Model& model, ThreadPool& pool,
                 const std::vector<kv::KvLayout>& layouts, const std::vector<int32_t>& num_blocks,
                 std::vector<kv::KvLayerSlot> slots);

  const Model& model() const { return model_; }

  const ModelConfig& config() const override { return model_.config(); }
  int64_t weight_bytes() const override { return model_.weight_bytes(); }
  int32_t num_kv_pools() const override { return static_cast<int32_t>(pools_.size()); }
  const kv::KvLayout& kv_layout(int32_t pool = 0) const override { return buffer(pool).layout(); }
  int32_t num_blocks(int32_t pool = 0) const override { return buffer(pool).num_blocks(); }
  Status copy_blocks(int32_t pool, std::span<const kv::BlockCopy> copies) override;
  Status copy_slots(std::span<const kv::SlotCopy> copies) override;
  kv::BlockMover& block_mover(int32_t pool = 0) override;
  std::unique_ptr<kv::BlockMover> new_block_mover(int32_t pool = 0) override;
  std::span<const kv::KvLayerSlot> kv_layer_slots() const override { return slots_; }
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
  std::vector<std::unique_ptr<kv::HostKvBuffer>> pools_;
  std::vector<std::unique_ptr<kv::HostBlockMover>> movers_;
  std::vector<kv::HostKvBuffer*> pool_ptrs_;
  std::vector<kv::KvLayerSlot> slots_;  // empty unless the layers live in groups
};

}  // namespace strata::model
