#include "bench/driver.h"

#include <algorithm>
#include <chrono>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "core/error.h"

namespace strata::bench {

double SteadyClock::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void SteadyClock::sleep_until(double t) {
  const double wait = t - now();
  if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
}

namespace {

// One run's mutable state; run_workload's phases are its methods.
class Run {
 public:
  Run(const Workload& w, BenchEngine& engine, BenchClock& clock, const DriverOptions& o)
      : w_(w), engine_(engine), clock_(clock), o_(o), trie_(o.block_size) {
    const size_t n = w.requests.size();
    result_.requests.resize(n);
    prompts_.resize(n);
    outputs_.resize(n);
    next_turn_.assign(n, -1);
    std::unordered_map<int64_t, size_t> last_of_session;
    for (size_t i = 0; i < n; ++i) {
      const BenchRequest& r = w.requests[i];
      if (r.session_idx >= 0) {
        auto [it, first] = last_of_session.try_emplace(r.session_idx, i);
        if (!first) {
          next_turn_[it->second] = static_cast<int64_t>(i);
          it->second = i;
          continue;  // ready only when its predecessor finishes
        }
      }
      ready_.emplace(r.arrival_s, i);
    }
  }

  RunResult run() {
    start_ = clock_.now();
    const auto total = static_cast<int64_t>(w_.requests.size());
    while (num_finished_ < total) {
      submit_ready(elapsed());
      if (engine_.has_unfinished()) {
        step();
      } else if (!ready_.empty()) {
        clock_.sleep_until(start_ + ready_.top().first);
      } else {
        throw Error("the engine finished with " + std::to_string(total - num_finished_) +
                    " requests unaccounted for");
      }
    }
    result_.counters = engine_.counters();
    return std::move(result_);
  }

 private:
  using Ready = std::pair<double, size_t>;  // (arrival, request index), earliest first

  double elapsed() { return clock_.now() - start_; }

  void submit_ready(double now) {
    while (!ready_.empty() && ready_.top().first <= now) {
      const auto [arrival, idx] = ready_.top();
      ready_.pop();
      submit(idx, arrival, now);
    }
  }

  void submit(size_t idx, double arrival, double now) {
    const BenchRequest& r = w_.requests[idx];
    std::vector<int32_t>& prompt = prompts_[idx];
    if (r.extends_previous) {
      const auto pred = predecessor_.find(idx);
      STRATA_CHECK(pred != predecessor_.end(), "a continuing turn without its predecessor");
      const size_t prev = pred->second;
      prompt = std::move(prompts_[prev]);
      prompt.insert(prompt.end(), outputs_[prev].begin(), outputs_[prev].end());
      outputs_[prev] = {};
    }
    prompt.insert(prompt.end(), r.tokens.begin(), r.tokens.end());
    predecessor_.erase(idx);
    SubmitRequest s;
    s.prompt = prompt;
    s.max_tokens = r.output_len;
    s.ignore_eos = o_.ignore_eos;
    s.priority = r.priority;
    s.seed = o_.seed + idx;
    Result<uint64_t> id = engine_.submit(s);
    if (!id.ok()) {
      throw Error(r.describe(idx) + ": the engine refused it: " + id.status().message());
    }
    ids_.emplace(*id, idx);
    RequestRecord& rec = result_.requests[idx];
    rec.arrival_s = arrival;
    rec.submit_s = now;
    last_submit_s_ = now;
    rec.prompt_len = static_cast<int32_t>(prompt.size());
    rec.output_len = r.output_len;
    result_.num_prompt_tokens += rec.prompt_len;
    result_.cacheable.prompt_tokens += rec.prompt_len;
    result_.cacheable.cacheable_tokens += trie_.cacheable_tokens(prompt);
    trie_.add(prompt);
  }

  void step() {
    events_.clear();
    StepRecord stats;
    if (Status s = engine_.step(events_, stats); !s.ok()) {
      throw Error("engine step failed: " + s.message());
    }
    const double t = elapsed();
    stats.time_s = t;
    if (stats.num_scheduled_seqs > 0) {
      result_.steps.push_back(stats);
    } else {
      ++result_.num_idle_steps;
    }
    for (TokenEvent& e : events_) record(e, t);
    if (stats.num_scheduled_seqs > 0 || !events_.empty()) {
      last_progress_s_ = t;
    } else if (t - std::max(last_progress_s_, last_submit_s_) > o_.stall_timeout_s) {
      throw Error("the engine ran nothing for " + std::to_string(o_.stall_timeout_s) + " s with " +
                  std::to_string(ids_.size()) + " requests unfinished");
    }
    if (stats.num_scheduled_seqs == 0 && events_.empty()) {
      // Nothing ran (a static batch is still gathering): wait a little, not past an arrival.
      double until = t + o_.idle_wait_s;
      if (!ready_.empty()) until = std::min(until, ready_.top().first);
      clock_.sleep_until(start_ + until);
    }
    if (o_.on_progress) {
      o_.on_progress({num_finished_, static_cast<int64_t>(w_.requests.size()),
                      result_.num_output_tokens, stats.num_running, stats.num_waiting, t});
    }
  }

  void record(TokenEvent& e, double t) {
    const auto it = ids_.find(e.id);
    if (it == ids_.end()) throw Error("the engine returned an unknown request id");
    const size_t idx = it->second;
    const BenchRequest& r = w_.requests[idx];
    RequestRecord& rec = result_.requests[idx];
    const auto k = static_cast<int32_t>(e.new_tokens.size());
    if (k > 0) {
      if (rec.num_output_tokens == 0) {
        rec.first_token_s = t;
        result_.inter_token_s.insert(result_.inter_token_s.end(), k - 1, 0.0);
      } else {
        result_.inter_token_s.insert(result_.inter_token_s.end(), k, (t - last_token_s_[idx]) / k);
      }
      last_token_s_[idx] = t;
      rec.num_output_tokens += k;
      result_.num_output_tokens += k;
      outputs_[idx].insert(outputs_[idx].end(), e.new_tokens.begin(), e.new_tokens.end());
    }
    if (!e.finished) return;
    if (e.cancelled) throw Error(r.describe(idx) + " was cancelled by the engine");
    if (!e.error.empty()) {
      // As a serving benchmark counts a failed request: the run goes on (a session's next turn
      // too, after what this one received) and the failure is reported, not timed.
      rec.failed = true;
      if (result_.num_failed++ == 0) result_.first_failure = r.describe(idx) + ": " + e.error;
      ids_.erase(it);
      finish(idx, t);
      return;
    }
    if (rec.num_output_tokens > r.output_len ||
        (o_.ignore_eos && rec.num_output_tokens != r.output_len)) {
      throw Error(r.describe(idx) + ": asked for " + std::to_string(r.output_len) +
                  " output tokens, got " + std::to_string(rec.num_output_tokens));
    }
    if (rec.num_output_tokens < r.output_len) ++result_.num_stopped_early;
    ids_.erase(it);
    finish(idx, t);
  }

  void finish(size_t idx, double t) {
    RequestRecord& rec = result_.requests[idx];
    rec.finish_s = t;
    result_.duration_s = std::max(result_.duration_s, t);
    ++num_finished_;
    last_token_s_.erase(idx);
    // Its K/V now covers prompt + output but the last token (never computed).
    std::vector<int32_t> kv = prompts_[idx];
    if (!outputs_[idx].empty()) kv.insert(kv.end(), outputs_[idx].begin(), outputs_[idx].end() - 1);
    trie_.add(kv);
    const int64_t next = next_turn_[idx];
    if (next < 0) {
      prompts_[idx] = {};
      outputs_[idx] = {};
      return;
    }
    const BenchRequest& n = w_.requests[static_cast<size_t>(next)];
    predecessor_[static_cast<size_t>(next)] = idx;
    if (!n.extends_previous) {
      prompts_[idx] = {};
      outputs_[idx] = {};
    }
    ready_.emplace(std::max(n.arrival_s, t + n.think_s), static_cast<size_t>(next));
  }

  const Workload& w_;
  BenchEngine& engine_;
  BenchClock& clock_;
  const DriverOptions& o_;
  PrefixBlockTrie trie_;
  RunResult result_;
  double start_ = 0.0;
  double last_progress_s_ = 0.0;  // the last step that ran something
  double last_submit_s_ = 0.0;
  int64_t num_finished_ = 0;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready_;
  std::vector<std::vector<int32_t>> prompts_, outputs_;
  std::vector<int64_t> next_turn_;                  // the session's next request, or -1
  std::unordered_map<size_t, size_t> predecessor_;  // ready turn -> its finished predecessor
  std::unordered_map<uint64_t, size_t> ids_;        // engine id -> request index
  std::unordered_map<size_t, double> last_token_s_;
  std::vector<TokenEvent> events_;
};

}  // namespace

RunResult run_workload(const Workload& workload, BenchEngine& engine, BenchClock& clock,
                       const DriverOptions& options) {
  return Run(workload, engine, clock, options).run();
}

}  // namespace strata::bench
