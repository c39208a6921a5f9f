#include "kv/peer_source.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "core/check.h"
#include "kv/peer_frames.h"
#include "kv/tier_key.h"

namespace strata::kv {

PeerSource::PeerSource(BlockValueFormat format, std::vector<PeerConnect> connects,
                       PeerSourceOptions options)
    : format_(std::move(format)), options_(std::move(options)) {
  STRATA_CHECK(!connects.empty(), "PeerSource: at least one prefill instance");
  for (PeerConnect& c : connects) peers_.push_back(Peer{std::move(c), nullptr, std::nullopt});
  int threads = options_.decode_threads;
  if (threads <= 0) {
    threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4);
  }
  decoders_ = std::make_unique<ThreadPool>(threads);
}

PeerClient* PeerSource::client(size_t p) {
  Peer& peer = peers_[p];
  if (peer.client) return peer.client.get();
  const auto now = std::chrono::steady_clock::now();
  if (peer.last_connect && now - *peer.last_connect < std::chrono::seconds(1)) return nullptr;
  peer.last_connect = now;
  Result<std::unique_ptr<PeerClient>> c = peer.connect();
  if (c.ok()) peer.client = std::move(c).value();
  return peer.client.get();
}

Status PeerSource::ask(size_t n, PeerSourceStats& s) {
  Status last = Status::Unavailable("no connection to the prefill instance");
  bool answered = false;
  for (size_t k = 0; k < peers_.size(); ++k) {
    const size_t p = (preferred_ + k) % peers_.size();
    PeerClient* const c = client(p);
    if (c == nullptr) continue;
    values_.resize(n);
    ++s.num_round_trips;
    const Status got = c->get_flagged(keys_, flags(p), values_);
    if (!got.ok()) {
      ++s.num_errors;
      if (got.code() == StatusCode::kUnavailable) peers_[p].client.reset();  // made again later
      last = got;
      continue;
    }
    answered = true;
    if (!values_[0].empty()) {
      preferred_ = p;
      return Status::Ok();
    }
  }
  if (!answered) return last;
  values_.assign(n, std::string());  // nobody has the first block (yet)
  return Status::Ok();
}

void PeerSource::get(std::span<BlockGet> blocks) {
  if (blocks.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  const size_t per_trip = std::max<size_t>(
      1, std::min<size_t>({options_.chunk_blocks, kMaxPeerKeys,
                           static_cast<size_t>(kMaxPeerResponseBytes / format_.max_bytes())}));
  PeerSourceStats s;
  s.num_get_blocks = static_cast<int64_t>(blocks.size());
  // The chains one after another: a block that does not come ends its own chain only.
  for (size_t begin = 0; begin < blocks.size();) {
    size_t end = begin + 1;
    while (end < blocks.size() && blocks[end].chain == blocks[begin].chain) ++end;
    get_chain(blocks.subspan(begin, end - begin), start, per_trip, s);
    begin = end;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.get_latency.observe(seconds);
  const std::lock_guard lock(mu_);
  stats_ += s;
}

PeerSourceStats& PeerSourceStats::operator+=(const PeerSourceStats& o) {
  num_get_blocks += o.num_get_blocks;
  num_hits += o.num_hits;
  num_bad += o.num_bad;
  num_missing += o.num_missing;
  num_errors += o.num_errors;
  num_round_trips += o.num_round_trips;
  bytes_read += o.bytes_read;
  num_slot_hits += o.num_slot_hits;
  num_slot_reused += o.num_slot_reused;
  num_slot_pool_blocks += o.num_slot_pool_blocks;
  transfer_seconds += o.transfer_seconds;
  get_latency.merge(o.get_latency);
  return *this;
}

void PeerSource::get_chain(std::span<BlockGet> blocks, std::chrono::steady_clock::time_point start,
                           size_t per_trip, PeerSourceStats& s) {
  auto deadline = start + options_.wait;
  auto backoff = std::chrono::milliseconds(1);
  size_t next = 0;  // the first block not read yet
  Status rest;      // the status of the blocks from `next` on, once the read ends early
  while (next < blocks.size() && rest.ok()) {
    const size_t n = std::min(per_trip, blocks.size() - next);
    keys_.clear();
    for (size_t i = next; i < next + n; ++i) keys_.push_back(TierKey{format_.ns(), blocks[i].hash});
    const auto trip = std::chrono::steady_clock::now();
    if (const Status got = ask(n, s); !got.ok()) {
      rest = got;
      break;
    }
    // The values there, checked and decoded into their slots in parallel (a slot record's block
    // copied out of the peer's region); then taken in chain order, up to the first that failed.
    size_t present = 0;
    while (present < n && !values_[present].empty()) ++present;
    decoded_.assign(present, Status());
    reads_.assign(present, Read::kValue);
    decoders_->parallel_for(static_cast<int64_t>(present), [&](int64_t begin, int64_t end) {
      for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {
        BlockGet& g = blocks[next + i];
        decoded_[i] = is_peer_slot_record(values_[i])
                          ? read_slot(values_[i], preferred_, g, reads_[i])
                          : format_.decode(values_[i], g.hash, g.tokens, g.out, &g.checksum);
      }
    });
    // A region that does not open here (another machine's, say): the blocks from the first of
    // its records on are asked for again, as values.
    for (size_t i = 0; i < present; ++i) {
      if (reads_[i] != Read::kNoRegion) continue;
      peers_[preferred_].slots = false;
      present = i;
      for (size_t k = i; k < n; ++k) values_[k].clear();
      break;
    }
    confirm_slots(preferred_, blocks.subspan(next), present, s);
    size_t j = 0;
    for (; j < present; ++j) {
      BlockGet& g = blocks[next + j];
      // A claim's bytes are counted when they are confirmed, having been copied.
      if (reads_[j] != Read::kClaim) {
        s.bytes_read += reads_[j] == Read::kSlot ? format_.block_bytes()
                                                 : static_cast<int64_t>(values_[j].size());
      }
      const Status& d = decoded_[j];
      if (!d.ok()) {
        ++s.num_bad;
        g.status = Status::NotFound(d.message());
        rest = Status::NotFound("after a block that failed its check");
        break;
      }
      g.status = Status::Ok();
      if (reads_[j] == Read::kClaim) continue;  // counted when confirmed
      ++s.num_hits;
      if (reads_[j] == Read::kSlot) ++s.num_slot_hits;
    }
    // The trip's time counts as transfer when it brought blocks (their checks included).
    if (present > 0) {
      s.transfer_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - trip).count();
    }
    if (!rest.ok()) {
      next += j + 1;
      break;
    }
    next += j;
    if (j == n) {
      backoff = std::chrono::milliseconds(1);
      continue;
    }
    // blocks[next] is not there (yet): asked again until the wait is over, which is the wait
    // after the get began or, while the prefill instance is still computing the chain, after now.
    const auto now = std::chrono::steady_clock::now();
    if (blocks[next].producing != nullptr &&
        blocks[next].producing->load(std::memory_order_acquire)) {
      deadline = std::max(deadline, now + options_.wait);
    }
    if (now >= deadline) {
      ++s.num_missing;
      blocks[next].status = Status::NotFound("the prefill instance does not have it");
      ++next;
      rest = Status::NotFound("after a block the prefill instance does not have");
      break;
    }
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(16));
  }
  for (size_t i = next; i < blocks.size(); ++i) blocks[i].status = rest;
}

uint16_t PeerSource::flags(size_t p) const {
  return options_.open_region && peers_[p].slots ? kPeerAcceptSlotRecords : uint16_t{0};
}

std::shared_ptr<PeerRegionView> PeerSource::region(const PeerSlotRecord& r) {
  std::string id = std::to_string(r.kind) + ":" + std::to_string(r.region_id) + ":" +
                   std::to_string(r.region_bytes) + ":";
  id += r.handle;
  const std::lock_guard lock(regions_mu_);
  if (const auto it = regions_.find(id); it != regions_.end()) return it->second;
  Result<std::unique_ptr<PeerRegionView>> opened =
      options_.open_region(static_cast<PeerRegionKind>(r.kind), r.handle, r.region_id,
                           static_cast<int64_t>(r.region_bytes));
  std::shared_ptr<PeerRegionView> view;
  if (opened.ok()) view = std::move(opened).value();
  regions_.emplace(std::move(id), view);  // a failure too: not tried again
  return view;
}

Status PeerSource::read_slot(std::string_view value, size_t p, BlockGet& g, Read& kind) {
  kind = Read::kSlot;
  Result<PeerSlotRecord> r = decode_peer_slot_record(value);
  if (!r.ok()) return r.status();
  if (!options_.open_region) return Status::Internal("a slot record that was not asked for");
  if (r->key != TierKey{format_.ns(), g.hash}) return Status::Internal("another block's slot");
  if (r->block_bytes != static_cast<uint64_t>(format_.block_bytes()) ||
      g.out.size() != r->block_bytes) {
    return Status::Internal("a slot of " + std::to_string(r->block_bytes) +
                            " bytes for a block of " + std::to_string(g.out.size()));
  }
  const std::shared_ptr<PeerRegionView> view = region(*r);
  if (!view) {
    kind = Read::kNoRegion;
    return Status::Unavailable("the prefill instance's region does not open here");
  }
  if (options_.claim_slots) {
    const auto offset = static_cast<int64_t>(r->offset());
    if (offset < 0 || offset > view->size_bytes() ||
        static_cast<int64_t>(r->block_bytes) > view->size_bytes() - offset) {
      return Status::InvalidArgument("a slot past the region's end");
    }
    kind = Read::kClaim;
    auto claim = std::make_shared<PeerSlotClaim>();
    claim->peer = p;
    claim->key = r->key;
    claim->record = std::string(value);
    claim->checksum = r->checksum;
    claim->view = view;
    claim->offset = offset;
    g.claim = std::move(claim);
    g.checksum = 0;
    return Status::Ok();
  }
  STRATA_RETURN_IF_ERROR(view->copy_out(r->offset(), g.out));
  g.checksum = tier_checksum(g.out);
  if (g.checksum != r->checksum) return Status::Internal("the slot's bytes fail their checksum");
  return Status::Ok();
}

Status PeerSource::ask_records_again(size_t p, PeerClient* c, PeerSourceStats& s) {
  Status got = Status::Unavailable("no connection to the prefill instance");
  if (c != nullptr) {
    ++s.num_round_trips;
    got = c->get_flagged(confirm_keys_, kPeerAcceptSlotRecords, confirmed_);
  }
  if (!got.ok()) {
    ++s.num_errors;
    if (got.code() == StatusCode::kUnavailable) peers_[p].client.reset();
  }
  return got;
}

void PeerSource::confirm_slots(size_t p, std::span<BlockGet> blocks, size_t present,
                               PeerSourceStats& s) {
  confirm_keys_.clear();
  for (size_t i = 0; i < present; ++i) {
    if (reads_[i] == Read::kSlot && decoded_[i].ok()) {
      confirm_keys_.push_back(TierKey{format_.ns(), blocks[i].hash});
    }
  }
  if (confirm_keys_.empty()) return;
  // Every copy out of the region has returned: the same records now prove the slots were not
  // written during them (peer_slots.h).
  const Status got = ask_records_again(p, peers_[p].client.get(), s);
  size_t k = 0;
  for (size_t i = 0; i < present; ++i) {
    if (reads_[i] != Read::kSlot || !decoded_[i].ok()) continue;
    if (!got.ok()) {
      decoded_[i] = Status::Unavailable("the slot could not be confirmed: " + got.message());
    } else if (k >= confirmed_.size() || confirmed_[k] != values_[i]) {
      ++s.num_slot_reused;
      decoded_[i] = Status::Internal("the slot was taken again during the copy");
    }
    ++k;
  }
}

std::vector<uint8_t> PeerSource::confirm(std::span<const PeerSlotClaim* const> claims,
                                         std::span<const uint8_t> copied) {
  STRATA_CHECK(claims.size() == copied.size(), "PeerSource::confirm: a copy check per claim");
  enum class Found : uint8_t { kSame, kBadCopy, kChanged, kNoAnswer };
  std::vector<Found> found(claims.size(), Found::kNoAnswer);
  PeerSourceStats s;
  const auto start = std::chrono::steady_clock::now();
  // Per prefill instance, its claims' keys in one round trip (a chain's come from one).
  for (size_t p = 0; p < peers_.size(); ++p) {
    std::vector<size_t> asked;
    confirm_keys_.clear();
    for (size_t i = 0; i < claims.size(); ++i) {
      if (claims[i]->peer != p) continue;
      if (!copied[i]) {
        found[i] = Found::kBadCopy;
        continue;
      }
      asked.push_back(i);
      confirm_keys_.push_back(claims[i]->key);
    }
    if (asked.empty()) continue;
    // Later than the read: the connection may have to be made again.
    if (!ask_records_again(p, client(p), s).ok()) continue;
    for (size_t k = 0; k < asked.size(); ++k) {
      const bool same = k < confirmed_.size() && confirmed_[k] == claims[asked[k]]->record;
      found[asked[k]] = same ? Found::kSame : Found::kChanged;
      if (!same) ++s.num_slot_reused;
    }
  }
  // Counted as get() counts a chain: its blocks up to the first that failed are hits, that one
  // is bad (a copy that failed its check, a slot taken again), the rest are not counted.
  std::vector<uint8_t> ok(claims.size(), 0);
  for (size_t i = 0; i < claims.size(); ++i) {
    if (found[i] != Found::kSame) {
      if (found[i] != Found::kNoAnswer) ++s.num_bad;
      break;
    }
    ok[i] = 1;
    ++s.num_hits;
    ++s.num_slot_hits;
    ++s.num_slot_pool_blocks;
    s.bytes_read += format_.block_bytes();
  }
  s.transfer_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::lock_guard lock(mu_);
  stats_ += s;
  return ok;
}

PeerSourceStats PeerSource::stats() const {
  const std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace strata::kv
