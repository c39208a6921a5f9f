#include "tokenizer/normalizer.h"

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "core/quote.h"
#include "tokenizer/json_util.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {
namespace {

std::string unicode_normal_form(std::string_view text, utf8proc_option_t options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) return std::string(text);  // unreachable for valid UTF-8
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    i += utf8_decode(text, i, cp);
    utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
  }
  return out;
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  while (left && begin < end) {
    char32_t cp;
    const size_t n = utf8_decode(text, begin, cp);
    if (!is_unicode_whitespace(cp)) break;
    begin += n;
  }
  while (right && end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    char32_t cp;
    utf8_decode(text, start, cp);
    if (!is_unicode_whitespace(cp)) break;
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

bool is_ascii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

std::string replace_all(std::string_view text, std::string_view pattern, std::string_view with) {
  if (pattern.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(pattern, pos)) != std::string_view::npos;) {
    out.append(text.substr(pos, hit - pos));
    out.append(with);
    pos = hit + pattern.size();
  }
  out.append(text.substr(pos));
  return out;
}

void Normalizer::add_json(const nlohmann::json& j, const std::string& where,
                          std::vector<Step>& out) {
  if (j.is_null()) return;
  const std::string type = json_string(j, "type", where + ": normalizer");
  const std::string ctx = where + ": normalizer " + type;
  if (type == "Sequence") {
    for (const auto& child : json_array(j, "normalizers", ctx)) add_json(child, where, out);
  } else if (type == "NFC") {
    out.push_back({Kind::kNfc, {}, {}});
  } else if (type == "NFD") {
    out.push_back({Kind::kNfd, {}, {}});
  } else if (type == "NFKC") {
    out.push_back({Kind::kNfkc, {}, {}});
  } else if (type == "NFKD") {
    out.push_back({Kind::kNfkd, {}, {}});
  } else if (type == "Lowercase") {
    out.push_back({Kind::kLowercase, {}, {}});
  } else if (type == "Prepend") {
    out.push_back({Kind::kPrepend, json_string(j, "prepend", ctx), {}});
  } else if (type == "Replace") {
    out.push_back({Kind::kReplace, json_string_pattern(j, ctx), json_string(j, "content", ctx)});
  } else if (type == "Strip") {
    Step s{Kind::kStrip, {}, {}};
    s.left = json_bool(j, "strip_left", false, ctx);
    s.right = json_bool(j, "strip_right", false, ctx);
    out.push_back(s);
  } else {
    throw Error(where + ": normalizer type " + quote(type) + " is not supported");
  }
}

Normalizer Normalizer::from_json(const nlohmann::json& j, const std::string& where) {
  Normalizer n;
  add_json(j, where, n.steps_);
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    const bool ascii = step.kind <= Kind::kNfkd && is_ascii(s);  // every normal form keeps ASCII
    if (ascii) continue;
    switch (step.kind) {
      case Kind::kNfc:
        s = unicode_normal_form(s, UTF8PROC_COMPOSE);
        break;
      case Kind::kNfd:
        s = unicode_normal_form(s, UTF8PROC_DECOMPOSE);
        break;
      case Kind::kNfkc:
        s = unicode_normal_form(s,
                                static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
        break;
      case Kind::kNfkd:
        s = unicode_normal_form(
            s, static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
        break;
      case Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.a);
        break;
      case Kind::kReplace:
        s = replace_all(s, step.a, step.b);
        break;
      case Kind::kLowercase:
        s = lowercase(s);
        break;
      case Kind::kStrip:
        s = strip(s, step.left, step.right);
        break;
    }
  }
  return s;
}

}  // namespace strata::tokenizer
