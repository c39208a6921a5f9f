#pragma once
// The builtins of chat templates: filters (`x | trim`), tests (`x is defined`), methods of strings,
// dicts and lists (`s.startswith(...)`, `d.items()`), and the global functions (range, namespace,
// raise_exception). Each charges the evaluator for the elements and bytes it produces.

#include <string>

#include "chat_template/evaluator.h"
#include "chat_template/value.h"

namespace strata::chat_template {

// Throws TemplateError(kRuntime) for an unknown filter or bad arguments.
Value apply_filter(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args);
bool apply_test(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args);
// `object.name`: a dict member, or a bound method of a string, dict or list; undefined otherwise.
Value get_attribute(const Value& object, const std::string& name);
// The global variables every template sees.
Dict global_functions();

// The argument at `position`, else the keyword argument `keyword`, else null.
const Value* find_arg(CallArgs& args, size_t position, const char* keyword);

}  // namespace strata::chat_template
