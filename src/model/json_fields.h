#pragma once
// Internal to src/model (not a public header: it pulls in nlohmann/json). Typed, checked reads of
// JSON objects for the checkpoint-file parsers, so that a value of the wrong type becomes a
// strata::Error naming the file and the key, never a nlohmann exception or a crash.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "core/quote.h"

namespace strata::model {

// Parses `text` as JSON through core's one entry point for files (parse_json_file: UTF-8, no NUL,
// nesting at most kMaxFileJsonDepth) and checks that it is an object. Throws strata::Error
// "<source>: <what> is not valid JSON: ..." or "... is not a JSON object". Messages quote values
// with quote() and bounded_dump() (core), never a whole value.
nlohmann::json parse_json_object(std::string_view text, std::string_view source,
                                 std::string_view what);

// Reads the fields of one JSON object. A key whose value is null counts as absent. Every failure
// throws strata::Error "<source>: '<prefix><key>' must be ..., got <type>". Holds references: the
// object and the strings must outlive the reader. Cheap to construct.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string_view source, std::string_view prefix = "");

  bool has(std::string_view key) const;                    // present and not null
  const nlohmann::json* find(std::string_view key) const;  // nullptr when absent or null

  int64_t get_int(std::string_view key) const;  // required
  std::optional<int64_t> opt_int(std::string_view key) const;
  double get_number(std::string_view key) const;  // required; integers accepted
  std::optional<double> opt_number(std::string_view key) const;
  std::optional<bool> opt_bool(std::string_view key) const;
  std::optional<std::string> opt_string(std::string_view key) const;
  // A token id list: an integer, a list of integers, or absent/null (-> empty). Ids must be >= 0.
  std::vector<int64_t> id_list(std::string_view key) const;
  // The object under `key`, or nullptr when absent or null; throws if it is not an object.
  const nlohmann::json* opt_object(std::string_view key) const;

  // Fails "'<key>' must be in [lo, hi], got <value>" unless lo <= value <= hi.
  void check_in(std::string_view key, int64_t value, int64_t lo, int64_t hi) const;

  // "'<prefix><key>'", for messages.
  std::string name(std::string_view key) const;
  [[noreturn]] void fail(const std::string& what) const;

 private:
  int64_t to_int(const nlohmann::json& value, std::string_view key) const;

  const nlohmann::json& object_;
  std::string_view source_;
  std::string_view prefix_;
};

}  // namespace strata::model
