#include "kv/remote_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "core/check.h"
#include "kv/disk_tier.h"
#include "kv/redis_cluster.h"
#include "kv/redis_shards.h"
#include "kv/tier_key.h"

namespace strata::kv {
namespace {

std::string hex16(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return s;
}

}  // namespace

namespace {

std::unique_ptr<RedisStore> make_store(const RedisTarget& target, const RedisClientOptions& o) {
  if (target.cluster) return std::make_unique<RedisCluster>(target.nodes, o);
  if (target.nodes.size() > 1) return std::make_unique<RedisShards>(target.nodes, o);
  return std::make_unique<RedisClient>(target.nodes.at(0), o);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

RemoteTier::RemoteTier(const RedisTarget& target, uint64_t ns, int32_t block_size,
                       int64_t block_bytes, RemoteTierOptions options)
    : ns_(ns),
      block_bytes_(block_bytes),
      options_(std::move(options)),
      format_(ns, block_size, block_bytes, options_.codec),
      reader_(make_store(target, options_.client)),
      writer_client_(make_store(target, options_.client)),
      spare_(64 * format_.max_bytes()),
      writer_([this] { run_writer(); }) {}

RemoteTier::~RemoteTier() {
  {
    const std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  writer_.join();
}

size_t RemoteTier::value_bytes() const { return format_.max_bytes(); }

std::string RemoteTier::key(const BlockHash& hash) const {
  return "strata:kv:" + hex16(ns_) + ":" + hash_hex(hash);
}

void RemoteTier::get(std::span<Get> blocks) {
  if (blocks.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> keys;
  keys.reserve(blocks.size());
  for (const Get& g : blocks) keys.push_back(key(g.hash));
  // Which blocks to read: a chain's blocks past its first absent one are of no use to it, so
  // the store is asked first which keys it holds (EXISTS, a few bytes a key) and each chain is
  // read up to its first absent block. Writes dropped under load leave such holes, and on an
  // H100 GPU the values past them were most of the bytes read. A probe that fails reads all.
  std::vector<size_t> wanted = probe_chains(keys, blocks);
  std::vector<std::string> wanted_keys;
  wanted_keys.reserve(wanted.size());
  for (const size_t i : wanted) wanted_keys.push_back(std::move(keys[i]));
  // Each value is checked and copied out straight from the reply; a block the store did not
  // answer for takes the read's error.
  std::vector<bool> answered(wanted.size(), false);
  int64_t hits = 0, bad = 0, bytes = 0;
  const Status read = reader_->mget(
      wanted_keys,
      [&](size_t j, std::optional<std::string_view> v) {
        Get& g = blocks[wanted[j]];
        answered[j] = true;
        if (!v) {
          g.status = Status::NotFound("not in the remote tier");
          return;
        }
        bytes += static_cast<int64_t>(v->size());
        const Status s = format_.decode(*v, g.hash, g.tokens, g.out, &g.checksum);
        if (!s.ok()) {
          ++bad;
          g.status = Status::NotFound(s.message());
          return;
        }
        ++hits;
        g.status = Status::Ok();
      },
      std::max<size_t>(1, kReadChunkBytes / value_bytes()));
  if (!read.ok()) {
    for (size_t j = 0; j < wanted.size(); ++j) {
      if (!answered[j]) blocks[wanted[j]].status = read;
    }
  }
  const double seconds = seconds_since(start);
  const std::lock_guard lock(mu_);
  stats_.num_get_blocks += static_cast<int64_t>(blocks.size());
  stats_.num_get_errors += read.ok() ? 0 : 1;
  stats_.num_hits += hits;
  stats_.num_bad += bad;
  stats_.bytes_read += bytes;
  stats_.get_latency.observe(seconds);
}

std::vector<size_t> RemoteTier::probe_chains(std::span<const std::string> keys,
                                             std::span<Get> blocks) {
  std::vector<size_t> wanted;
  wanted.reserve(blocks.size());
  std::vector<uint8_t> there(blocks.size(), 1);  // a key the probe did not answer for is read
  if (blocks.size() > 1) {
    (void)reader_->exists(keys, [&](size_t i, bool in) { there[i] = in ? 1 : 0; });
  }
  std::unordered_set<int32_t> broken;  // chains past their first absent block
  for (size_t i = 0; i < blocks.size(); ++i) {
    Get& g = blocks[i];
    if (broken.contains(g.chain)) {
      g.status = Status::NotFound("after a block the remote tier lacks");
      continue;
    }
    if (there[i] == 0) {
      g.status = Status::NotFound("not in the remote tier");
      broken.insert(g.chain);
      continue;
    }
    wanted.push_back(i);
  }
  return wanted;
}

bool RemoteTier::put(const BlockHash& hash, std::span<const int32_t> tokens,
                     std::span<const std::byte> bytes, uint64_t checksum) {
  Write w;
  {
    const std::lock_guard lock(mu_);
    w.value = spare_.take();
  }
  format_.encode_into(w.value, hash, tokens, bytes, checksum, KvCodecPlan{});  // coded by the writer
  w.queued_bytes = static_cast<int64_t>(w.value.size());
  w.key = key(hash);
  w.hash = hash;
  return enqueue(std::move(w));
}

bool RemoteTier::put_borrowed(const BlockHash& hash, std::span<const int32_t> tokens,
                              std::span<const std::byte> bytes, uint64_t checksum, uint64_t tag) {
  STRATA_CHECK(bytes.size() == static_cast<size_t>(block_bytes_), "put_borrowed: one block");
  Write w;
  w.key = key(hash);
  w.borrowed = true;
  w.tag = tag;
  w.hash = hash;
  w.tokens = tokens;
  w.bytes = bytes;
  w.checksum = checksum;
  w.queued_bytes = static_cast<int64_t>(value_bytes());
  return enqueue(std::move(w));
}

bool RemoteTier::enqueue(Write w) {
  {
    const std::lock_guard lock(mu_);
    // A server that did not answer the last write is asked again by one write at a time.
    const bool waiting_server = writer_unavailable_ && (writing_ || !queue_.empty());
    if (stopping_ || waiting_server ||
        queued_bytes_ + w.queued_bytes > options_.max_queued_bytes) {
      ++stats_.num_dropped;
      return false;
    }
    queued_bytes_ += w.queued_bytes;
    if (w.borrowed) lent_.lend();
    queue_.push_back(std::move(w));
  }
  work_cv_.notify_one();
  return true;
}

std::vector<uint64_t> RemoteTier::take_released(bool wait) {
  std::unique_lock lock(mu_);
  return lent_.take(lock, wait);
}

void RemoteTier::flush() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

RemoteTierStats RemoteTier::stats() const {
  const std::lock_guard lock(mu_);
  return stats_;
}

void RemoteTier::log_stored() {
  const std::lock_guard lock(mu_);
  log_stored_ = true;
}

std::vector<BlockHash> RemoteTier::take_stored() {
  const std::lock_guard lock(mu_);
  std::vector<BlockHash> out;
  out.swap(stored_);
  return out;
}

void RemoteTier::run_writer() {
  // The coded values, and borrowed blocks' (their buffers reused batch after batch).
  std::vector<std::string> coded;
  const size_t prefix = format_.prefix_bytes();
  const bool recode = options_.codec.scheme != KvCodecScheme::kStored;
  // Split without given codebooks: each segment's own for the first kCalibrationBlocks blocks,
  // whose histograms then fix one codebook per segment (a layer's K or V) for the rest, which
  // spares every later block its histogram pass.
  KvCodecPlan plan = options_.codec;
  const bool calibrate =
      plan.scheme == KvCodecScheme::kSplit && plan.codebooks.empty() && plan.segment_bytes > 0;
  std::vector<SymbolHistogram> hist(
      calibrate ? (static_cast<size_t>(block_bytes_) + plan.segment_bytes - 1) / plan.segment_bytes
                : 0);
  int calibration_blocks = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    // What is queued, up to kWriteBatch writes or kWriteBatchBytes, in one pipelined round trip.
    std::vector<Write> batch;
    int64_t batch_bytes = 0;
    while (!queue_.empty() && batch.size() < kWriteBatch &&
           (batch.empty() || batch_bytes < kWriteBatchBytes)) {
      batch_bytes += queue_.front().queued_bytes;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    writing_ = true;
    lock.unlock();
    enum class Outcome : uint8_t { kFailed, kWritten, kPresent };
    std::vector<Outcome> outcome(batch.size(), Outcome::kFailed);
    const auto start = std::chrono::steady_clock::now();
    // Blocks another instance wrote since this one computed them are neither coded nor sent:
    // the store is asked first which keys it holds (EXISTS, a few bytes a key). Where several
    // instances compute the same prefixes, such blocks are a large share of the puts, and
    // sending them only for SET NX to refuse them took the writer's round trips. A key the
    // probe did not answer for is written (SET NX still keeps it from being written twice).
    {
      std::vector<std::string> keys;
      keys.reserve(batch.size());
      for (const Write& w : batch) keys.push_back(w.key);
      (void)writer_client_->exists(keys, [&](size_t i, bool there) {
        if (there) outcome[i] = Outcome::kPresent;
      });
    }
    std::vector<RedisKeyValue> pairs;
    std::vector<size_t> sent;  // pairs[j] is batch[sent[j]]
    pairs.reserve(batch.size());
    sent.reserve(batch.size());
    if (coded.size() < batch.size()) coded.resize(batch.size());
    std::vector<uint64_t> released;
    for (size_t i = 0; i < batch.size(); ++i) {
      const Write& w = batch[i];
      if (outcome[i] == Outcome::kPresent) {
        if (w.borrowed) released.push_back(w.tag);
        continue;
      }
      sent.push_back(i);
      if (!w.borrowed && !recode) {
        pairs.push_back({w.key, w.value});
        continue;
      }
      // A borrowed block is coded straight from the caller's bytes; a put()'s stored value ends
      // with the block's bytes, after the header and token ids the coded value keeps.
      const std::span<const std::byte> block =
          w.borrowed ? w.bytes
                     : std::as_bytes(std::span(w.value)).last(static_cast<size_t>(block_bytes_));
      if (calibrate && calibration_blocks < kCalibrationBlocks) {
        add_segment_histograms(plan.split, block, plan.segment_bytes, hist);
        if (++calibration_blocks == kCalibrationBlocks) {
          for (const SymbolHistogram& h : hist) {
            plan.codebooks.push_back(codebook_from_histogram(h));
          }
        }
      }
      if (w.borrowed) {
        format_.encode_into(coded[i], w.hash, w.tokens, block, w.checksum, plan);
        released.push_back(w.tag);
      } else {
        coded[i].assign(w.value, 0, prefix);
        kv_encode(block, plan, coded[i]);
      }
      pairs.push_back({w.key, coded[i]});
    }
    // The borrowed blocks go back before the round trip: their values are the writer's now.
    if (!released.empty()) {
      const std::lock_guard released_lock(mu_);
      for (const uint64_t tag : released) lent_.give_back(tag);
    }
    const Status s =
        pairs.empty() ? Status::Ok()
                      : writer_client_->set_nx(pairs, options_.ttl_seconds, [&](size_t j, bool w) {
                          outcome[sent[j]] = w ? Outcome::kWritten : Outcome::kPresent;
                        });
    const double seconds = seconds_since(start);
    lock.lock();
    writing_ = false;
    queued_bytes_ -= batch_bytes;
    stats_.put_latency.observe(seconds);
    for (size_t j = 0; j < sent.size(); ++j) {
      if (outcome[sent[j]] == Outcome::kWritten) {
        stats_.bytes_written += static_cast<int64_t>(pairs[j].value.size());
      }
    }
    // put() drops while a store that answered none of the batch is asked again; one server of
    // several down fails only its own blocks (its breaker refuses them at once), so the others'
    // writes go on.
    writer_unavailable_ = s.code() == StatusCode::kUnavailable &&
                          std::all_of(outcome.begin(), outcome.end(),
                                      [](Outcome o) { return o == Outcome::kFailed; });
    for (size_t i = 0; i < batch.size(); ++i) {
      switch (outcome[i]) {
        case Outcome::kFailed:
          ++stats_.num_put_errors;
          break;
        case Outcome::kWritten:
          ++stats_.num_writes;
          break;
        case Outcome::kPresent:
          ++stats_.num_present;
          break;
      }
      if (log_stored_ && outcome[i] != Outcome::kFailed) stored_.push_back(batch[i].hash);
    }
    // The values' buffers serve later puts: their pages are in memory already.
    for (Write& w : batch) {
      if (!w.borrowed) spare_.put(std::move(w.value));
    }
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace strata::kv
