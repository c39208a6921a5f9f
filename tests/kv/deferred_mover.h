#pragma once
// Pool movers for tests. PassThroughMover runs every copy at once, as the CPU backend
// (HostBlockMover) does; a test's mover derives from it and overrides only the copies it holds
// back or counts. DeferredMover: its started copies (start_from_host, start_from_region) stay in
// flight until complete() or wait_copies() -- a GPU's copy stream held still -- and then run as
// the CPU backend's memcpys.

#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_mover.h"

namespace strata::kv {

class PassThroughMover : public BlockMover {
 public:
  explicit PassThroughMover(HostKvBuffer& pool) : now_(pool) {}

  int32_t num_pool_blocks() const override { return now_.num_pool_blocks(); }
  void attach(HostKvBuffer& /*host*/) override {}
  void detach(HostKvBuffer& /*host*/) override {}
  void to_host(std::span<const BlockCopy> pairs, HostKvBuffer& host) override {
    now_.to_host(pairs, host);
  }
  void from_host(std::span<const BlockCopy> pairs, const HostKvBuffer& host) override {
    now_.from_host(pairs, host);
  }
  void to_region(std::span<const BlockCopy> pairs, std::byte* slots) override {
    now_.to_region(pairs, slots);
  }
  uint64_t start_from_region(std::span<const RegionCopy> copies) override {
    return now_.start_from_region(copies);
  }
  std::span<const std::byte> host_block(BlockId block) const override {
    return now_.host_block(block);
  }

 protected:
  HostBlockMover now_;
};

class DeferredMover final : public PassThroughMover {
 public:
  using PassThroughMover::PassThroughMover;

  uint64_t start_from_host(std::span<const BlockCopy> pairs, const HostKvBuffer& host) override {
    started_.push_back(Started{++last_, {pairs.begin(), pairs.end()}, &host, {}});
    return last_;
  }
  uint64_t start_from_region(std::span<const RegionCopy> copies) override {
    started_.push_back(Started{++last_, {}, nullptr, {copies.begin(), copies.end()}});
    return last_;
  }
  bool copies_done(uint64_t ticket) override { return ticket <= done_; }
  void wait_copies(uint64_t ticket) override {
    for (Started& s : started_) {
      if (s.ticket > done_ && s.ticket <= ticket) {
        if (s.host != nullptr) now_.from_host(s.pairs, *s.host);
        now_.start_from_region(s.region);
        done_ = s.ticket;
      }
    }
  }
  // Finishes every started copy.
  void complete() { wait_copies(last_); }
  // Started copies not finished yet.
  int64_t num_in_flight() const { return static_cast<int64_t>(last_ - done_); }

 private:
  struct Started {
    uint64_t ticket;
    std::vector<BlockCopy> pairs;
    const HostKvBuffer* host;        // from_host's, or null
    std::vector<RegionCopy> region;  // start_from_region's
  };
  std::vector<Started> started_;
  uint64_t last_ = kDoneTicket;
  uint64_t done_ = kDoneTicket;
};

}  // namespace strata::kv
