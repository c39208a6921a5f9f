#include "router/kv_event_decode.h"

#include <msgpack.hpp>

#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace strata::router {
namespace {

// A batch from an instance is outside input: bounded so a bad one costs little.
constexpr size_t kMaxArray = size_t{1} << 22;
constexpr size_t kMaxString = 1024;
constexpr size_t kMaxDepth = 6;

struct Bad {};  // thrown inside the decoder only, caught at its entry point

const msgpack::object_array& array(const msgpack::object& o) {
  if (o.type != msgpack::type::ARRAY) throw Bad{};
  return o.via.array;
}

uint64_t u64(const msgpack::object& o) {
  // A hash may be written signed by a producer that keeps them as int64: the same 64 bits.
  if (o.type == msgpack::type::POSITIVE_INTEGER) return o.via.u64;
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<uint64_t>(o.via.i64);
  throw Bad{};
}

int32_t i32(const msgpack::object& o) {
  if (o.type == msgpack::type::POSITIVE_INTEGER &&
      o.via.u64 <= uint64_t{std::numeric_limits<int32_t>::max()}) {
    return static_cast<int32_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER &&
      o.via.i64 >= std::numeric_limits<int32_t>::min()) {
    return static_cast<int32_t>(o.via.i64);
  }
  throw Bad{};
}

std::vector<uint64_t> hashes(const msgpack::object& o) {
  const msgpack::object_array& a = array(o);
  std::vector<uint64_t> out;
  out.reserve(a.size);
  for (uint32_t i = 0; i < a.size; ++i) out.push_back(u64(a.ptr[i]));
  return out;
}

// The medium at e[at]: absent or nil is the pool's (vLLM's events before 0.10.2 had none);
// nullopt for a name Strata does not know (the event is skipped).
std::optional<kv::KvMedium> medium(const msgpack::object_array& e, uint32_t at) {
  if (e.size <= at || e.ptr[at].type == msgpack::type::NIL) return kv::KvMedium::kDevice;
  if (e.ptr[at].type != msgpack::type::STR) throw Bad{};
  return kv::kv_medium_from_name(std::string_view(e.ptr[at].via.str.ptr, e.ptr[at].via.str.size));
}

std::optional<kv::WireKvEvent> stored(const msgpack::object_array& e) {
  if (e.size < 5) throw Bad{};
  kv::WireBlockStored s;
  s.block_hashes = hashes(e.ptr[1]);
  if (e.ptr[2].type != msgpack::type::NIL) s.parent_block_hash = u64(e.ptr[2]);
  const msgpack::object_array& tokens = array(e.ptr[3]);
  s.token_ids.reserve(tokens.size);
  for (uint32_t i = 0; i < tokens.size; ++i) s.token_ids.push_back(i32(tokens.ptr[i]));
  s.block_size = i32(e.ptr[4]);
  // The token ids are block_size per block, or none (a tier's blocks, vLLM's offloading form).
  if (s.block_size <= 0 ||
      (!s.token_ids.empty() &&
       s.token_ids.size() != s.block_hashes.size() * static_cast<size_t>(s.block_size))) {
    throw Bad{};
  }
  const std::optional<kv::KvMedium> m = medium(e, 6);
  if (!m) return std::nullopt;
  s.medium = *m;
  return s;
}

std::optional<kv::WireKvEvent> event(const msgpack::object& o) {
  const msgpack::object_array& e = array(o);
  if (e.size == 0 || e.ptr[0].type != msgpack::type::STR) throw Bad{};
  const std::string_view tag(e.ptr[0].via.str.ptr, e.ptr[0].via.str.size);
  if (tag == "BlockStored") return stored(e);
  if (tag == "BlockRemoved") {
    if (e.size < 2) throw Bad{};
    const std::optional<kv::KvMedium> m = medium(e, 2);
    if (!m) return std::nullopt;
    return kv::WireBlockRemoved{hashes(e.ptr[1]), *m};
  }
  if (tag == "AllBlocksCleared") return kv::WireAllBlocksCleared{};
  return std::nullopt;
}

kv::WireKvEventBatch batch(const msgpack::object& o) {
  const msgpack::object_array& b = array(o);
  if (b.size < 2) throw Bad{};
  kv::WireKvEventBatch out;
  if (b.ptr[0].type == msgpack::type::FLOAT64 || b.ptr[0].type == msgpack::type::FLOAT32) {
    out.ts = b.ptr[0].via.f64;
  } else if (b.ptr[0].type == msgpack::type::POSITIVE_INTEGER) {
    // msgpack-c, among others, packs a double that holds an integer as an integer.
    out.ts = static_cast<double>(b.ptr[0].via.u64);
  } else if (b.ptr[0].type == msgpack::type::NEGATIVE_INTEGER) {
    out.ts = static_cast<double>(b.ptr[0].via.i64);
  } else {
    throw Bad{};
  }
  const msgpack::object_array& events = array(b.ptr[1]);
  for (uint32_t i = 0; i < events.size; ++i) {
    if (std::optional<kv::WireKvEvent> e = event(events.ptr[i])) out.events.push_back(*e);
  }
  return out;
}

}  // namespace

Result<kv::WireKvEventBatch> decode_kv_event_batch(std::string_view payload) {
  try {
    const msgpack::unpack_limit limit(kMaxArray, 0, kMaxString, kMaxString, kMaxString, kMaxDepth);
    const msgpack::object_handle h =
        msgpack::unpack(payload.data(), payload.size(), nullptr, nullptr, limit);
    return batch(h.get());
  } catch (const Bad&) {
    return Status::InvalidArgument("not a KV event batch of vLLM's shape");
  } catch (const std::exception& e) {  // msgpack's own: truncated, a limit passed, bad bytes
    return Status::InvalidArgument(std::string("not msgpack: ") + e.what());
  }
}

}  // namespace strata::router
