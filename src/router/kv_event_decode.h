#pragma once
// Decoding the KV events an instance publishes (vLLM's KVEventBatch in msgpack, the inverse of
// kv/kv_event_wire.h's encoder; docs/kv-events.md). Events of kinds the router does not know
// (later vLLM releases add some), or of a medium it does not know, are skipped; fields appended
// to known events are ignored; a missing or nil medium is the pool's. A pure function:
// thread-safe.

#include <string_view>

#include "core/status.h"
#include "kv/kv_event_wire.h"

namespace strata::router {

// The batch in payload, or InvalidArgument when it is not msgpack of that shape (wrong types,
// a stored event whose token ids are not block_size per block, nesting or sizes beyond bounds).
Result<kv::WireKvEventBatch> decode_kv_event_batch(std::string_view payload);

}  // namespace strata::router
