#include "strata/sampling_params.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/status.h"

namespace strata {
namespace {

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

Status out_of_range(const char* field, const char* expected, double got) {
  return Status::InvalidArgument(std::string(field) + " must be " + expected + ", got " +
                                 format_number(got));
}

Status validate_floats(const SamplingParams& p) {
  // Written as !(in range) so that NaN, which fails every comparison, is rejected too.
  if (!(p.temperature >= 0.0f && std::isfinite(p.temperature))) {
    return out_of_range("temperature", "a finite number >= 0 (0 = greedy)", p.temperature);
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return out_of_range("top_p", "in (0, 1] (1 = off)", p.top_p);
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return out_of_range("min_p", "in [0, 1] (0 = off)", p.min_p);
  }
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty))) {
    return out_of_range("repetition_penalty", "a finite number > 0 (1 = off)",
                        p.repetition_penalty);
  }
  constexpr float kMax = SamplingParams::kMaxAbsPenalty;
  if (!(p.presence_penalty >= -kMax && p.presence_penalty <= kMax)) {
    return out_of_range("presence_penalty", "in [-2, 2] (0 = off)", p.presence_penalty);
  }
  if (!(p.frequency_penalty >= -kMax && p.frequency_penalty <= kMax)) {
    return out_of_range("frequency_penalty", "in [-2, 2] (0 = off)", p.frequency_penalty);
  }
  return Status::Ok();
}

Status validate_counts(const SamplingParams& p, int32_t vocab_size) {
  if (p.top_k < -1) {
    return out_of_range("top_k", "-1 or 0 (off), or >= 1", p.top_k);
  }
  if (p.max_tokens < 1) {
    return out_of_range("max_tokens", ">= 1", p.max_tokens);
  }
  constexpr int32_t kMaxK = SamplingParams::kMaxLogprobs;
  if (p.logprobs < -1 || p.logprobs > kMaxK) {
    return out_of_range("logprobs", "-1 (none) or in [0, 20]", p.logprobs);
  }
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > kMaxK) {
    return out_of_range("prompt_logprobs", "-1 (none) or in [0, 20]", p.prompt_logprobs);
  }
  for (const int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return Status::InvalidArgument("stop_token_ids: token id " + std::to_string(id) +
                                     " is outside the vocabulary [0, " +
                                     std::to_string(vocab_size) + ")");
    }
  }
  return Status::Ok();
}

Status validate_structured(const StructuredOutput& s) {
  using Kind = StructuredOutput::Kind;
  const bool has_spec =
      s.kind == Kind::kJsonSchema || s.kind == Kind::kRegex || s.kind == Kind::kGrammar;
  if (has_spec && s.spec.empty()) {
    return Status::InvalidArgument(std::string("structured output ") +
                                   structured_output_kind_name(s.kind) + ": the spec is empty");
  }
  if (!has_spec && !s.spec.empty()) {
    return Status::InvalidArgument(std::string("structured output ") +
                                   structured_output_kind_name(s.kind) + " takes no spec");
  }
  if ((s.kind == Kind::kChoice) == s.choices.empty()) {
    return Status::InvalidArgument(s.kind == Kind::kChoice
                                       ? "structured output choice: the list of choices is empty"
                                       : "structured output: choices are for kind choice only");
  }
  if (!s.active() && (!s.prefix.empty() || !s.suffix.empty() || s.repeated)) {
    return Status::InvalidArgument("structured output: markers without a constraint");
  }
  if (!s.separator.empty() && !s.repeated) {
    return Status::InvalidArgument("structured output: a separator is for repeated texts only");
  }
  return Status::Ok();
}

}  // namespace

const char* structured_output_kind_name(StructuredOutput::Kind kind) {
  switch (kind) {
    case StructuredOutput::Kind::kNone:
      return "none";
    case StructuredOutput::Kind::kJsonSchema:
      return "json_schema";
    case StructuredOutput::Kind::kJsonObject:
      return "json_object";
    case StructuredOutput::Kind::kRegex:
      return "regex";
    case StructuredOutput::Kind::kChoice:
      return "choice";
    case StructuredOutput::Kind::kGrammar:
      return "grammar";
  }
  return "unknown";
}

Status SamplingParams::validate(int32_t vocab_size) const {
  STRATA_CHECK(vocab_size > 0, "SamplingParams::validate: vocab_size must be positive");
  STRATA_RETURN_IF_ERROR(validate_floats(*this));
  STRATA_RETURN_IF_ERROR(validate_structured(structured));
  return validate_counts(*this, vocab_size);
}

}  // namespace strata
