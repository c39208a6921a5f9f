// parse_trace_text / load_trace: JSONL lines into TraceRecords, every field checked for type and
// range, every failure one message naming the line.

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <variant>

#include "bench/trace.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"

namespace strata::bench {
namespace {

using nlohmann::json;

constexpr int64_t kMaxTokens = int64_t{1} << 30;

class LineError {
 public:
  LineError(std::string_view source, int64_t line)
      : prefix_(std::string(source) + " line " + std::to_string(line) + ": ") {}
  [[noreturn]] void fail(const std::string& message) const { throw Error(prefix_ + message); }

 private:
  std::string prefix_;
};

// An integer field in [lo, hi]; floats (even integral ones) are rejected, as are booleans.
int64_t integer_field(const json& v, const char* name, int64_t lo, int64_t hi, const LineError& e) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) {
      e.fail(std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " +
             std::to_string(hi) + "]");
    }
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    e.fail(std::string(name) + " must be an integer");
  }
  if (x < lo || x > hi) {
    e.fail(std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
  }
  return x;
}

double time_field(const json& v, const char* name, double scale, const LineError& e) {
  if (!v.is_number()) e.fail(std::string(name) + " must be a number");
  const double t = v.get<double>();
  if (!std::isfinite(t) || t < 0) e.fail(std::string(name) + " must be a finite number >= 0");
  if (t * scale > kMaxTraceArrivalS) {
    e.fail(std::string(name) + " " + bounded_dump(v) + " is past year 2286 even as a Unix time (" +
           (scale == 1.0 ? "seconds" : "milliseconds") +
           "): give the time since the trace's start or since the epoch");
  }
  return t * scale;
}

void parse_arrival(const json& j, TraceRecord& r, const LineError& e) {
  const bool has_ts = j.contains("timestamp"), has_at = j.contains("arrival_time");
  if (has_ts && has_at) e.fail("give timestamp (ms) or arrival_time (s), not both");
  if (has_ts) r.arrival_s = time_field(j["timestamp"], "timestamp", 1e-3, e);
  if (has_at) r.arrival_s = time_field(j["arrival_time"], "arrival_time", 1.0, e);
}

void parse_session(const json& j, TraceRecord& r, const LineError& e) {
  if (!j.contains("session_id")) return;
  const json& s = j["session_id"];
  if (s.is_string()) {
    r.session_id = s.get<std::string>();
  } else if (s.is_number_integer() || s.is_number_unsigned()) {
    r.session_id = s.dump();
  } else {
    e.fail("session_id must be a string or an integer");
  }
}

void parse_input(const json& j, TraceRecord& r, const LineError& e) {
  const bool has_ids = j.contains("input_ids"), has_hash = j.contains("hash_ids");
  if (j.contains("input_length")) {
    r.input_length = integer_field(j["input_length"], "input_length", 1, kMaxTokens, e);
  }
  if (has_ids && has_hash) e.fail("give input_ids or hash_ids, not both");
  if (has_ids) {
    const json& ids = j["input_ids"];
    if (!ids.is_array() || ids.empty()) e.fail("input_ids must be a non-empty array of token ids");
    r.input_ids.reserve(ids.size());
    for (const json& id : ids) {
      r.input_ids.push_back(static_cast<int32_t>(
          integer_field(id, "each of input_ids", 0, std::numeric_limits<int32_t>::max(), e)));
    }
    if (r.input_length && *r.input_length != static_cast<int64_t>(r.input_ids.size())) {
      e.fail("input_length " + std::to_string(*r.input_length) + " differs from the " +
             std::to_string(r.input_ids.size()) + " input_ids");
    }
  } else if (has_hash) {
    const json& ids = j["hash_ids"];
    if (!ids.is_array() || ids.empty()) e.fail("hash_ids must be a non-empty array of integers");
    if (!r.input_length) e.fail("hash_ids needs input_length (the last block may be partial)");
    r.hash_ids.reserve(ids.size());
    for (const json& id : ids) {
      r.hash_ids.push_back(
          integer_field(id, "each of hash_ids", 0, std::numeric_limits<int64_t>::max(), e));
    }
  } else if (!r.input_length) {
    e.fail("missing the prompt: give input_length, input_ids or hash_ids");
  }
}

TraceRecord parse_line(std::string_view text, const LineError& e, int64_t line) {
  std::variant<json, JsonInputError> parsed = parse_json_input(text, kMaxFileJsonDepth);
  if (const auto* error = std::get_if<JsonInputError>(&parsed)) {
    e.fail("not valid JSON: " + error->message);
  }
  json j = std::move(std::get<json>(parsed));
  if (!j.is_object()) e.fail("expected a JSON object");
  TraceRecord r;
  r.line = line;
  parse_arrival(j, r, e);
  parse_session(j, r, e);
  parse_input(j, r, e);
  if (!j.contains("output_length")) e.fail("missing output_length");
  r.output_length =
      static_cast<int32_t>(integer_field(j["output_length"], "output_length", 1, kMaxTokens, e));
  if (j.contains("priority")) {
    r.priority = static_cast<int32_t>(integer_field(j["priority"], "priority",
                                                    std::numeric_limits<int32_t>::min(),
                                                    std::numeric_limits<int32_t>::max(), e));
  }
  return r;
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r") == std::string_view::npos; }

}  // namespace

std::vector<TraceRecord> parse_trace_text(std::string_view text, std::string_view source_name) {
  std::vector<TraceRecord> records;
  int64_t line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view s = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (blank(s)) continue;
    const LineError e(source_name, line);
    TraceRecord r = parse_line(s, e, line);
    if (!records.empty()) {
      const TraceRecord& prev = records.back();
      if (prev.arrival_s.has_value() != r.arrival_s.has_value()) {
        e.fail("every line needs an arrival time (timestamp or arrival_time) once one has it");
      }
      if (r.arrival_s && *r.arrival_s < *prev.arrival_s) {
        e.fail("arrival time goes back (line " + std::to_string(prev.line) + " arrives later)");
      }
      const TraceRecord& first = records.front();
      if (r.arrival_s && *r.arrival_s - *first.arrival_s > kMaxTraceSpanS) {
        char days[32];
        std::snprintf(days, sizeof(days), "%.1f", (*r.arrival_s - *first.arrival_s) / 86400.0);
        e.fail("arrives " + std::string(days) + " days after line " + std::to_string(first.line) +
               ": a trace may span at most a week (check the unit: timestamp is in "
               "milliseconds, arrival_time in seconds)");
      }
    }
    records.push_back(std::move(r));
  }
  if (records.empty()) throw Error(std::string(source_name) + ": the trace has no requests");
  return records;
}

std::vector<TraceRecord> load_trace(const std::filesystem::path& path) {
  std::optional<MappedFile> file;
  try {
    file = MappedFile::open(path);  // a directory, /dev/zero or a FIFO is refused, not read
  } catch (const Error& e) {
    throw Error(std::string("cannot read the trace: ") + e.what());
  }
  return parse_trace_text(file->text(), path.string());
}

}  // namespace strata::bench
