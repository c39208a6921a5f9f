#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "core/quote.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace strata::tokenizer {
namespace {

// Byte-level characters back to bytes; a token with any character outside the alphabet (an
// added token such as "<｜User｜>") keeps its own UTF-8 bytes. Not repaired: the bytes may end in
// part of a character.
std::string byte_level_bytes(const std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& t : tokens) {
    const size_t mark = bytes.size();
    bool all = true;
    for (size_t i = 0; i < t.size();) {
      char32_t cp;
      i += utf8_decode(t, i, cp);
      const int b = unicode_to_byte(cp);
      if (b < 0) {
        all = false;
        break;
      }
      bytes += static_cast<char>(b);
    }
    if (!all) {
      bytes.resize(mark);
      bytes += t;
    }
  }
  return bytes;
}

int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// Runs of <0xXX> tokens become their UTF-8 text, or one U+FFFD per byte when not valid UTF-8.
// raw: a run of byte tokens stays the bytes it is, valid UTF-8 or not (Decoder::decode_bytes).
void byte_fallback(std::vector<std::string>& tokens, bool raw) {
  std::vector<std::string> out;
  std::string pending;
  size_t pending_count = 0;
  const auto flush = [&] {
    if (pending_count == 0) return;
    if (raw || is_valid_utf8(pending)) {
      out.push_back(pending);
    } else {
      for (size_t k = 0; k < pending_count; ++k) out.emplace_back(kReplacementChar);
    }
    pending.clear();
    pending_count = 0;
  };
  for (std::string& t : tokens) {
    if (const int b = byte_token_value(t); b >= 0) {
      pending += static_cast<char>(b);
      ++pending_count;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens.swap(out);
}

// Removes up to `start` leading and `stop` trailing copies of the one-character `content`.
std::string strip(const std::string& t, const std::string& content, size_t start, size_t stop) {
  size_t begin = 0, end = t.size();
  for (size_t k = 0; k < start && t.compare(begin, content.size(), content) == 0 && begin < end;
       ++k) {
    begin += content.size();
  }
  for (size_t k = 0; k < stop && end >= begin + content.size() &&
                     t.compare(end - content.size(), content.size(), content) == 0;
       ++k) {
    end -= content.size();
  }
  return t.substr(begin, end - begin);
}

bool one_character(const std::string& s) {
  return !s.empty() && utf8_valid_length(s, 0) == s.size();
}

}  // namespace

void Decoder::add_json(const nlohmann::json& j, const std::string& where, std::vector<Step>& out) {
  if (j.is_null()) return;
  const std::string type = json_string(j, "type", where + ": decoder");
  const std::string ctx = where + ": decoder " + type;
  // After a Fuse or ByteLevel the tokens are one text; a step that rewrites more than one
  // character of it at a time would change text a stream has already emitted (see decoder.h).
  const bool joined = std::any_of(out.begin(), out.end(), [](const Step& s) {
    return s.kind == Kind::kByteLevel || s.kind == Kind::kFuse;
  });
  const auto refuse_if_joined = [&](const std::string& what) {
    if (joined) {
      throw Error(ctx + ": " + what + " after a Fuse or ByteLevel decoder is not supported");
    }
  };
  if (type == "Sequence") {
    for (const auto& child : json_array(j, "decoders", ctx)) add_json(child, where, out);
  } else if (type == "ByteLevel") {
    refuse_if_joined("a ByteLevel");
    out.push_back({Kind::kByteLevel});
  } else if (type == "Metaspace") {
    Step s{Kind::kMetaspace, json_string(j, "replacement", ctx)};
    if (!one_character(s.a)) throw Error(ctx + ": 'replacement' must be one character");
    if (j.contains("prepend_scheme")) {
      s.prepend = json_string(j, "prepend_scheme", ctx) != "never";
    } else {
      s.prepend = json_bool(j, "add_prefix_space", true, ctx);
    }
    out.push_back(std::move(s));
  } else if (type == "Replace") {
    Step s{Kind::kReplace, json_string_pattern(j, ctx), json_string(j, "content", ctx)};
    if (s.a.size() > 1 && !one_character(s.a)) {
      refuse_if_joined("a Replace of more than one character");
    }
    out.push_back(std::move(s));
  } else if (type == "ByteFallback") {
    refuse_if_joined("a ByteFallback");
    out.push_back({Kind::kByteFallback});
  } else if (type == "Fuse") {
    out.push_back({Kind::kFuse});
  } else if (type == "Strip") {
    Step s{Kind::kStrip, {}, json_string(j, "content", ctx)};
    const auto count = [&](const char* key) {
      const nlohmann::json& v = json_field(j, key, ctx);
      if (!v.is_number_unsigned()) throw Error(ctx + ": '" + key + "' must be a count");
      return v.get<size_t>();
    };
    s.start = count("start");
    s.stop = count("stop");
    if (!one_character(s.b)) throw Error(ctx + ": 'content' must be one character");
    out.push_back(std::move(s));
  } else {
    throw Error(where + ": decoder type " + quote(type) + " is not supported");
  }
}

Decoder Decoder::from_json(const nlohmann::json& j, const std::string& where) {
  Decoder d;
  d.null_ = j.is_null();
  add_json(j, where, d.steps_);
  bool joined = false;
  for (const Step& step : d.steps_) {
    d.acts_at_text_end_ |= joined && step.kind == Kind::kStrip && step.stop > 0;
    joined = joined || step.kind == Kind::kByteLevel || step.kind == Kind::kFuse;
  }
  return d;
}

void Decoder::apply(const Step& step, std::vector<std::string>& tokens, bool raw,
                    bool at_text_start, bool at_text_end, bool joined) {
  switch (step.kind) {
    case Kind::kByteLevel: {
      std::string text = byte_level_bytes(tokens);
      if (!raw) text = utf8_lossy(text);
      tokens.clear();
      tokens.push_back(std::move(text));
      break;
    }
    case Kind::kMetaspace:
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string t = replace_all(tokens[i], step.a, " ");
        if (i == 0 && at_text_start && step.prepend && !t.empty() && t[0] == ' ') t.erase(0, 1);
        tokens[i] = std::move(t);
      }
      break;
    case Kind::kReplace:
      for (std::string& t : tokens) t = replace_all(t, step.a, step.b);
      break;
    case Kind::kByteFallback:
      byte_fallback(tokens, raw);
      break;
    case Kind::kFuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.clear();
      tokens.push_back(std::move(all));
      break;
    }
    case Kind::kStrip:
      // Once joined, the one token's ends are the text's ends: a window mid-text has neither.
      for (std::string& t : tokens) {
        t = strip(t, step.b, !joined || at_text_start ? step.start : 0,
                  !joined || at_text_end ? step.stop : 0);
      }
      break;
  }
}

std::string Decoder::decode(std::vector<std::string> tokens, bool at_text_start,
                            bool at_text_end) const {
  return utf8_lossy(decode_bytes(std::move(tokens), at_text_start, at_text_end));
}

std::string Decoder::decode_bytes(std::vector<std::string> tokens, bool at_text_start,
                                  bool at_text_end) const {
  std::string text;
  if (null_) {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    return text;
  }
  bool joined = false;
  for (const Step& step : steps_) {
    apply(step, tokens, /*raw=*/true, at_text_start, at_text_end, joined);
    joined = joined || step.kind == Kind::kByteLevel || step.kind == Kind::kFuse;
  }
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace strata::tokenizer
