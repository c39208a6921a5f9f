#pragma once
// An engine over a model already loaded, borrowing it and a thread pool (tests, benchmarks,
// `strata eval`: several engines on one model). Internal: an embedder loads through
// Engine::create.

#include <memory>

#include "core/status.h"

namespace strata {
class Engine;
struct EngineConfig;
class ThreadPool;
namespace model {
class Model;
}
}  // namespace strata

namespace strata::engine {

// The CPU engine of config over model (config.model_dir and the weight options are not read;
// config.device must be kCpu). Errors as Engine::create's.
Result<std::unique_ptr<Engine>> create_engine(model::Model& model, ThreadPool& pool,
                                              const EngineConfig& config);

}  // namespace strata::engine
