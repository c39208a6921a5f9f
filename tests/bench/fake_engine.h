#pragma once
// A scripted BenchEngine and a manual clock for the driver tests: every running request gets
// one token per step (its id * 100 + position, so outputs are recognisable), a step takes
// step_s on the clock, and at most max_running requests run at once (the rest wait, FCFS); a
// request whose id is in fail_after fails (TokenEvent::error) after that many tokens.

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_engine.h"

namespace strata::bench::testing {

class ManualClock final : public BenchClock {
 public:
  double now() override { return t; }
  void sleep_until(double until) override { t = std::max(t, until); }
  double t = 100.0;  // not 0, so the driver must subtract its start
};

class FakeEngine final : public BenchEngine {
 public:
  explicit FakeEngine(ManualClock& clock) : clock_(clock) {}

  struct Submitted {
    std::vector<int32_t> prompt;
    SubmitRequest request;  // its prompt span is not valid after submit()
    double time = 0.0;
  };

  Result<uint64_t> submit(const SubmitRequest& r) override {
    if (static_cast<int64_t>(r.prompt.size()) > refuse_longer_than) {
      return Status::InvalidArgument("prompt too long");
    }
    const uint64_t id = next_id_++;
    submitted[id] = {{r.prompt.begin(), r.prompt.end()}, r, clock_.t};
    waiting_.push_back(id);
    return id;
  }

  Status step(std::vector<TokenEvent>& events, StepRecord& stats) override {
    if (stuck) return Status::Ok();
    while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < max_running) {
      running_.push_back(waiting_.front());
      waiting_.pop_front();
    }
    clock_.t += step_s;
    stats.num_scheduled_seqs = static_cast<int32_t>(running_.size());
    stats.schedule_seconds = step_s / 100;
    stats.step_seconds = step_s;
    stats.capacity_token_slots = 1000;
    for (auto it = running_.begin(); it != running_.end();) {
      Submitted& s = submitted[*it];
      if (const auto f = fail_after.find(*it);
          f != fail_after.end() && f->second == produced_[*it]) {
        TokenEvent e;
        e.id = *it;
        e.finished = true;
        e.error = "HTTP 400: refused";
        events.push_back(e);
        it = running_.erase(it);
        continue;
      }
      const auto produced = static_cast<int32_t>(produced_[*it]++);
      TokenEvent e;
      e.id = *it;
      e.new_tokens = {static_cast<int32_t>(*it * 100 + produced)};
      const int32_t len =
          stop_after > 0 ? std::min(stop_after, s.request.max_tokens) : s.request.max_tokens;
      stats.live_token_slots += static_cast<int64_t>(s.prompt.size()) + produced + 1;
      e.finished = produced + 1 >= len;
      events.push_back(e);
      it = e.finished ? running_.erase(it) : it + 1;
    }
    stats.num_running = static_cast<int32_t>(running_.size());
    stats.num_waiting = static_cast<int32_t>(waiting_.size());
    stats.num_used_blocks = static_cast<int32_t>((stats.live_token_slots + 15) / 16);
    ++counters_.num_steps;
    return Status::Ok();
  }

  bool has_unfinished() const override { return !running_.empty() || !waiting_.empty(); }
  EngineTotals counters() const override { return counters_; }

  std::map<uint64_t, Submitted> submitted;
  double step_s = 0.01;
  int32_t max_running = 1 << 20;
  int32_t stop_after = 0;  // > 0: every request stops (EOS) after this many tokens
  int64_t refuse_longer_than = 1 << 30;
  bool stuck = false;  // steps run nothing
  std::map<uint64_t, int64_t> fail_after;  // request id -> tokens it gets before it fails

 private:
  ManualClock& clock_;
  uint64_t next_id_ = 1;
  std::deque<uint64_t> waiting_;
  std::vector<uint64_t> running_;
  std::map<uint64_t, int64_t> produced_;
  EngineTotals counters_;
};

}  // namespace strata::bench::testing
