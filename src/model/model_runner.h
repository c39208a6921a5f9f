#pragma once
// ModelRunner: what the engine's step calls -- one backend's forward pass over the KV pool that
// the backend owns (DESIGN.md, "One step"). The CPU runner (cpu_model_runner.h) holds the pool in
// host memory and runs Model::forward; the GPU runner (cuda_model.h) holds it in device memory.
// Block ids mean the same on both: the pool layout is src/kv/kv_layout.h's, so the block pool,
// prefix cache and copy-on-write above it do not know which backend runs.
//
// Not thread-safe: the engine calls it from its step thread only.

#include <cstdint>
#include <span>

#include "core/status.h"
#include "kv/block_mover.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_layout.h"
#include "model/hf_config.h"
#include "model/model.h"

namespace strata::model {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const kv::KvLayout& kv_layout() const = 0;
  // Blocks in the pool, the null block included.
  virtual int32_t num_blocks() const = 0;
  // Bytes of all weights as the backend holds them.
  virtual int64_t weight_bytes() const = 0;

  // True when forward() can sample rows where the logits are (batch.sample_rows).
  virtual bool samples_on_device() const = 0;
  // Runs the batch (its slots and block ids inside this pool), writing logits
  // [logits_rows, vocab] on the host and, for each of batch.sample_rows, the drawn token into
  // sampled[i]. Errors as Model::forward.
  virtual Status forward(const ForwardBatch& batch, std::span<float> logits,
                         std::span<SampledToken> sampled) = 0;
  // Copy-on-write copies, run before the step that writes the destination blocks.
  virtual Status copy_blocks(std::span<const kv::BlockCopy> copies) = 0;
  // Moves whole blocks between this pool and host memory (swap preemption's copies, on the
  // swap space's copy thread).
  virtual kv::BlockMover& block_mover() = 0;

  // ---- INT4 caches' full-precision residual pool (docs/kv.md, "The residual pool") ----------
  // Backends without one keep these defaults.
  // Blocks in the residual pool, the null block included; 0 = none.
  virtual int32_t num_residual_blocks() const { return 0; }
  // Its layout (only when num_residual_blocks() > 0).
  virtual const kv::KvLayout* residual_layout() const { return nullptr; }
  // The residual pool's copy-on-write copies (KvCacheManager::take_pending_residual_copies),
  // run before the step that writes the destination blocks.
  virtual Status copy_residual_blocks(std::span<const kv::BlockCopy> copies) {
    return copies.empty() ? Status::Ok()
                          : Status::Unsupported("this backend has no residual KV pool");
  }
  // Moves whole residual blocks between the residual pool and host memory (swap); null when
  // there is no residual pool.
  virtual kv::BlockMover* residual_block_mover() { return nullptr; }
};

}  // namespace strata::model
