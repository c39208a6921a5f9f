#include "eval/needle_run.h"

#include <unordered_map>
#include <utility>

#include "strata/engine.h"

namespace strata::eval {
namespace {

void cancel_all(Engine& engine, const std::unordered_map<RequestId, size_t>& ids) {
  for (const auto& [id, index] : ids) engine.cancel(id);
  while (engine.has_unfinished()) {
    if (!engine.step().ok()) break;
  }
}

}  // namespace

Result<std::vector<NeedleOutcome>> run_needle(Engine& engine,
                                              const std::vector<NeedlePrompt>& prompts,
                                              NeedleProgress progress) {
  std::vector<NeedleOutcome> out(prompts.size());
  std::unordered_map<RequestId, size_t> index_of;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r;
    r.prompt = prompts[i].prompt;
    r.params.temperature = 0.0f;
    r.params.max_tokens = static_cast<int32_t>(prompts[i].answer.size());
    r.params.ignore_eos = true;
    Result<RequestId> id = engine.submit(std::move(r));
    if (!id.ok()) {
      cancel_all(engine, index_of);
      return Status::InvalidArgument("prompt " + std::to_string(i) + " (context " +
                                     std::to_string(prompts[i].context) +
                                     "): " + id.status().message());
    }
    index_of.emplace(*id, i);
  }
  int64_t done = 0;
  while (engine.has_unfinished()) {
    Result<std::vector<RequestOutput>> step = engine.step();
    if (!step.ok()) {
      cancel_all(engine, index_of);
      return Status::Internal("engine step failed: " + step.status().message());
    }
    for (const RequestOutput& o : *step) {
      const size_t i = index_of.at(o.id);
      for (const CompletionDelta& d : o.deltas) {
        out[i].output_ids.insert(out[i].output_ids.end(), d.token_ids.begin(), d.token_ids.end());
      }
      if (o.finished) {
        out[i].correct = out[i].output_ids == prompts[i].answer;
        index_of.erase(o.id);
        if (progress) progress(++done, static_cast<int64_t>(prompts.size()));
      }
    }
  }
  return out;
}

}  // namespace strata::eval
