#pragma once
// ModelRunner: what the engine's step calls -- one backend's forward pass over the KV pool that
// the backend owns (docs/architecture.md, "One step"). The CPU runner (cpu_model_runner.h) holds the pool in
// host memory and runs Model::forward; the GPU runner (cuda_model.h) holds it in device memory.
// Block ids mean the same on both: the pool layout is src/kv/kv_layout.h's, so the block pool,
// prefix cache and copy-on-write above it do not know which backend runs.
//
// Not thread-safe: the engine calls it from its step thread only.

#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "kv/block_mover.h"
#include "kv/kv_group.h"
#include "kv/kv_group_manager.h"
#include "kv/kv_layout.h"
#include "model/hf_config.h"
#include "model/model.h"

namespace strata::model {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  // Bytes of all weights as the backend holds them.
  virtual int64_t weight_bytes() const = 0;

  // ---- KV pools: one per KV cache group (kv/kv_group.h), in the KvCacheManager's order ---------
  // Pool 0 holds every layer's cache (an INT4 layer's codes); an INT4 cache's full-precision
  // newest blocks are pool 1, the newest-blocks group (docs/kv.md, "INT4's newest-blocks group").
  // Block ids of pool g mean the same to the manager's group g and to the runner.
  virtual int32_t num_kv_pools() const = 0;
  virtual const kv::KvLayout& kv_layout(int32_t pool = 0) const = 0;
  // Blocks in the pool, the null block included.
  virtual int32_t num_blocks(int32_t pool = 0) const = 0;
  // Copy-on-write copies within one pool, run before the step that writes the destination blocks.
  virtual Status copy_blocks(int32_t pool, std::span<const kv::BlockCopy> copies) = 0;
  // Token eviction's compaction (kv::KvCacheManager::compact_tokens): copies each token row --
  // every layer's K and V at a slot -- within pool 0, in order, before the pool allocates again.
  // Unsupported on a backend without it (the GPU runner for now: the engine refuses token-level
  // eviction there).
  virtual Status copy_slots(std::span<const kv::SlotCopy> copies) {
    return copies.empty() ? Status::Ok()
                          : Status::Unsupported("this backend cannot move single KV tokens");
  }
  // Moves whole blocks between one pool and host memory (swap preemption's copies, on the swap
  // space's copy thread).
  virtual kv::BlockMover& block_mover(int32_t pool = 0) = 0;
  // Another mover over the same pool, independent of block_mover's (on the GPU its own copy
  // stream and host mappings): for a second user that copies from its own thread, the KV tiers
  // beside swap preemption. Valid while the runner lives.
  virtual std::unique_ptr<kv::BlockMover> new_block_mover(int32_t pool = 0) = 0;

  // Models whose layers live in different pools (kv::HybridKvLayers): layer l's pool and index
  // there. Empty when every layer lives in pool 0 (pool 1, if any, then holds INT4's newest
  // blocks at full precision).
  virtual std::span<const kv::KvLayerSlot> kv_layer_slots() const { return {}; }

  // True when forward() can sample rows where the logits are (batch.sample_rows).
  virtual bool samples_on_device() const = 0;
  // Runs the batch (its slots and block ids inside these pools), writing logits
  // [logits_rows, vocab] on the host and, for each of batch.sample_rows, the drawn token into
  // sampled[i]. Errors as Model::forward.
  virtual Status forward(const ForwardBatch& batch, std::span<float> logits,
                         std::span<SampledToken> sampled) = 0;
};

}  // namespace strata::model
