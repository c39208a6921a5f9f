// libFuzzer target: the KV codec's decoder (kv/kv_codec.h) on arbitrary bytes, as a transfer or
// a tier read would hand it a stream. A stream is decoded or refused with InvalidArgument; a
// crash, an overread or a sanitizer report is a bug. What decodes is encoded again by the scheme
// it named and must decode to the same bytes.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "kv/kv_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto stream = std::as_bytes(std::span(data, size));
  const strata::Result<strata::kv::KvStreamInfo> info = strata::kv::kv_stream_info(stream);
  if (!info.ok() || info->raw_bytes > (size_t{1} << 20)) return 0;
  std::vector<std::byte> out(info->raw_bytes);
  const strata::Status s = strata::kv::kv_decode(stream, out);
  if (!s.ok()) {
    STRATA_CHECK(s.code() == strata::StatusCode::kInvalidArgument, "a refused stream says why");
    return 0;
  }
  std::string again;
  strata::kv::kv_encode(out, strata::kv::KvCodecPlan{.scheme = info->scheme}, again);
  std::vector<std::byte> back(out.size());
  STRATA_CHECK(
      strata::kv::kv_decode(std::as_bytes(std::span(again.data(), again.size())), back).ok(),
      "a stream the codec wrote decodes");
  STRATA_CHECK(back == out, "a stream decodes to what was encoded");
  return 0;
}
