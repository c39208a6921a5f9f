#include "kv/peer_outbox.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace strata::kv {

PeerOutbox::PeerOutbox(BlockValueFormat format, int64_t max_bytes)
    : format_(std::move(format)),
      max_bytes_(std::max<int64_t>(max_bytes, static_cast<int64_t>(format_.max_bytes()))),
      spare_(format_.max_bytes() * 8),
      thread_([this] { run(); }) {}

PeerOutbox::~PeerOutbox() {
  {
    const std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

bool PeerOutbox::put_borrowed(const BlockHash& hash, std::span<const int32_t> tokens,
                              std::span<const std::byte> bytes, uint64_t checksum, uint64_t tag) {
  STRATA_CHECK(bytes.size() == static_cast<size_t>(format_.block_bytes()),
               "PeerOutbox::put_borrowed: one block");
  {
    const std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= kMaxQueued) {
      ++stats_.num_dropped;
      return false;
    }
    queue_.push_back(Put{hash, tokens, bytes, checksum, tag});
    lent_.lend();
  }
  work_cv_.notify_one();
  return true;
}

std::vector<uint64_t> PeerOutbox::take_released(bool wait) {
  std::unique_lock lock(mu_);
  return lent_.take(lock, wait);
}

void PeerOutbox::flush() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !coding_; });
}

void PeerOutbox::lookup(std::span<const TierKey> keys, std::vector<std::string>& values) {
  const std::lock_guard lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].ns != format_.ns() || !values[i].empty()) continue;  // absent, or answered
    const auto it = held_.find(keys[i].hash);
    if (it == held_.end()) continue;
    values[i].assign(it->second.value);
    use_.splice(use_.begin(), use_, it->second.use);
    ++stats_.num_served;
    stats_.bytes_served += static_cast<int64_t>(it->second.value.size());
  }
}

PeerOutboxStats PeerOutbox::stats() const {
  const std::lock_guard lock(mu_);
  return stats_;
}

void PeerOutbox::keep(const BlockHash& hash, std::string value) {
  const auto size = static_cast<int64_t>(value.size());
  if (const auto it = held_.find(hash); it != held_.end()) {  // computed again: the same block
    spare_.put(std::move(value));
    use_.splice(use_.begin(), use_, it->second.use);
    return;
  }
  while (!use_.empty() && stats_.bytes_held + size > max_bytes_) {
    const auto victim = held_.find(use_.back());
    stats_.bytes_held -= static_cast<int64_t>(victim->second.value.size());
    spare_.put(std::move(victim->second.value));
    held_.erase(victim);
    use_.pop_back();
    ++stats_.num_evicted;
  }
  use_.push_front(hash);
  held_.emplace(hash, Held{std::move(value), use_.begin()});
  stats_.bytes_held += size;
  ++stats_.num_put;
}

void PeerOutbox::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) {
      // The lent blocks go back uncoded: their owner is waiting to free them.
      for (const Put& p : queue_) lent_.give_back(p.tag);
      queue_.clear();
      idle_cv_.notify_all();
      return;
    }
    const Put p = queue_.front();
    queue_.pop_front();
    coding_ = true;
    std::string value = spare_.take();
    lock.unlock();
    format_.encode_into(value, p.hash, p.tokens, p.bytes, p.checksum, format_.codec());
    lock.lock();
    lent_.give_back(p.tag);
    keep(p.hash, std::move(value));
    coding_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace strata::kv
