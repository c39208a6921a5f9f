#include "kv/peer_slots.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "core/check.h"
#include "kv/peer_frames.h"
#include "kv/peer_outbox.h"

namespace strata::kv {

PeerSlots::PeerSlots(std::unique_ptr<PeerRegion> region, uint64_t ns, int64_t block_bytes)
    : region_(std::move(region)),
      ns_(ns),
      block_bytes_(block_bytes),
      num_slots_(static_cast<int32_t>(
          std::min<int64_t>((region_->size_bytes() - kPeerRegionHeaderBytes) / block_bytes,
                            std::numeric_limits<int32_t>::max()))) {
  STRATA_CHECK(num_slots_ > 0, "PeerSlots: a region of at least one slot");
  slots_.resize(static_cast<size_t>(num_slots_));
  for (int32_t s = 0; s < num_slots_; ++s) {
    use_.push_back(s);
    slots_[static_cast<size_t>(s)].use = std::prev(use_.end());
  }
}

std::vector<int32_t> PeerSlots::reserve(std::span<const BlockHash> hashes) {
  STRATA_CHECK(hashes.size() <= static_cast<size_t>(num_slots_),
               "PeerSlots::reserve: at most num_slots() blocks at once");
  std::vector<int32_t> out(hashes.size(), -1);
  std::unordered_set<BlockHash> batch;
  const std::lock_guard lock(mu_);
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (held_.contains(hashes[i]) || !batch.insert(hashes[i]).second) continue;
    // The least recent slot not reserved by this batch: the back of use_, moved to the front.
    const int32_t s = use_.back();
    Slot& slot = slots_[static_cast<size_t>(s)];
    if (slot.published) {
      held_.erase(slot.hash);
      ++stats_.num_reused;
    }
    // Unreadable before a byte of it is written (the rule in the header).
    slot.published = false;
    ++slot.generation;
    use_.splice(use_.begin(), use_, slot.use);
    out[i] = s;
  }
  return out;
}

void PeerSlots::publish(int32_t slot, const BlockHash& hash, uint64_t checksum) {
  const std::lock_guard lock(mu_);
  Slot& s = slots_[static_cast<size_t>(slot)];
  STRATA_CHECK(!s.published, "PeerSlots::publish: a reserved slot");
  s.published = true;
  s.hash = hash;
  s.checksum = checksum;
  held_[hash] = slot;
  ++stats_.num_put;
}

void PeerSlots::abandon(int32_t slot) {
  const std::lock_guard lock(mu_);
  Slot& s = slots_[static_cast<size_t>(slot)];
  STRATA_CHECK(!s.published, "PeerSlots::abandon: a reserved slot");
  use_.splice(use_.end(), use_, s.use);  // the first to be taken again
}

void PeerSlots::lookup(std::span<const TierKey> keys, std::vector<std::string>& values) {
  PeerSlotRecord r;
  r.kind = static_cast<uint32_t>(region_->kind());
  r.region_id = region_->region_id();
  r.region_bytes = static_cast<uint64_t>(region_->size_bytes());
  r.slot_bytes = static_cast<uint64_t>(block_bytes_);
  r.block_bytes = static_cast<uint64_t>(block_bytes_);
  r.handle = region_->handle();
  const std::lock_guard lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].ns != ns_ || !values[i].empty()) continue;
    const auto it = held_.find(keys[i].hash);
    if (it == held_.end()) continue;
    Slot& s = slots_[static_cast<size_t>(it->second)];
    r.slot_idx = static_cast<uint32_t>(it->second);
    r.generation = s.generation;
    r.checksum = s.checksum;
    r.key = keys[i];
    encode_peer_slot_record(r, values[i]);
    use_.splice(use_.begin(), use_, s.use);
    ++stats_.num_served;
    stats_.bytes_served += block_bytes_;
  }
}

bool PeerSlots::holds(const BlockHash& hash) const {
  const std::lock_guard lock(mu_);
  return held_.contains(hash);
}

PeerSlotsStats PeerSlots::stats() const {
  const std::lock_guard lock(mu_);
  return stats_;
}

void peer_lookup(PeerSlots* slots, PeerOutbox* outbox, std::span<const TierKey> keys,
                 uint16_t flags, std::vector<std::string>& values) {
  if (slots != nullptr && (flags & kPeerAcceptSlotRecords) != 0) slots->lookup(keys, values);
  if (outbox != nullptr) outbox->lookup(keys, values);
}

}  // namespace strata::kv
