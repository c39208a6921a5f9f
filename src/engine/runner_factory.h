#pragma once
// The runner factory: the model runner an engine steps, on either device, with its KV pools laid
// out and sized by kv::plan_kv_groups, and the KV cache group of each pool. The only code outside
// src/model/cuda that knows whether the build has CUDA.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/kv_quant_check.h"
#include "kv/kv_group.h"
#include "kv/peer_region.h"
#include "model/model.h"
#include "model/model_runner.h"
#include "strata/engine_config.h"

namespace strata::engine {

// What the engine is built from: the runner with its pools, the KV cache group of each pool, and
// what resolving the KV layout reported (the FP8 scales' source, --kv-quant-check's report).
struct BuiltRunner {
  std::unique_ptr<ThreadPool> pool;  // the CPU runner's threads, when the engine owns them
  std::unique_ptr<model::ModelRunner> runner;
  std::vector<kv::KvGroupSpec> groups;  // one per runner pool
  std::string scales_source;
  std::optional<KvQuantCheckReport> quant_check;
};

// The runner config.device names, over the checkpoint in config.model_dir (or dummy weights).
// InvalidArgument for unusable files or options, and for --device cuda in a build without CUDA.
Result<BuiltRunner> make_runner(const EngineConfig& config);

// A CPU runner over a model the caller keeps loaded, on the caller's threads.
Result<BuiltRunner> make_cpu_runner(const EngineConfig& config, model::Model& model,
                                    ThreadPool& pool);

// What config.quantization means for this checkpoint on config.device: auto is fp8 on the GPU
// for FP8 weights scaled per channel or per tensor (not for an MLA model, whose latent products
// take BF16 weights only, nor for matrices whose rows are not multiples of 16 elements), none
// otherwise; none and fp8 are themselves.
WeightQuantization resolve_weight_quantization(const EngineConfig& config,
                                               const model::ModelConfig& model);

// A prefill instance's peer region for config.device: CUDA IPC device memory on the GPU, shared
// memory on the CPU (docs/kv.md, "One machine").
kv::PeerRegionFactory peer_region_factory(const EngineConfig& config);
// What a decode instance opens a prefill instance's region with: shared memory always, CUDA IPC
// where the build has CUDA.
kv::PeerRegionOpener peer_region_opener();

}  // namespace strata::engine
