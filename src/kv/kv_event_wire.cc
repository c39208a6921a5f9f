#include "kv/kv_event_wire.h"

#include <msgpack.hpp>

#include <cstdint>
#include <cstring>

#include "core/check.h"

namespace strata::kv {
namespace {

// msgpack's packer writes through any stream with write(const char*, size_t).
struct StringStream {
  std::string* out;
  void write(const char* bytes, size_t n) { out->append(bytes, n); }
};
using Packer = msgpack::packer<StringStream>;

// Always a float64, as msgspec writes vLLM's ts: msgpack-c's pack_double writes a double that
// holds an integer as an integer.
void pack_float64(StringStream& stream, double d) {
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof(bits));
  char bytes[9];
  bytes[0] = static_cast<char>(0xcb);
  for (size_t i = 0; i < 8; ++i) bytes[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
  stream.write(bytes, sizeof(bytes));
}

void pack_str(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void pack_hashes(Packer& pk, const std::vector<uint64_t>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (const uint64_t h : hashes) pk.pack_uint64(h);
}

void pack_event(Packer& pk, const WireBlockStored& e) {
  pk.pack_array(7);
  pack_str(pk, "BlockStored");
  pack_hashes(pk, e.block_hashes);
  if (e.parent_block_hash) {
    pk.pack_uint64(*e.parent_block_hash);
  } else {
    pk.pack_nil();
  }
  pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
  for (const int32_t t : e.token_ids) pk.pack_int32(t);
  pk.pack_int32(e.block_size);
  pk.pack_nil();  // lora_id
  pack_str(pk, kv_medium_name(e.medium));
}

void pack_event(Packer& pk, const WireBlockRemoved& e) {
  pk.pack_array(3);
  pack_str(pk, "BlockRemoved");
  pack_hashes(pk, e.block_hashes);
  pack_str(pk, kv_medium_name(e.medium));
}

void pack_event(Packer& pk, const WireAllBlocksCleared& /*e*/) {
  pk.pack_array(1);
  pack_str(pk, "AllBlocksCleared");
}

}  // namespace

uint64_t wire_block_hash(const BlockHash& hash) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | hash.bytes[i];
  return v;
}

void WireKvEventBatch::add_stored(uint64_t hash, std::optional<uint64_t> parent,
                                  const int32_t* tokens, int32_t block_size) {
  STRATA_CHECK(block_size > 0, "add_stored: block_size must be positive");
  auto* last = events.empty() ? nullptr : std::get_if<WireBlockStored>(&events.back());
  if (last == nullptr || last->medium != KvMedium::kDevice || last->block_size != block_size ||
      parent != last->block_hashes.back()) {
    last = &std::get<WireBlockStored>(events.emplace_back(WireBlockStored{}));
    last->parent_block_hash = parent;
    last->block_size = block_size;
  }
  last->block_hashes.push_back(hash);
  last->token_ids.insert(last->token_ids.end(), tokens, tokens + block_size);
}

void WireKvEventBatch::add_tier_stored(KvMedium medium, uint64_t hash, int32_t block_size) {
  STRATA_CHECK(medium != KvMedium::kDevice, "add_tier_stored: the pool's blocks go by add_stored");
  STRATA_CHECK(block_size > 0, "add_tier_stored: block_size must be positive");
  auto* last = events.empty() ? nullptr : std::get_if<WireBlockStored>(&events.back());
  if (last == nullptr || last->medium != medium || last->block_size != block_size) {
    last = &std::get<WireBlockStored>(events.emplace_back(WireBlockStored{}));
    last->block_size = block_size;
    last->medium = medium;
  }
  last->block_hashes.push_back(hash);
}

void WireKvEventBatch::add_removed(uint64_t hash, KvMedium medium) {
  auto* last = events.empty() ? nullptr : std::get_if<WireBlockRemoved>(&events.back());
  if (last == nullptr || last->medium != medium) {
    last = &std::get<WireBlockRemoved>(events.emplace_back(WireBlockRemoved{}));
    last->medium = medium;
  }
  last->block_hashes.push_back(hash);
}

int64_t WireKvEventBatch::num_blocks() const {
  int64_t n = 0;
  for (const WireKvEvent& e : events) {
    if (const auto* s = std::get_if<WireBlockStored>(&e)) {
      n += static_cast<int64_t>(s->block_hashes.size());
    } else if (const auto* r = std::get_if<WireBlockRemoved>(&e)) {
      n += static_cast<int64_t>(r->block_hashes.size());
    } else {
      ++n;
    }
  }
  return n;
}

std::string encode_kv_event_batch(const WireKvEventBatch& batch) {
  std::string out;
  StringStream stream{&out};
  Packer pk(stream);
  pk.pack_array(2);  // data_parallel_rank, unset, is omitted as vLLM's msgspec omits it
  pack_float64(stream, batch.ts);
  pk.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const WireKvEvent& e : batch.events) {
    std::visit([&](const auto& event) { pack_event(pk, event); }, e);
  }
  return out;
}

}  // namespace strata::kv
