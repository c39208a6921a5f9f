#pragma once
// PostProcessor: what encode(add_special_tokens=true) wraps around a single sequence: the
// "post_processor" of tokenizer.json (TemplateProcessing, BertProcessing, RobertaProcessing, and
// Sequences; ByteLevel only adjusts offsets, so it adds nothing), optionally replaced by the
// add_bos_token / add_eos_token rule of tokenizer_config.json (see Tokenizer).
//
// Owns the ids to put before and after the sequence. Immutable; thread-safe; O(ids) per call.

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace strata::tokenizer {

class PostProcessor {
 public:
  PostProcessor() = default;
  PostProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  // Recurses once per nested Sequence: `j` must come from parse_json_file (core/json_input.h),
  // whose depth limit bounds the recursion.
  static PostProcessor from_json(const nlohmann::json& j, const std::string& where);

  std::vector<int32_t> apply(std::vector<int32_t> ids) const;
  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  static void add_json(const nlohmann::json& j, const std::string& where, PostProcessor& p);

  std::vector<int32_t> prefix_, suffix_;
};

}  // namespace strata::tokenizer
