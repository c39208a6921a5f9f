#pragma once
// strata::Engine: the C++ API of the serving engine. Requests go in at any time; each step()
// runs one iteration over every running request (continuous batching) and returns what each
// request produced in it (a stream of deltas); cancel() stops a request at once.
//
//   auto engine = strata::Engine::create(config);          // loads the model, sizes the KV pool
//   strata::RequestId id = *(*engine)->submit(request);
//   while ((*engine)->has_unfinished()) {
//     for (const strata::RequestOutput& out : *(*engine)->step()) { ... }
//   }
//
// Scheduling (src/engine/scheduler.h): each step takes the running decodes, then partly done and
// new prefills, under max_num_seqs and max_num_batched_tokens; long prompts are prefilled in
// chunks; a request's cached prefix skips prefill; finished and cancelled requests give their
// blocks back (or to the prefix cache) within the step, and waiting requests take them in the
// same step. When blocks run out the most recently admitted request (lowest priority first under
// the priority policy) is preempted: recomputed later, or swapped to host memory and back.
// n > 1 prefills the prompt once and forks n sequences that share its KV (copy-on-write).
//
// Not thread-safe: one thread submits, cancels and steps (the server's engine thread).

#include <memory>
#include <vector>

#include "strata/engine_config.h"
#include "strata/engine_info.h"
#include "strata/engine_stats.h"
#include "strata/request.h"
#include "strata/status.h"

namespace strata {

class EngineImpl;

class Engine {
 public:
  // Loads config.model_dir (or dummy weights) and builds the engine. InvalidArgument / NotFound
  // for a bad config or checkpoint.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config);
  // Engine::create builds one (src/engine/engine_on_model.h, for a model already loaded).
  explicit Engine(std::unique_ptr<EngineImpl> impl);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. InvalidArgument (nothing queued) for an empty prompt, a token id outside
  // the vocabulary, invalid sampling params, n < 1, or prompt + max_tokens beyond max_model_len
  // or beyond what the whole pool can hold.
  Result<RequestId> submit(EngineRequest request);
  // Compiles a structured-output constraint into the engine's cache of grammars, so that a
  // submit() with it finds it there: the error submit() would give for it (InvalidArgument with
  // the reason: an invalid or unsupported schema or pattern, one past the limits, or a model
  // without tokenizer.json). Thread-safe, unlike the rest of Engine: a server calls it on its
  // request's thread while the engine steps on another, keeping compilation off the step loop.
  Status compile_structured_output(const StructuredOutput& constraint) const;
  // Stops a request now: its blocks are freed (or kept by the prefix cache) before this returns,
  // and the next step() reports it finished and cancelled. Unknown or finished ids are ignored.
  void cancel(RequestId id);

  // Drops every block of the prefix cache, in every KV cache group's pool (the KV tiers keep
  // theirs), so later prompts are computed anew, and, with KV events, publishes AllBlocksCleared
  // at once. Unavailable, changing nothing, while any request is unfinished (its blocks are in
  // use) or the KV tiers are bringing blocks into the pool: retry when idle. Ok with prefix
  // caching off (nothing is cached).
  Status reset_prefix_cache();

  // One iteration: schedule, run the forward pass, sample, return the outputs. An error is
  // internal (the forward pass failed); requests stay queued.
  Result<std::vector<RequestOutput>> step();

  // True while requests are unfinished, and once more after the last one finishes when the KV
  // tiers' write-through policy has blocks to copy down (the next step() copies them: call it
  // now, while idle, not when the next request arrives).
  bool has_unfinished() const;
  const EngineStepStats& last_step() const;
  EngineTotals totals() const;
  // The KV cache groups, group 0 first: one for most models, two for an INT4 cache (its codes,
  // and its newest R blocks at full precision: kind "newest blocks") or a model whose layers mix
  // sliding-window and full attention (its windowed layers: kind "sliding window"). Each with
  // its pool's blocks and the blocks requests hold now.
  std::vector<KvGroupStats> kv_groups() const;

  const EngineConfig& config() const;
  const ModelInfo& model() const;
  const KvCacheInfo& kv_cache() const;
  const WarmUpInfo& warm_up() const;
  // Seconds on the clock the metrics use.
  double now() const;
  // Where decode instances read this prefill instance's blocks (EngineConfig::kv_role kPrefill:
  // kv_peer_listen with its port chosen); empty for the other roles.
  std::string kv_peer_address() const;

 private:
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace strata
