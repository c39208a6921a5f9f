#include "chat_template/builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "chat_template/string_methods.h"
#include "chat_template/utf8_text.h"

namespace strata::chat_template {
namespace {

using Filter = Value (*)(Evaluator&, const Value&, CallArgs&);

[[noreturn]] void fail(const std::string& what) { Evaluator::runtime_error(what); }

const List& need_list(const Value& v, const char* filter) {
  if (!v.is_list()) fail(std::string("filter '") + filter + "' needs a list, got " + v.type_name());
  return v.as_list();
}

// A list from a list, dict (its keys), string (its characters) or undefined (empty).
List to_list(Evaluator& ev, const Value& v) {
  List items;
  switch (v.kind()) {
    case ValueKind::kList:
      return v.as_list();
    case ValueKind::kDict:
    case ValueKind::kNamespace:
      for (const auto& [k, unused] : v.as_dict()) items.push_back(Value::string(k));
      break;
    case ValueKind::kString:
      for (std::string& c : utf8_chars(v.as_string())) items.push_back(Value::string(std::move(c)));
      break;
    case ValueKind::kUndefined:
      break;
    default:
      fail(std::string("cannot make a list of a ") + v.type_name());
  }
  ev.charge_elements(items.size());
  return items;
}

Value items_of(Evaluator& ev, const Value& v) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_mapping()) fail(std::string("items() needs a dict, got ") + v.type_name());
  ev.charge(v.as_dict().size());
  List items;
  for (const auto& [k, value] : v.as_dict())
    items.push_back(Value::list({Value::string(k), value}));
  return Value::list(std::move(items));
}

// `x.a.b` for an attribute path "a.b"; numeric parts index lists.
Value attribute_path(const Value& v, const std::string& path) {
  Value current = v;
  size_t at = 0;
  while (at <= path.size()) {
    size_t dot = path.find('.', at);
    std::string part = path.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    if (current.is_list() && !part.empty() &&
        part.find_first_not_of("0123456789") == std::string::npos) {
      size_t index = std::strtoull(part.c_str(), nullptr, 10);
      current = index < current.as_list().size() ? current.as_list()[index] : Value();
    } else {
      current = current.get(part);
    }
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  return current;
}

Value filter_select(Evaluator& ev, const Value& input, CallArgs& args, bool by_attribute,
                    bool keep) {
  const List& items = need_list(input, by_attribute ? "selectattr" : "select");
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    const Value* a = find_arg(args, next++, "attribute");
    if (!a || !a->is_string()) fail("selectattr/rejectattr need an attribute name");
    attribute = a->as_string();
  }
  const Value* test = find_arg(args, next++, "test");
  CallArgs test_args;
  for (size_t n = next; n < args.positional.size(); ++n)
    test_args.positional.push_back(args.positional[n]);
  List out;
  for (const Value& item : items) {
    ev.charge(1);
    Value subject = by_attribute ? attribute_path(item, attribute) : item;
    bool pass = test && test->is_string() ? apply_test(ev, test->as_string(), subject, test_args)
                                          : subject.truthy();
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_map(Evaluator& ev, const Value& input, CallArgs& args) {
  List items = to_list(ev, input);
  const Value* attribute = find_arg(args, SIZE_MAX, "attribute");
  List out;
  if (attribute && attribute->is_string()) {
    const Value* fallback = find_arg(args, SIZE_MAX, "default");
    for (const Value& item : items) {
      Value v = attribute_path(item, attribute->as_string());
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string())
    fail("map needs a filter name or attribute=");
  std::string filter = args.positional[0].as_string();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    CallArgs a = rest;
    out.push_back(apply_filter(ev, filter, item, a));
  }
  return Value::list(std::move(out));
}

Value filter_join(Evaluator& ev, const Value& input, CallArgs& args) {
  const Value* sep = find_arg(args, 0, "d");
  const Value* attribute = find_arg(args, 1, "attribute");
  List items = to_list(ev, input);
  std::string out;
  for (size_t n = 0; n < items.size(); ++n) {
    if (n > 0 && sep) out += sep->to_output();
    out += (attribute && attribute->is_string() ? attribute_path(items[n], attribute->as_string())
                                                : items[n])
               .to_output();
    ev.check_size(out.size());
  }
  ev.charge_string(out.size());
  return Value::string(std::move(out));
}

Value filter_default(Evaluator&, const Value& input, CallArgs& args) {
  const Value* fallback = find_arg(args, 0, "default_value");
  const Value* boolean = find_arg(args, 1, "boolean");
  bool use_fallback = boolean && boolean->truthy() ? !input.truthy() : input.is_undefined();
  if (!use_fallback) return input;
  return fallback ? *fallback : Value::string("");
}

Value filter_tojson(Evaluator& ev, const Value& input, CallArgs& args) {
  const Value* indent = find_arg(args, 0, "indent");
  int width = indent && indent->kind() == ValueKind::kInt
                  ? static_cast<int>(std::min<int64_t>(std::max<int64_t>(indent->as_int(), 0), 16))
                  : -1;
  std::string out = input.to_json(width);
  ev.charge_string(out.size());
  return Value::string(std::move(out));
}

Value filter_int(Evaluator&, const Value& input, CallArgs& args) {
  const Value* fallback = find_arg(args, 0, "default");
  switch (input.kind()) {
    case ValueKind::kInt:
      return input;
    case ValueKind::kBool:
      return Value::integer(input.as_bool() ? 1 : 0);
    case ValueKind::kFloat:
      if (std::isfinite(input.as_double()) && std::fabs(input.as_double()) < 9.2e18) {
        return Value::integer(static_cast<int64_t>(input.as_double()));
      }
      break;
    case ValueKind::kString: {
      std::string s = strip_chars(input.as_string(), kWhitespace, true, true);
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == '\0' && errno == 0) return Value::integer(v);
      break;
    }
    default:
      break;
  }
  return fallback ? *fallback : Value::integer(0);
}

Value collection_filter(Evaluator& ev, const std::string& name, const Value& input);

// Filters over strings; the rest go to collection_filter.
Value filter_simple(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args) {
  auto need_string = [&]() -> const std::string& {
    if (!input.is_string()) fail("filter '" + name + "' needs a string, got " + input.type_name());
    return input.as_string();
  };
  if (name == "trim") {
    const Value* chars = find_arg(args, 0, "chars");
    return Value::string(strip_chars(
        need_string(),
        chars && chars->is_string() ? std::string_view(chars->as_string()) : kWhitespace, true,
        true));
  }
  if (name == "upper") return Value::string(to_upper(need_string()));
  if (name == "lower") return Value::string(to_lower(need_string()));
  if (name == "title") return Value::string(to_title(need_string()));
  if (name == "capitalize") return Value::string(capitalize(need_string()));
  if (name == "string") return Value::string(input.to_output());
  if (name == "safe" || name == "e" || name == "escape") return input;
  if (name == "replace") {
    const Value* from = find_arg(args, 0, "old");
    const Value* to = find_arg(args, 1, "new");
    if (!from || !to || !from->is_string() || !to->is_string()) fail("replace needs two strings");
    const Value* count = find_arg(args, 2, "count");
    return Value::string(
        replace_all(ev, need_string(), from->as_string(), to->as_string(),
                    count && count->kind() == ValueKind::kInt ? count->as_int() : -1));
  }
  return collection_filter(ev, name, input);
}

// Filters over lists, dicts and strings as sequences, and numbers; fails for an unknown name.
Value collection_filter(Evaluator& ev, const std::string& name, const Value& input) {
  if (name == "length" || name == "count") {
    switch (input.kind()) {
      case ValueKind::kString:
        return Value::integer(static_cast<int64_t>(utf8_length(input.as_string())));
      case ValueKind::kList:
        return Value::integer(static_cast<int64_t>(input.as_list().size()));
      case ValueKind::kDict:
      case ValueKind::kNamespace:
        return Value::integer(static_cast<int64_t>(input.as_dict().size()));
      case ValueKind::kUndefined:
        return Value::integer(0);
      default:
        fail(std::string("length of a ") + input.type_name());
    }
  }
  if (name == "first" || name == "last") {
    List items = to_list(ev, input);
    if (items.empty()) return {};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::list(to_list(ev, input));
  if (name == "reverse") {
    if (input.is_string()) {
      std::vector<std::string> chars = utf8_chars(input.as_string());
      std::string out;
      for (size_t n = chars.size(); n-- > 0;) out += chars[n];
      return Value::string(std::move(out));
    }
    List items = to_list(ev, input);
    return Value::list(List(items.rbegin(), items.rend()));
  }
  if (name == "items") return items_of(ev, input);
  if (name == "float") {
    if (input.is_number()) return Value::number(input.as_double());
    if (input.is_string()) return Value::number(std::strtod(input.as_string().c_str(), nullptr));
    return Value::number(0);
  }
  if (name == "abs") {
    if (input.kind() == ValueKind::kInt && input.as_int() != INT64_MIN)
      return Value::integer(std::llabs(input.as_int()));
    if (input.is_number()) return Value::number(std::fabs(input.as_double()));
    fail("abs of a " + std::string(input.type_name()));
  }
  fail("unknown filter '" + name + "'");
}

bool is_integer_kind(const Value& v) { return v.kind() == ValueKind::kInt; }

}  // namespace

const Value* find_arg(CallArgs& args, size_t position, const char* keyword) {
  if (position < args.positional.size()) return &args.positional[position];
  for (const auto& [key, value] : args.keyword) {
    if (key == keyword) return &value;
  }
  return nullptr;
}

Value apply_filter(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args) {
  if (name == "join") return filter_join(ev, input, args);
  if (name == "default" || name == "d") return filter_default(ev, input, args);
  if (name == "tojson") return filter_tojson(ev, input, args);
  if (name == "int") return filter_int(ev, input, args);
  if (name == "map") return filter_map(ev, input, args);
  if (name == "selectattr") return filter_select(ev, input, args, true, true);
  if (name == "rejectattr") return filter_select(ev, input, args, true, false);
  if (name == "select") return filter_select(ev, input, args, false, true);
  if (name == "reject") return filter_select(ev, input, args, false, false);
  return filter_simple(ev, name, input, args);
}

bool apply_test(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args) {
  const Value* arg = find_arg(args, 0, "value");
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "string") return input.is_string();
  if (name == "number") return input.is_number();
  if (name == "integer") return is_integer_kind(input);
  if (name == "float") return input.kind() == ValueKind::kFloat;
  if (name == "boolean") return input.kind() == ValueKind::kBool;
  if (name == "true") return input.kind() == ValueKind::kBool && input.as_bool();
  if (name == "false") return input.kind() == ValueKind::kBool && !input.as_bool();
  if (name == "mapping") return input.is_mapping();
  if (name == "sequence") return input.is_list() || input.is_string();
  if (name == "iterable") return input.is_list() || input.is_string() || input.is_mapping();
  if (name == "callable") return input.kind() == ValueKind::kCallable;
  if (name == "odd" || name == "even") {
    if (!is_integer_kind(input)) fail("test '" + name + "' needs an integer");
    return (input.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "lower") return input.is_string() && to_lower(input.as_string()) == input.as_string();
  if (name == "upper") return input.is_string() && to_upper(input.as_string()) == input.as_string();
  if (name == "eq" || name == "equalto" || name == "==") return arg && values_equal(input, *arg);
  if (name == "ne" || name == "!=") return !arg || !values_equal(input, *arg);
  if (name == "in") {
    if (!arg) fail("test 'in' needs a container");
    return evaluate_operator(ev, "in", input, *arg).truthy();
  }
  fail("unknown test '" + name + "'");
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_mapping()) {
    Value member = object.get(name);
    if (!member.is_undefined() || object.kind() == ValueKind::kNamespace) return member;
    if (name == "items") {
      return Value::callable([object](Evaluator& ev, CallArgs&) { return items_of(ev, object); });
    }
    if (name == "keys" || name == "values") {
      return Value::callable([object, name](Evaluator& ev, CallArgs&) {
        ev.charge(object.as_dict().size());
        List out;
        for (const auto& [k, v] : object.as_dict())
          out.push_back(name == "keys" ? Value::string(k) : v);
        return Value::list(std::move(out));
      });
    }
    if (name == "get") {
      return Value::callable([object](Evaluator&, CallArgs& args) {
        const Value* key = find_arg(args, 0, "key");
        const Value* fallback = find_arg(args, 1, "default");
        Value v = key && key->is_string() ? object.get(key->as_string()) : Value();
        if (!v.is_undefined()) return v;
        return fallback ? *fallback : Value::none();
      });
    }
    return {};
  }
  if (object.is_string()) return string_method(object.as_string(), name);
  if (object.is_undefined())
    Evaluator::runtime_error("cannot read attribute '" + name + "' of an undefined value");
  return {};
}

Dict global_functions() {
  Dict globals;
  globals.emplace_back(
      "range", Value::callable([](Evaluator& ev, CallArgs& args) {
        int64_t start = 0;
        int64_t stop = 0;
        int64_t step = 1;
        for (const Value& v : args.positional) {
          if (v.kind() != ValueKind::kInt) fail("range() needs integers");
        }
        if (args.positional.size() == 1) {
          stop = args.positional[0].as_int();
        } else if (args.positional.size() == 2 || args.positional.size() == 3) {
          start = args.positional[0].as_int();
          stop = args.positional[1].as_int();
          if (args.positional.size() == 3) step = args.positional[2].as_int();
        } else {
          fail("range() takes 1 to 3 arguments");
        }
        if (step == 0) fail("range() step cannot be zero");
        // The length first, so an absurd range fails before anything is allocated.
        const __int128 span =
            step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
        const __int128 stride =
            step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
        const __int128 count = span <= 0 ? 0 : (span + stride - 1) / stride;
        ev.charge_elements(count > static_cast<__int128>(SIZE_MAX / kStepsPerElement)
                               ? SIZE_MAX / kStepsPerElement
                               : static_cast<size_t>(count));
        List out;
        out.reserve(static_cast<size_t>(count));
        for (__int128 k = 0; k < count; ++k)
          out.push_back(Value::integer(static_cast<int64_t>(start + k * step)));
        return Value::list(std::move(out));
      }));
  globals.emplace_back("namespace", Value::callable([](Evaluator&, CallArgs& args) {
                         Dict members;
                         if (!args.positional.empty() && args.positional[0].is_mapping())
                           members = args.positional[0].as_dict();
                         for (auto& [k, v] : args.keyword) members.emplace_back(k, v);
                         return Value::name_space(std::move(members));
                       }));
  globals.emplace_back("dict", Value::callable([](Evaluator&, CallArgs& args) {
                         Dict members;
                         for (auto& [k, v] : args.keyword) members.emplace_back(k, v);
                         return Value::dict(std::move(members));
                       }));
  globals.emplace_back(
      "raise_exception", Value::callable([](Evaluator&, CallArgs& args) -> Value {
        const Value* message = find_arg(args, 0, "message");
        fail("raise_exception: " + (message ? message->to_output() : std::string("(no message)")));
      }));
  return globals;
}

}  // namespace strata::chat_template
