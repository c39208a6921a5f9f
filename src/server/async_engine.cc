#include "server/async_engine.h"

#include <algorithm>
#include <future>
#include <utility>

namespace strata::server {

void RequestStream::push(RequestOutput output) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = finished_ || output.finished;
    pending_.push_back(std::move(output));
  }
  cv_.notify_all();
}

bool RequestStream::next(std::vector<RequestOutput>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return !pending_.empty() || finished_; });
  while (!pending_.empty()) {
    out.push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  return !finished_;
}

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine)
    : engine_(std::move(engine)), thread_([this] { run(); }) {}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<std::shared_ptr<RequestStream>> AsyncEngine::submit(EngineRequest request) {
  std::promise<Result<std::shared_ptr<RequestStream>>> reply;
  auto verdict = reply.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::Unavailable("the server is shutting down");
    submissions_.push_back({std::move(request), &reply});
  }
  cv_.notify_all();
  return verdict.get();
}

void AsyncEngine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

Status AsyncEngine::reset_prefix_cache() {
  std::promise<Status> reply;
  auto verdict = reply.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::Unavailable("the server is shutting down");
    resets_.push_back(&reply);
  }
  cv_.notify_all();
  return verdict.get();
}

void AsyncEngine::cancel_all() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_all_ = true;
  }
  cv_.notify_all();
}

EngineSnapshot AsyncEngine::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

// Registers each queued submission with the engine and answers its handler.
void AsyncEngine::take_submissions(std::deque<Submission>& submissions) {
  for (Submission& s : submissions) {
    Result<RequestId> id = engine_->submit(std::move(s.request));
    if (!id.ok()) {
      s.reply->set_value(id.status());
      continue;
    }
    auto stream = std::make_shared<RequestStream>();
    stream->id_ = *id;
    streams_[*id] = stream;
    s.reply->set_value(stream);
  }
}

// One engine step; each output goes to its stream.
void AsyncEngine::step_once() {
  Result<std::vector<RequestOutput>> outputs = engine_->step();
  if (!outputs.ok()) {
    // An internal error: every running request ends; the server keeps serving.
    for (auto& [id, stream] : streams_) {
      engine_->cancel(id);
      RequestOutput failed;
      failed.id = id;
      failed.finished = true;
      failed.cancelled = true;
      stream->push(std::move(failed));
    }
    streams_.clear();
    return;
  }
  for (RequestOutput& out : *outputs) {
    const auto it = streams_.find(out.id);
    if (it == streams_.end()) continue;
    const bool finished = out.finished;
    it->second->push(std::move(out));
    if (finished) streams_.erase(it);
  }
}

void AsyncEngine::run() {
  for (;;) {
    std::deque<Submission> submissions;
    std::vector<RequestId> cancels;
    std::vector<std::promise<Status>*> resets;
    bool cancel_all = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] {
        return stopping_ || !submissions_.empty() || !cancels_.empty() || !resets_.empty() ||
               cancel_all_ || engine_->has_unfinished();
      });
      if (stopping_) break;
      submissions.swap(submissions_);
      cancels.swap(cancels_);
      resets.swap(resets_);
      std::swap(cancel_all, cancel_all_);
    }
    take_submissions(submissions);
    if (cancel_all) {
      for (const auto& [id, stream] : streams_) cancels.push_back(id);
    }
    for (const RequestId id : cancels) engine_->cancel(id);
    for (std::promise<Status>* r : resets) r->set_value(engine_->reset_prefix_cache());
    if (engine_->has_unfinished()) step_once();
    std::lock_guard<std::mutex> lock(mu_);
    snapshot_.last_step = engine_->last_step();
    snapshot_.totals = engine_->totals();
    snapshot_.num_unfinished = static_cast<int64_t>(streams_.size());
    snapshot_.max_num_running = std::max(snapshot_.max_num_running, snapshot_.last_step.num_running);
    snapshot_.kv_groups = engine_->kv_groups();
  }
  // Shutting down: what is still queued is refused, what runs is cancelled.
  std::lock_guard<std::mutex> lock(mu_);
  for (Submission& s : submissions_) s.reply->set_value(Status::Unavailable("shutting down"));
  for (std::promise<Status>* r : resets_) r->set_value(Status::Unavailable("shutting down"));
  for (auto& [id, stream] : streams_) {
    RequestOutput out;
    out.id = id;
    out.finished = true;
    out.cancelled = true;
    stream->push(std::move(out));
  }
}

}  // namespace strata::server
