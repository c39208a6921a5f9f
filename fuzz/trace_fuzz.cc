// libFuzzer target: the bench's trace parser (parse_trace_text) and the workload builder
// (build_trace_workload) on arbitrary text. A strata::Error is the expected way to reject input;
// any other exception, a crash, a sanitizer report, or a workload that breaks the documented
// invariants (lengths within max_model_len, token ids within the vocabulary, arrivals in order,
// starting at 0 and ending within a week, so a replay never waits for ever) is a bug.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "bench/cacheable_share.h"
#include "bench/trace.h"
#include "core/check.h"
#include "core/error.h"

namespace {

void check_workload(const strata::bench::Workload& w, const strata::bench::WorkloadLimits& l) {
  double last_arrival = 0.0;
  std::vector<strata::bench::RequestTokens> independent;
  for (const strata::bench::BenchRequest& r : w.requests) {
    STRATA_CHECK(r.output_len >= 1, "output length >= 1");
    STRATA_CHECK(r.planned_prompt_len >= 1, "prompt length >= 1");
    STRATA_CHECK(r.planned_prompt_len + int64_t{r.output_len} <= l.max_model_len,
                 "planned lengths within max_model_len");
    STRATA_CHECK(r.extends_previous ? r.turn_idx > 0 && !r.tokens.empty()
                                    : static_cast<int64_t>(r.tokens.size()) == r.planned_prompt_len,
                 "tokens match the planned prompt");
    STRATA_CHECK(r.arrival_s >= last_arrival, "arrivals in order");
    STRATA_CHECK(r.arrival_s <= strata::bench::kMaxTraceSpanS, "the replay ends within a week");
    STRATA_CHECK(&r != &w.requests.front() || r.arrival_s == 0.0, "the replay starts at once");
    last_arrival = r.arrival_s;
    for (const int32_t t : r.tokens) STRATA_CHECK(t >= 0, "token ids >= 0");
    if (!r.extends_previous) independent.push_back({r.tokens, {}});
  }
  const strata::bench::CacheableShare s = strata::bench::compute_cacheable_share(independent, 16);
  STRATA_CHECK(s.cacheable_tokens >= 0 && s.cacheable_tokens <= s.prompt_tokens,
               "cacheable share within [0, 1]");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<strata::bench::TraceRecord> records;
  try {
    records = strata::bench::parse_trace_text(text, "fuzz");
  } catch (const strata::Error&) {
    return 0;  // rejected with a message: the expected outcome for malformed input
  }
  STRATA_CHECK(!records.empty(), "a parsed trace has requests");
  // Token ids from the trace are checked against the vocabulary later (validate_workload);
  // hash-id and length-only prompts must come out inside it.
  const strata::bench::WorkloadLimits limits{
      .vocab_size = 1000, .max_model_len = 1 << 16, .seed = 1};
  for (const int32_t block_size : {512, 16}) {
    try {
      const strata::bench::Workload w = strata::bench::build_trace_workload(
          records, {.block_size = block_size, .think_s = 0.25}, limits);
      check_workload(w, limits);
    } catch (const strata::Error&) {
    }
  }
  return 0;
}
