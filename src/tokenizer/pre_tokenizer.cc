#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/quote.h"
#include "tokenizer/json_util.h"

namespace strata::tokenizer {
namespace {

// GPT-2's pattern, which ByteLevel uses when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

PreTokenizer::Behavior PreTokenizer::parse_behavior(const std::string& name,
                                                    const std::string& ctx) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw Error(ctx + ": unknown behavior " + quote(name));
}

void PreTokenizer::add_json(const nlohmann::json& j, const std::string& where,
                            std::vector<Step>& out, bool& byte_level) {
  if (j.is_null()) return;
  const std::string type = json_string(j, "type", where + ": pre_tokenizer");
  const std::string ctx = where + ": pre_tokenizer " + type;
  const auto regex = [&](const std::string& pattern, bool literal) {
    return std::make_shared<const Regex>(pattern, literal, ctx);
  };
  if (type == "Sequence") {
    for (const auto& child : json_array(j, "pretokenizers", ctx))
      add_json(child, where, out, byte_level);
  } else if (type == "Split") {
    bool is_regex = false;
    const std::string pattern = json_pattern(j, ctx, is_regex);
    Step s{Kind::kSplit, regex(pattern, !is_regex)};
    s.behavior = parse_behavior(json_string(j, "behavior", ctx), ctx);
    s.invert = json_bool(j, "invert", false, ctx);
    out.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    byte_level = true;
    if (json_bool(j, "add_prefix_space", false, ctx)) out.push_back({Kind::kByteLevelPrefix});
    if (json_bool(j, "use_regex", true, ctx))
      out.push_back({Kind::kSplit, regex(kGpt2Pattern, false)});
  } else if (type == "Metaspace") {
    Step s{Kind::kMetaspace};
    s.replacement = json_string(j, "replacement", ctx);
    const std::string scheme = j.contains("prepend_scheme") ? json_string(j, "prepend_scheme", ctx)
                               : json_bool(j, "add_prefix_space", true, ctx) ? "always"
                                                                             : "never";
    if (scheme == "always")
      s.prepend = Prepend::kAlways;
    else if (scheme == "first")
      s.prepend = Prepend::kFirst;
    else if (scheme == "never")
      s.prepend = Prepend::kNever;
    else
      throw Error(ctx + ": unknown prepend_scheme " + quote(scheme));
    s.split = json_bool(j, "split", true, ctx);
    out.push_back(std::move(s));
  } else if (type == "Whitespace") {
    Step s{Kind::kSplit, regex(R"(\w+|[^\w\s]+)", false), Behavior::kRemoved, true};
    out.push_back(std::move(s));
  } else if (type == "WhitespaceSplit") {
    out.push_back({Kind::kSplit, regex(R"(\s+)", false), Behavior::kRemoved});
  } else if (type == "Digits") {
    const bool individual = json_bool(j, "individual_digits", false, ctx);
    out.push_back({Kind::kSplit, regex(R"(\p{N})", false),
                   individual ? Behavior::kIsolated : Behavior::kContiguous});
  } else {
    throw Error(where + ": pre_tokenizer type " + quote(type) + " is not supported");
  }
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  add_json(j, where, p.steps_, p.byte_level_);
  return p;
}

// Cuts `piece` at the regex matches; `invert` swaps which parts count as matches, and the
// behavior decides where matched parts go (the semantics of Hugging Face's SplitDelimiterBehavior).
void PreTokenizer::split(const Step& step, std::string_view piece, std::vector<std::string>& out) {
  std::vector<std::pair<size_t, size_t>> hits;
  step.regex->find_all(piece, hits);
  struct Part {
    size_t begin, end;
    bool match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  for (const auto& [b, e] : hits) {
    if (b > prev) parts.push_back({prev, b, step.invert});
    parts.push_back({b, e, !step.invert});
    prev = e;
  }
  if (prev < piece.size()) parts.push_back({prev, piece.size(), step.invert});

  std::vector<std::pair<size_t, size_t>> merged;
  bool previous_match = false;
  switch (step.behavior) {
    case Behavior::kRemoved:
      for (const Part& p : parts)
        if (!p.match) merged.emplace_back(p.begin, p.end);
      break;
    case Behavior::kIsolated:
      for (const Part& p : parts) merged.emplace_back(p.begin, p.end);
      break;
    case Behavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.match && !previous_match && !merged.empty())
          merged.back().second = p.end;
        else
          merged.emplace_back(p.begin, p.end);
        previous_match = p.match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t i = parts.size(); i-- > 0;) {
        const Part& p = parts[i];
        if (p.match && !previous_match && !merged.empty())
          merged.back().first = p.begin;
        else
          merged.emplace_back(p.begin, p.end);
        previous_match = p.match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case Behavior::kContiguous:
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0 && parts[i].match == previous_match)
          merged.back().second = parts[i].end;
        else
          merged.emplace_back(parts[i].begin, parts[i].end);
        previous_match = parts[i].match;
      }
      break;
  }
  for (const auto& [b, e] : merged) {
    if (e > b) out.emplace_back(piece.substr(b, e - b));
  }
}

void PreTokenizer::metaspace(const Step& step, std::string_view piece, bool first,
                             std::vector<std::string>& out) {
  std::string s;
  s.reserve(piece.size() + step.replacement.size());
  for (const char c : piece) {
    if (c == ' ')
      s += step.replacement;
    else
      s += c;
  }
  const bool starts = s.compare(0, step.replacement.size(), step.replacement) == 0;
  if (!starts && (step.prepend == Prepend::kAlways || (step.prepend == Prepend::kFirst && first))) {
    s.insert(0, step.replacement);
  }
  if (!step.split || step.replacement.empty()) {
    if (!s.empty()) out.push_back(std::move(s));
    return;
  }
  // MergedWithNext on the replacement: each piece starts at a replacement character.
  size_t begin = 0;
  for (size_t pos = s.find(step.replacement, 1); pos != std::string::npos;
       pos = s.find(step.replacement, pos + step.replacement.size())) {
    if (pos > begin) out.push_back(s.substr(begin, pos - begin));
    begin = pos;
  }
  if (begin < s.size()) out.push_back(s.substr(begin));
}

void PreTokenizer::run(std::string_view text, bool at_text_start,
                       std::vector<std::string>& pieces) const {
  if (text.empty()) return;
  std::vector<std::string> current{std::string(text)}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (size_t i = 0; i < current.size(); ++i) {
      switch (step.kind) {
        case Kind::kSplit:
          split(step, current[i], next);
          break;
        case Kind::kByteLevelPrefix:
          next.push_back(current[i][0] == ' ' ? current[i] : " " + current[i]);
          break;
        case Kind::kMetaspace:
          metaspace(step, current[i], at_text_start && i == 0, next);
          break;
      }
    }
    current.swap(next);
  }
  for (std::string& p : current) pieces.push_back(std::move(p));
}

}  // namespace strata::tokenizer
