#pragma once
// ValueBufferPool: value strings kept for the next values to reuse (the peer transport's ends,
// the remote tier's puts). glibc serves allocations of a block's size (2 MiB) from a fresh mmap
// every time, so a new string costs a page fault per 4 KiB on first touch -- more than the copy
// into it (on the VMs measured, several times the transfer itself).
//
// Bounded: at most max_bytes of capacity; strings below 4 KiB are not kept. Not thread-safe.
// Cost: put and take are O(1), no allocation.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace strata::kv {

class ValueBufferPool {
 public:
  explicit ValueBufferPool(size_t max_bytes) : max_bytes_(max_bytes) {}

  void put(std::string&& s) {
    if (s.capacity() < kMinBytes || bytes_ + s.capacity() > max_bytes_) return;
    bytes_ += s.capacity();
    spare_.push_back(std::move(s));
  }
  // Every string of values (values is left empty).
  void put_all(std::vector<std::string>& values) {
    for (std::string& v : values) put(std::move(v));
    values.clear();
  }
  // A spare string, its old bytes and size as they were (resizing it to the same size touches
  // nothing), or an empty one.
  std::string take() {
    if (spare_.empty()) return {};
    std::string s = std::move(spare_.back());
    spare_.pop_back();
    bytes_ -= s.capacity();
    return s;
  }

 private:
  static constexpr size_t kMinBytes = 4096;  // smaller ones are cheap to allocate
  size_t max_bytes_;
  std::vector<std::string> spare_;
  size_t bytes_ = 0;  // the spares' capacity
};

}  // namespace strata::kv
