#pragma once
// Tool calls pulled out of a model's generated text, whole (parse_tool_calls) or streamed
// (ToolCallStreamParser), in the two text formats that vLLM's `hermes` and `llama3_json` tool
// parsers read. Nothing here knows HTTP, the request's tools or the tokenizer: text in, content
// and calls out. The server decides what to do with them (names not among the request's tools,
// ids, the OpenAI message shape).
//
// kHermes (Hermes 2 Pro, Qwen2.5, Qwen3): a call is
//     <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
// and several may follow one another. The rules:
//   - An opening marker starts a block only when the first byte after it other than whitespace
//     is '{'; otherwise it is content ("wrap the call in <tool_call> tags" in prose or thinking).
//   - A block runs to the first closing marker after it. When its body is no call and holds
//     another opening marker, the block is tried again from the last such marker, the text
//     before it being content (a marker mentioned before a real call). An opening marker inside
//     a call's JSON strings does not split the call; a closing one ends the block, as in vLLM.
//   - The block's body (between the markers, whitespace around it allowed) must be one JSON
//     object with a non-empty string "name" and "arguments" (or "parameters") an object, or a
//     string holding a JSON object; missing arguments mean {}. Other keys are ignored.
//   - A block that is not a call -- the JSON does not parse (invalid UTF-8, a NUL, nesting deeper
//     than kMaxToolCallJsonDepth count as not parsing), no name, arguments of another type -- is
//     content, markers included, byte for byte.
//   - An unclosed block at the end of the output (cut short by max_tokens or a stop string,
//     perhaps inside the closing marker) is a call when its body to the end is one, and content
//     otherwise.
//   - Whitespace: every byte outside accepted calls is content, except the whitespace run (space,
//     tab, CR, LF) directly after an accepted call, which is dropped: it only separates calls or
//     ends the output. So "Sure.\n<tool_call>A</tool_call>\n<tool_call>B</tool_call>\n" gives
//     content "Sure.\n" and two calls. Whitespace before the first call stays content (it was
//     streamed before the call could be known), so content can be whitespace only, e.g. "\n\n"
//     after a "<think>...</think>" block that is itself content; treat it as the caller sees fit.
//   - A closing marker without an opening one is content.
//
// kLlama3Json (Llama 3.1 / 3.2 JSON tool calling): the whole output, after leading whitespace
// and an optional "<|python_tag|>" (then optional whitespace), is one call object
//     {"name": "get_weather", "parameters": {"city": "Paris"}}
// ("arguments" is a synonym, and may be a string holding an object as above; unlike kHermes the
// arguments are required, since unmarked JSON such as {"name": "Bob"} is often just an answer),
// or several separated by ';' with optional whitespace; a trailing ';' and trailing whitespace
// are allowed. Then the content is empty. Anything else -- prose before or after, an object that
// is not a call, an unfinished object -- makes the whole output content, byte for byte, no calls.
//
// Arguments are the object's compact JSON text (nlohmann::ordered_json: the model's key order,
// UTF-8 kept as is, not \u-escaped).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::server {

// A call's JSON nesting limit, the request's (request_json.h): arguments the server accepts back
// in a later request's messages, and bounded recursion over the value.
inline constexpr int kMaxToolCallJsonDepth = 64;

enum class ToolCallFormat { kHermes, kLlama3Json };

// vLLM's --tool-call-parser names: "hermes" -> kHermes, "llama3_json" -> kLlama3Json; nullopt for
// any other name.
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
std::string_view tool_call_format_name(ToolCallFormat format);

// The format a chat template's source renders tool calls in: one that mentions "<tool_call>" ->
// kHermes; one that mentions "<|python_tag|>" or renders a call's '"parameters": ' (Llama 3.1 and
// 3.2) -> kLlama3Json; nullopt otherwise (including templates without tool support, such as
// Llama 3's). Linear in the template's size.
std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object's compact text
  bool operator==(const ParsedToolCall&) const = default;
};

struct ToolCallParse {
  std::string content;  // the text outside tool calls
  std::vector<ParsedToolCall> calls;
  // Within one result the order of content and calls is not kept (OpenAI's message has no such
  // order either): content is the text outside calls in output order, calls are in output order.
};

// The whole output at once. Same result as one ToolCallStreamParser fed the text in any pieces.
ToolCallParse parse_tool_calls(ToolCallFormat format, std::string_view text);

// Streams one output's text: feed() takes each new piece (split anywhere: inside a marker, inside
// a UTF-8 sequence) and returns what can be released now; finish() at the end of the output
// returns the rest. For any text and any split, the concatenated contents and calls of all the
// results equal parse_tool_calls(format, text)'s.
//
// What is held back, and nothing else:
//   - kHermes: outside a block, the longest suffix that is a proper prefix of "<tool_call>", and
//     an incomplete UTF-8 sequence at the end (so released content never ends inside a code
//     point when the pieces together are valid UTF-8); after an opening marker, the marker and
//     whitespace until the next byte says whether a block starts; a block, until its closing
//     marker or the output's end. A block whose closing marker never comes holds the rest of the
//     output until finish().
//   - kLlama3Json: leading whitespace, then, when the first other bytes can begin a call ('{' or
//     "<|python_tag|>"), everything until finish() decides -- unless the text stops fitting the
//     format earlier (prose after an object, an object that is not a call), when everything held
//     is released as content and the rest streams through. Output that starts otherwise streams
//     through at once (with only the incomplete-UTF-8 hold).
//
// Cost: linear in the total text; each call's JSON is parsed once, when its block or object
// closes. Memory: the held text. Not thread-safe (one per output). feed() after finish() is a
// programmer error (checked).
class ToolCallStreamParser {
 public:
  explicit ToolCallStreamParser(ToolCallFormat format);

  ToolCallParse feed(std::string_view piece);
  ToolCallParse finish();

  ToolCallFormat format() const { return format_; }

 private:
  // kHermes: outside a block (kText), after an opening marker before its first other byte
  // (kOpened), inside a block (kBlock), or in the whitespace after a call (kAfterCall).
  enum class HermesState { kText, kOpened, kBlock, kAfterCall };
  // kLlama3Json: where the text stands in "ws [<|python_tag|>] ws {..} (ws ; ws {..})* [;] ws",
  // or kContent once it cannot be calls.
  enum class Llama3State { kLeading, kTag, kBeforeObject, kInObject, kAfterObject, kContent };

  void feed_hermes(std::string_view piece, ToolCallParse& out);
  // body_[0, end) is a whole block's body (to its closing marker, or to the output's end when
  // not `closed`): a call, or content.
  void end_block(size_t end, bool closed, ToolCallParse& out);
  void finish_hermes(ToolCallParse& out);
  void feed_llama3(std::string_view piece, ToolCallParse& out);
  bool step_llama3(char c);  // c was appended to held_; false: the text cannot be calls
  bool step_object(char c);
  void finish_llama3(ToolCallParse& out);

  ToolCallFormat format_;
  bool finished_ = false;

  HermesState hermes_ = HermesState::kText;
  std::string held_;         // kText: the held suffix; kLlama3Json: all text so far until decided
  std::string body_;         // kOpened, kBlock: the text after the opening marker
  size_t body_scanned_ = 0;  // kBlock: the search for the closing marker resumes here

  Llama3State llama3_ = Llama3State::kLeading;
  size_t tag_matched_ = 0;   // kTag: bytes of "<|python_tag|>" seen
  size_t object_start_ = 0;  // kInObject: where the object starts in held_
  int64_t depth_ = 0;        // kInObject: brace/bracket depth outside strings
  bool in_string_ = false;
  bool escaped_ = false;
  bool after_semicolon_ = false;              // kBeforeObject: a ';' was seen
  std::vector<ParsedToolCall> llama3_calls_;  // accepted so far, released by finish()
};

}  // namespace strata::server
