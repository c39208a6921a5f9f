#include "bench/workload.h"

#include <cmath>

#include "bench/random.h"
#include "core/error.h"

namespace strata::bench {

std::string BenchRequest::describe(size_t request_idx) const {
  if (source_line > 0) return "trace line " + std::to_string(source_line);
  return "request " + std::to_string(request_idx);
}

int64_t Workload::total_planned_prompt_tokens() const {
  int64_t n = 0;
  for (const BenchRequest& r : requests) n += r.planned_prompt_len;
  return n;
}

int64_t Workload::total_output_tokens() const {
  int64_t n = 0;
  for (const BenchRequest& r : requests) n += r.output_len;
  return n;
}

void assign_poisson_arrivals(Workload& workload, double requests_per_s, uint64_t seed) {
  // A stream apart from the ones that drew the lengths, so the rate does not change the requests.
  BenchRng rng(seed, /*stream=*/0xa77);
  double t = 0.0;
  for (BenchRequest& r : workload.requests) {
    if (r.turn_idx > 0) {
      r.arrival_s = 0.0;  // gated by its predecessor's finish
      continue;
    }
    if (std::isfinite(requests_per_s)) t += rng.exponential(requests_per_s);
    r.arrival_s = std::isfinite(requests_per_s) ? t : 0.0;
  }
  workload.has_arrival_times = std::isfinite(requests_per_s);
}

void validate_workload(const Workload& workload, int64_t max_model_len, int64_t vocab_size) {
  if (workload.requests.empty()) throw Error("the " + workload.name + " workload has no requests");
  for (size_t i = 0; i < workload.requests.size(); ++i) {
    const BenchRequest& r = workload.requests[i];
    const std::string where = r.describe(i);
    if (r.output_len < 1) throw Error(where + ": output length must be at least 1");
    if (r.planned_prompt_len < 1) throw Error(where + ": the prompt is empty");
    const int64_t total = int64_t{r.planned_prompt_len} + r.output_len;
    if (total > max_model_len) {
      throw Error(where + ": prompt " + std::to_string(r.planned_prompt_len) + " + output " +
                  std::to_string(r.output_len) + " tokens exceed the max model length " +
                  std::to_string(max_model_len) + " (--max-model-len)");
    }
    for (const int32_t id : r.tokens) {
      if (id < 0 || id >= vocab_size) {
        throw Error(where + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(vocab_size) + ")");
      }
    }
  }
}

}  // namespace strata::bench
