// build_trace_workload: parsed trace records into a Workload. Lengths are planned and checked
// first, tokens made after, so a trace of absurd lengths fails before it allocates.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "bench/random.h"
#include "bench/trace.h"
#include "core/error.h"

namespace strata::bench {
namespace {

constexpr uint64_t kHashBlockStream = 0x4a5b;   // hash id h -> BenchRng(seed ^ this, h)
constexpr uint64_t kRandomPromptStream = 7000;  // + line, for input_length-only prompts

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The token block a hash id stands for: a function of (seed, id) only, so equal ids give equal
// blocks in every request; a partial last block is a prefix of the id's full block.
void append_hash_block(std::vector<int32_t>& out, int64_t hash_id, int32_t len, int32_t block_size,
                       const WorkloadLimits& limits) {
  BenchRng rng(limits.seed ^ kHashBlockStream, static_cast<uint64_t>(hash_id));
  for (int32_t i = 0; i < block_size; ++i) {
    const auto t = static_cast<int32_t>(rng.uniform_int(0, limits.vocab_size - 1));
    if (i < len) out.push_back(t);
  }
}

struct Plan {
  int64_t prompt_len = 0;  // the whole prompt, planned
  int64_t new_len = 0;     // tokens this request adds (all of them unless it extends)
  int32_t output_len = 0;
  bool extends = false;
};

Plan plan_record(const TraceRecord& r, const TraceBuildConfig& c, int64_t previous_context,
                 bool has_previous) {
  const auto fail = [&](const std::string& m) {
    throw Error("trace line " + std::to_string(r.line) + ": " + m);
  };
  Plan p;
  p.output_len = static_cast<int32_t>(
      std::clamp(std::round(r.output_length * c.output_scale), 1.0, double{int64_t{1} << 30}));
  if (!r.input_ids.empty()) {
    p.prompt_len = p.new_len = static_cast<int64_t>(r.input_ids.size());
  } else if (!r.hash_ids.empty()) {
    const auto n = static_cast<int64_t>(r.hash_ids.size());
    if (ceil_div(*r.input_length, c.hash_block_size) != n) {
      fail(std::to_string(n) + " hash_ids for input_length " + std::to_string(*r.input_length) +
           " (expected " + std::to_string(ceil_div(*r.input_length, c.hash_block_size)) +
           ": one per " + std::to_string(c.hash_block_size) + "-token block)");
    }
    const int64_t last = *r.input_length - (n - 1) * c.hash_block_size;
    p.prompt_len = p.new_len =
        (n - 1) * c.block_size + ceil_div(last * c.block_size, c.hash_block_size);
  } else {
    const int64_t len = ceil_div(*r.input_length * c.block_size, c.hash_block_size);
    p.extends = has_previous && len > previous_context;
    p.prompt_len = len;
    p.new_len = p.extends ? len - previous_context : len;
  }
  return p;
}

}  // namespace

Workload build_trace_workload(const std::vector<TraceRecord>& records, const TraceBuildConfig& c,
                              const WorkloadLimits& limits) {
  if (c.hash_block_size < 1 || c.block_size < 1) throw Error("trace block sizes must be >= 1");
  if (!(c.output_scale > 0) || !std::isfinite(c.output_scale)) {
    throw Error("--trace-output-scale must be positive");
  }
  if (!(c.time_scale >= 0) || !std::isfinite(c.time_scale)) {
    throw Error("--trace-time-scale must be >= 0");
  }
  if (records.empty()) throw Error("the trace has no requests");
  if (limits.vocab_size < 1) throw Error("the model has an empty vocabulary");
  const size_t count = c.max_requests > 0
                           ? std::min(records.size(), static_cast<size_t>(c.max_requests))
                           : records.size();
  Workload w;
  w.name = "trace";
  w.has_arrival_times = records.front().arrival_s.has_value();
  const double first_arrival_s = records.front().arrival_s.value_or(0.0);
  std::map<std::string, std::pair<int64_t, int64_t>> sessions;  // id -> (index, context)
  std::map<std::string, int32_t> turns;
  std::vector<Plan> plans;
  for (size_t i = 0; i < count; ++i) {
    const TraceRecord& r = records[i];
    BenchRequest q;
    q.source_line = r.line;
    q.priority = r.priority;
    q.arrival_s = (r.arrival_s.value_or(0.0) - first_arrival_s) * c.time_scale;
    if (q.arrival_s > kMaxTraceSpanS) {
      char scale[32];
      std::snprintf(scale, sizeof(scale), "%g", c.time_scale);
      throw Error("trace line " + std::to_string(r.line) + ": --trace-time-scale " + scale +
                  " makes the replay longer than a week");
    }
    int64_t previous_context = 0;
    bool has_previous = false;
    if (r.session_id) {
      auto [it, inserted] = sessions.try_emplace(*r.session_id, sessions.size(), 0);
      q.session_idx = it->second.first;
      q.turn_idx = turns[*r.session_id]++;
      has_previous = !inserted;
      previous_context = it->second.second;
      q.think_s = has_previous ? c.think_s : 0.0;
    }
    const Plan p = plan_record(r, c, previous_context, has_previous);
    if (p.prompt_len + p.output_len > limits.max_model_len) {
      throw Error("trace line " + std::to_string(r.line) + ": prompt " +
                  std::to_string(p.prompt_len) + " + output " + std::to_string(p.output_len) +
                  " tokens exceed the max model length " + std::to_string(limits.max_model_len) +
                  " (scale the trace with --trace-block-size, or raise --max-model-len)");
    }
    if (r.session_id) sessions[*r.session_id].second = p.prompt_len + p.output_len;
    q.extends_previous = p.extends;
    q.output_len = p.output_len;
    q.planned_prompt_len = static_cast<int32_t>(p.prompt_len);
    w.requests.push_back(std::move(q));
    plans.push_back(p);
  }
  w.num_sessions = static_cast<int64_t>(sessions.size());
  // Every length fits: now make the tokens.
  for (size_t i = 0; i < count; ++i) {
    const TraceRecord& r = records[i];
    std::vector<int32_t>& tokens = w.requests[i].tokens;
    tokens.reserve(static_cast<size_t>(plans[i].new_len));
    if (!r.input_ids.empty()) {
      tokens = r.input_ids;
    } else if (!r.hash_ids.empty()) {
      int64_t left = plans[i].prompt_len;
      for (const int64_t h : r.hash_ids) {
        const auto len = static_cast<int32_t>(std::min<int64_t>(left, c.block_size));
        append_hash_block(tokens, h, len, c.block_size, limits);
        left -= len;
      }
    } else {
      BenchRng rng(limits.seed, kRandomPromptStream + static_cast<uint64_t>(r.line));
      for (int64_t k = 0; k < plans[i].new_len; ++k) {
        tokens.push_back(static_cast<int32_t>(rng.uniform_int(0, limits.vocab_size - 1)));
      }
    }
  }
  w.description = std::to_string(count) + " requests (" + std::to_string(w.num_sessions) +
                  " sessions), " +
                  (w.has_arrival_times ? "timestamps x " + std::to_string(c.time_scale)
                                       : std::string("no timestamps (offline)")) +
                  ", " + std::to_string(c.block_size) + " tokens per " +
                  std::to_string(c.hash_block_size) + "-token hash block";
  return w;
}

}  // namespace strata::bench
