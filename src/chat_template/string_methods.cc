#include "chat_template/string_methods.h"

#include <cstdint>

#include "chat_template/builtins.h"
#include "chat_template/evaluator.h"

namespace strata::chat_template {
namespace {

bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_alpha(char c) { return is_lower(c) || is_upper(c); }

const std::string& string_arg(CallArgs& args, size_t position, const char* keyword,
                              const char* method) {
  const Value* v = find_arg(args, position, keyword);
  if (!v || !v->is_string()) {
    Evaluator::runtime_error(std::string(method) + "() needs a string argument '" + keyword + "'");
  }
  return v->as_string();
}

int64_t int_arg(CallArgs& args, size_t position, const char* keyword, int64_t absent) {
  const Value* v = find_arg(args, position, keyword);
  if (!v || v->is_none()) return absent;
  if (v->kind() != ValueKind::kInt)
    Evaluator::runtime_error(std::string("'") + keyword + "' must be an integer");
  return v->as_int();
}

Value strip_method(const std::string& s, bool left, bool right) {
  return Value::callable([s, left, right](Evaluator&, CallArgs& args) {
    const Value* chars = find_arg(args, 0, "chars");
    std::string_view set =
        chars && chars->is_string() ? std::string_view(chars->as_string()) : kWhitespace;
    return Value::string(strip_chars(s, set, left, right));
  });
}

Value affix_method(const std::string& s, bool prefix) {
  return Value::callable([s, prefix](Evaluator&, CallArgs& args) {
    const Value* arg = find_arg(args, 0, prefix ? "prefix" : "suffix");
    List options;
    if (arg && arg->is_string())
      options.push_back(*arg);
    else if (arg && arg->is_list())
      options = arg->as_list();
    else
      Evaluator::runtime_error(prefix ? "startswith() needs a string"
                                      : "endswith() needs a string");
    for (const Value& o : options) {
      if (!o.is_string()) continue;
      const std::string& a = o.as_string();
      if (a.size() <= s.size() && s.compare(prefix ? 0 : s.size() - a.size(), a.size(), a) == 0) {
        return Value::boolean(true);
      }
    }
    return Value::boolean(false);
  });
}

}  // namespace

std::string strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end && chars.find(s[begin]) != std::string_view::npos) ++begin;
  }
  if (right) {
    while (end > begin && chars.find(s[end - 1]) != std::string_view::npos) --end;
  }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> split_string(const std::string& s, const Value& sep, int64_t max_split) {
  std::vector<std::string> parts;
  if (sep.is_undefined() || sep.is_none()) {  // runs of whitespace, no empty parts
    size_t at = 0;
    while (true) {
      while (at < s.size() && kWhitespace.find(s[at]) != std::string_view::npos) ++at;
      if (at >= s.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        parts.push_back(strip_chars(s.substr(at), kWhitespace, false, true));
        break;
      }
      size_t end = at;
      while (end < s.size() && kWhitespace.find(s[end]) == std::string_view::npos) ++end;
      parts.push_back(s.substr(at, end - at));
      at = end;
    }
    return parts;
  }
  if (!sep.is_string() || sep.as_string().empty())
    Evaluator::runtime_error("split() needs a non-empty separator");
  const std::string& d = sep.as_string();
  size_t at = 0;
  while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
    size_t found = s.find(d, at);
    if (found == std::string::npos) break;
    parts.push_back(s.substr(at, found - at));
    at = found + d.size();
  }
  parts.push_back(s.substr(at));
  return parts;
}

std::string replace_all(Evaluator& ev, const std::string& s, const std::string& from,
                        const std::string& to, int64_t count) {
  std::string out;
  size_t at = 0;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` around every character
    ev.charge_string(s.size() + (s.size() + 1) * to.size());
    for (char c : s) {
      if (count >= 0 && done++ >= count) {
        out += c;
        continue;
      }
      out += to;
      out += c;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  while (count < 0 || done < count) {
    size_t found = s.find(from, at);
    if (found == std::string::npos) break;
    out.append(s, at, found - at);
    out += to;
    ev.check_size(out.size());
    at = found + from.size();
    ++done;
  }
  out.append(s, at, std::string::npos);
  ev.charge_string(out.size());
  return out;
}

std::string to_upper(std::string s) {
  for (char& c : s) {
    if (is_lower(c)) c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}
std::string to_lower(std::string s) {
  for (char& c : s) {
    if (is_upper(c)) c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}
std::string to_title(std::string s) {
  bool previous_cased = false;
  for (char& c : s) {
    if (is_alpha(c)) {
      c = previous_cased ? to_lower(std::string(1, c))[0] : to_upper(std::string(1, c))[0];
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return s;
}
std::string capitalize(std::string s) {
  s = to_lower(std::move(s));
  if (!s.empty() && is_lower(s[0])) s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

Value string_method(const std::string& s, const std::string& name) {
  if (name == "strip") return strip_method(s, true, true);
  if (name == "lstrip") return strip_method(s, true, false);
  if (name == "rstrip") return strip_method(s, false, true);
  if (name == "startswith") return affix_method(s, true);
  if (name == "endswith") return affix_method(s, false);
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return Value::callable([s, name](Evaluator&, CallArgs&) {
      if (name == "upper") return Value::string(to_upper(s));
      if (name == "lower") return Value::string(to_lower(s));
      if (name == "title") return Value::string(to_title(s));
      return Value::string(capitalize(s));
    });
  }
  if (name == "split") {
    return Value::callable([s](Evaluator& ev, CallArgs& args) {
      const Value* sep = find_arg(args, 0, "sep");
      std::vector<std::string> parts =
          split_string(s, sep ? *sep : Value(), int_arg(args, 1, "maxsplit", -1));
      ev.charge(parts.size());
      List items;
      for (std::string& p : parts) items.push_back(Value::string(std::move(p)));
      return Value::list(std::move(items));
    });
  }
  if (name == "replace") {
    return Value::callable([s](Evaluator& ev, CallArgs& args) {
      return Value::string(replace_all(ev, s, string_arg(args, 0, "old", "replace"),
                                       string_arg(args, 1, "new", "replace"),
                                       int_arg(args, 2, "count", -1)));
    });
  }
  if (name == "find") {
    return Value::callable([s](Evaluator&, CallArgs& args) {
      size_t at = s.find(string_arg(args, 0, "sub", "find"));
      return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(at));
    });
  }
  if (name == "join") {
    return Value::callable([s](Evaluator& ev, CallArgs& args) {
      const Value* items = find_arg(args, 0, "iterable");
      if (!items || !items->is_list()) Evaluator::runtime_error("join() needs a list");
      std::string out;
      for (size_t n = 0; n < items->as_list().size(); ++n) {
        if (n > 0) out += s;
        out += items->as_list()[n].to_output();
        ev.check_size(out.size());
      }
      ev.charge_string(out.size());
      return Value::string(std::move(out));
    });
  }
  return {};
}

}  // namespace strata::chat_template
