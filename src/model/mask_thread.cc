#include "model/mask_thread.h"

#include <atomic>
#include <utility>

namespace strata::model {

MaskThread::MaskThread(uint32_t* signal) : signal_(signal) {
  std::atomic_ref<uint32_t>(signal_[0]).store(0, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(signal_[1]).store(0, std::memory_order_release);
  thread_ = std::thread([this] { run(); });
}

MaskThread::~MaskThread() {
  finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MaskThread::arm() {
  finish();  // the step before, if it never did
  std::lock_guard<std::mutex> lock(mu_);
  ++step_;
  signalled_ = false;
  std::atomic_ref<uint32_t>(signal_[0]).store(step_, std::memory_order_release);
}

void MaskThread::start(Fill fill, std::span<uint64_t* const> masks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fill_ = std::move(fill);
    masks_ = masks;
    pending_ = true;
  }
  cv_.notify_all();
}

void MaskThread::release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!signalled_ && !pending_) signal_reached();
}

void MaskThread::finish() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !pending_; });
  if (!signalled_) signal_reached();
}

void MaskThread::signal_reached() {
  // Release: the masks' stores are visible before the value that lets the device read them.
  std::atomic_ref<uint32_t>(signal_[1]).store(step_, std::memory_order_release);
  signalled_ = true;
}

void MaskThread::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || pending_; });
    if (!pending_) return;  // stopping, nothing handed over
    Fill fill = std::move(fill_);
    const std::span<uint64_t* const> masks = masks_;
    lock.unlock();
    fill(masks);
    lock.lock();
    signal_reached();
    pending_ = false;
    cv_.notify_all();
  }
}

}  // namespace strata::model
