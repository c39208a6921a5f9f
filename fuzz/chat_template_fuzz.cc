// libFuzzer target: render_chat_template on arbitrary template text, with a fixed conversation.
// Input "<template>\0\0<message content>" renders the first part with the second as the content of
// every message; any other input is the template alone. An error Status is the expected way to
// reject a template; an exception, a crash, a sanitizer report, or a render that escapes its
// RenderLimits is a bug. The limits are small so each input stays fast.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "core/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string source(input);
  std::string content = "Hello, world! <think>why</think> 世界";
  if (const size_t split = input.find(std::string_view("\0\0", 2));
      split != std::string_view::npos) {
    source = std::string(input.substr(0, split));
    content = std::string(input.substr(split + 2));
  }
  nlohmann::ordered_json context = {
      {"messages",
       {{{"role", "system"}, {"content", content}},
        {{"role", "user"}, {"content", content}},
        {{"role", "assistant"}, {"content", content}, {"reasoning_content", nullptr}},
        {{"role", "tool"}, {"content", content}}}},
      {"add_generation_prompt", true},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"},
      {"enable_thinking", false},
  };
  strata::chat_template::RenderLimits limits;
  limits.max_steps = 20'000;
  limits.max_output_bytes = 64 << 10;
  limits.max_depth = 64;
  strata::Result<std::string> out =
      strata::chat_template::render_chat_template(source, context, limits);
  if (out.ok()) STRATA_CHECK(out->size() <= limits.max_output_bytes, "output within its budget");
  return 0;
}
