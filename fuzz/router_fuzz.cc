// libFuzzer target: what `strata route` reads from outside -- a --backend argument
// (router/backend_spec.h) and a KV event batch an instance publishes (router/kv_event_decode.h).
// The first byte picks which; the rest is the input. A --backend the parser accepts must be
// accepted again in the canonical form it describes; a batch the decoder accepts must survive
// the publisher's encoder and decode to the same events, and feed a PrefixIndex. A crash, an
// overread or a sanitizer report is a bug.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "kv/kv_event_wire.h"
#include "router/backend_spec.h"
#include "router/kv_event_decode.h"
#include "router/prefix_index.h"

namespace {

using namespace strata;

void fuzz_backend(std::string_view text) {
  const Result<router::BackendSpec> r = router::parse_backend_spec(text);
  if (!r.ok()) {
    STRATA_CHECK(r.status().code() == StatusCode::kInvalidArgument, "a refusal says why");
    return;
  }
  const router::BackendSpec& s = r.value();
  std::string canonical = s.url;
  if (!s.events.empty()) canonical += ",events=" + s.events;
  if (!s.replay.empty()) canonical += ",replay=" + s.replay;
  const Result<router::BackendSpec> again = router::parse_backend_spec(canonical);
  STRATA_CHECK(again.ok() && again.value() == s, "the canonical form parses to the same spec");
}

void fuzz_batch(std::string_view payload) {
  const Result<kv::WireKvEventBatch> r = router::decode_kv_event_batch(payload);
  if (!r.ok()) return;
  const Result<kv::WireKvEventBatch> again =
      router::decode_kv_event_batch(kv::encode_kv_event_batch(r.value()));
  STRATA_CHECK(again.ok(), "a decoded batch re-encodes to one that decodes");
  STRATA_CHECK(again.value().num_blocks() == r.value().num_blocks(), "the same blocks");
  router::PrefixIndex index;
  index.apply(r.value());
  STRATA_CHECK(index.num_blocks() <= static_cast<size_t>(r.value().num_blocks()), "bounded");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    fuzz_backend(rest);
  } else {
    fuzz_batch(rest);
  }
  return 0;
}
