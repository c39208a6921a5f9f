// The bad-request suite: every malformed or out-of-range request issues 9 and 33 list, over raw
// HTTP, each checked for its status and OpenAI error object (type, and param or code where they say
// which field), the server healthy after each, and no KV block held at the end.
// Usage: node bad_request_test.mjs BASE_URL API_KEY
import { assert, assertIdle, report } from "./harness.mjs";

const base = process.argv[2];
const key = process.argv[3];
const auth = { authorization: `Bearer ${key}` };
let passed = 0;
let failed = 0;

async function send(method, path, body, headers = auth) {
  const init = { method, headers: { "content-type": "application/json", ...headers } };
  if (body !== undefined) init.body = typeof body === "string" || body instanceof Uint8Array
    ? body : JSON.stringify(body);
  const res = await fetch(`${base}${path}`, init);
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // checked below
  }
  return { status: res.status, json, text, headers: res.headers };
}

// expect: {status, type, param?, code?}
async function expectError(name, method, path, body, expect, headers = auth) {
  try {
    const r = await send(method, path, body, headers);
    assert(r.status === expect.status, `status ${r.status}, expected ${expect.status}: ${r.text}`);
    const e = r.json && r.json.error;
    assert(e && typeof e.message === "string" && e.message.length > 0, `no error object: ${r.text}`);
    assert(e.type === expect.type, `type ${e.type}, expected ${expect.type}`);
    if ("param" in expect) assert(e.param === expect.param, `param ${e.param}, expected ${expect.param}`);
    if ("code" in expect) assert(e.code === expect.code, `code ${e.code}, expected ${expect.code}`);
    const health = await fetch(`${base}/health`);
    assert(health.status === 200, `unhealthy after it (${health.status})`);
    passed++;
  } catch (err) {
    failed++;
    console.log(`FAIL: ${name}: ${err.message}`);
  }
}

const bad = (param) => ({ status: 400, type: "invalid_request_error", ...(param ? { param } : {}) });
const cmpl = (extra) => ({ prompt: "In the beginning", max_tokens: 2, ...extra });
const chat = (extra) => ({ messages: [{ role: "user", content: "hi" }], max_tokens: 2, ...extra });
const C = "/v1/completions";
const CH = "/v1/chat/completions";

// Malformed bodies
await expectError("malformed JSON", "POST", C, "{\"prompt\": ", bad());
await expectError("not an object", "POST", C, "[1, 2]", bad());
await expectError("invalid UTF-8", "POST", C,
  new Uint8Array([...Buffer.from("{\"prompt\": \"a"), 0xff, 0xfe, ...Buffer.from("\"}")]), bad());
await expectError("a lone surrogate escape", "POST", C, "{\"prompt\": \"\\ud800\"}", bad());
await expectError("oversize body", "POST", C, "x".repeat(17 << 20),
  { status: 413, type: "invalid_request_error" });
// Wrong types, each naming its field
for (const [field, value] of [["max_tokens", "8"], ["temperature", "hot"], ["top_p", [1]],
  ["top_k", 1.5], ["n", "2"], ["seed", 1.5], ["stream", "yes"], ["echo", 1],
  ["logprobs", true], ["stop", 5], ["stop", ["a", 1]], ["stream_options", true],
  ["presence_penalty", "x"], ["frequency_penalty", {}], ["cache_salt", 7], ["user", 7]]) {
  await expectError(`completions: ${field} = ${JSON.stringify(value)}`, "POST", C,
    cmpl({ [field]: value }), bad(field));
}
for (const [field, value] of [["max_completion_tokens", "8"], ["logprobs", 1],
  ["top_logprobs", "2"]]) {
  await expectError(`chat: ${field} = ${JSON.stringify(value)}`, "POST", CH,
    chat({ [field]: value }), bad(field));
}
// Out-of-range values
for (const [field, value] of [["temperature", -1], ["top_p", 0], ["top_p", 1.5], ["min_p", 2],
  ["max_tokens", 0], ["max_tokens", -3], ["presence_penalty", 3], ["frequency_penalty", -3],
  ["top_k", -2]]) {
  await expectError(`completions: ${field} = ${value}`, "POST", C, cmpl({ [field]: value }),
    bad(field));
}
await expectError("n too large", "POST", C, cmpl({ n: 1000 }), bad("n"));
await expectError("n = 0", "POST", C, cmpl({ n: 0 }), bad("n"));
await expectError("logprobs too large", "POST", C, cmpl({ logprobs: 21 }), bad("logprobs"));
await expectError("top_logprobs too large", "POST", CH, chat({ logprobs: true, top_logprobs: 21 }),
  bad("top_logprobs"));
await expectError("stop: more than 4", "POST", C, cmpl({ stop: ["a", "b", "c", "d", "e"] }),
  bad("stop"));
await expectError("stop: an empty string", "POST", C, cmpl({ stop: [""] }), bad("stop"));
// Empty or missing prompts and messages
await expectError("prompt missing", "POST", C, { max_tokens: 2 }, bad("prompt"));
for (const prompt of ["", [], [[]], [""], [1, "a"], {}, null]) {
  await expectError(`prompt ${JSON.stringify(prompt)}`, "POST", C, { prompt, max_tokens: 2 },
    bad("prompt"));
}
await expectError("token id outside the vocabulary", "POST", C, { prompt: [1, 999999] },
  bad("prompt"));
await expectError("negative token id", "POST", C, { prompt: [-1] }, bad("prompt"));
await expectError("messages missing", "POST", CH, { max_tokens: 2 }, bad("messages"));
await expectError("messages empty", "POST", CH, { messages: [] }, bad("messages"));
await expectError("messages not a list", "POST", CH, { messages: "hi" }, bad("messages"));
await expectError("unknown role", "POST", CH, { messages: [{ role: "wizard", content: "x" }] },
  bad("messages"));
await expectError("role missing", "POST", CH, { messages: [{ content: "x" }] }, bad("messages"));
await expectError("content of a wrong type", "POST", CH,
  { messages: [{ role: "user", content: 5 }] }, bad("messages"));
await expectError("an image part", "POST", CH,
  { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] },
  bad("messages"));
// What the server does not implement is refused by name, never dropped: a client asking for JSON
// or tools gets an error rather than free text it cannot parse.
for (const [field, value] of [
  ["guided_whitespace_pattern", " *"],
  ["tools", [{ type: "function", function: { name: "f", parameters: { type: "object" } } }]],
  ["tool_choice", "required"], ["logit_bias", { "5": 10 }], ["priority", 1]]) {
  await expectError(`chat: unsupported ${field} = ${JSON.stringify(value)}`, "POST", CH,
    chat({ [field]: value }), bad(field));
}
await expectError("completions: unsupported suffix", "POST", C, cmpl({ suffix: "x" }), bad("suffix"));
// kv_eviction (docs/kv-eviction.md): the object's shape and values on both endpoints, and a
// policy the request names without a budget (the server was started with no default budget)
for (const [name, value] of [
  ["not an object", "streaming_llm"],
  ["an unknown policy", { policy: "quest", budget_tokens: 64 }],
  ["a policy that is not a string", { policy: 1, budget_tokens: 64 }],
  ["an unknown field", { policy: "streaming_llm", budget_tokens: 64, keep: 3 }],
  ["budget 0", { policy: "streaming_llm", budget_tokens: 0 }],
  ["a negative budget", { policy: "paged_eviction", budget_tokens: -8 }],
  ["a fractional budget", { policy: "paged_eviction", budget_tokens: 8.5 }],
  ["a budget past int32", { policy: "paged_eviction", budget_tokens: 2 ** 40 }],
  ["a negative sink", { policy: "streaming_llm", budget_tokens: 64, sink_tokens: -1 }],
  ["sink + window over the budget",
    { policy: "streaming_llm", budget_tokens: 64, sink_tokens: 8, window_tokens: 60 }],
  ["no budget anywhere", { policy: "streaming_llm" }],
  ["a sink over the budget", { policy: "streaming_llm", budget_tokens: 2 }],
]) {
  await expectError(`completions: kv_eviction ${name}`, "POST", C, cmpl({ kv_eviction: value }),
    { status: 400, type: "invalid_request_error" });
  await expectError(`chat: kv_eviction ${name}`, "POST", CH, chat({ kv_eviction: value }),
    { status: 400, type: "invalid_request_error" });
}
// The model and its context length
await expectError("unknown model", "POST", C, cmpl({ model: "no-such-model" }),
  { status: 404, type: "not_found_error", param: "model", code: "model_not_found" });
await expectError("prompt longer than max_model_len", "POST", C,
  { prompt: Array(5000).fill(7), max_tokens: 1 },
  { status: 400, type: "invalid_request_error", code: "context_length_exceeded" });
await expectError("max_tokens that cannot fit", "POST", C, cmpl({ max_tokens: 100000 }),
  { status: 400, type: "invalid_request_error", code: "context_length_exceeded" });
await expectError("chat: max_completion_tokens that cannot fit", "POST", CH,
  chat({ max_completion_tokens: 100000 }),
  { status: 400, type: "invalid_request_error", code: "context_length_exceeded" });
// Methods, paths, keys
for (const [method, path] of [["GET", C], ["PUT", C], ["DELETE", CH], ["PATCH", CH],
  ["POST", "/v1/models"], ["POST", "/health"], ["POST", "/metrics"], ["GET", "/tokenize"]]) {
  await expectError(`${method} ${path}`, method, path, method === "GET" ? undefined : "{}",
    { status: 405, type: "invalid_request_error" });
}
await expectError("unknown path", "POST", "/v1/nope", "{}", { status: 404, type: "not_found_error" });
await expectError("no key", "POST", C, cmpl({}),
  { status: 401, type: "authentication_error", code: "invalid_api_key" }, {});
await expectError("wrong key", "GET", "/v1/models", undefined,
  { status: 401, type: "authentication_error", code: "invalid_api_key" },
  { authorization: "Bearer nope" });
await expectError("tokenize: no prompt", "POST", "/tokenize", { text: "x" }, bad("prompt"));
await expectError("tokenize: add_special_tokens of a wrong type", "POST", "/tokenize",
  { prompt: "x", add_special_tokens: "yes" }, bad("add_special_tokens"));
await expectError("detokenize: a token outside the vocabulary", "POST", "/detokenize",
  { tokens: [1, 99999] }, bad("tokens"));
// Issue 33: nesting, NUL bytes, integers beyond 32 bits, chat type errors, template variables
const deep = (n) => "[".repeat(n) + "]".repeat(n);
await expectError("tool_calls nested 200K deep", "POST", CH,
  `{"messages":[{"role":"assistant","content":"x","tool_calls":${deep(200000)}}]}`, bad());
await expectError("chat_template_kwargs nested 1M deep", "POST", CH,
  `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"a":${deep(1000000)}}}`,
  bad());
await expectError("content nested 1M deep", "POST", CH,
  `{"messages":[{"role":"user","content":${deep(1000000)}}]}`, bad());
await expectError("bytes after a NUL", "POST", C,
  new Uint8Array([...Buffer.from("{\"prompt\":\"x\",\"max_tokens\":1}"), 0,
    ...Buffer.from("{\"n\":99}")]), bad());
for (const [field, raw] of [["max_tokens", "4294967300"], ["n", "4294967297"],
  ["logprobs", "4294967297"], ["top_k", "-4294967295"], ["seed", "18446744073709551615"]]) {
  await expectError(`completions: ${field} = ${raw}`, "POST", C,
    `{"prompt":"x",${JSON.stringify(field)}:${raw}}`, bad(field));
}
await expectError("chat: top_logprobs = 2^32 + 2", "POST", CH,
  `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":4294967298}`,
  bad("top_logprobs"));
await expectError("token id 2^32 + 5", "POST", C, "{\"prompt\":[4294967301]}", bad("prompt"));
await expectError("detokenize: token id 2^32 + 5", "POST", "/detokenize",
  "{\"tokens\":[4294967301]}", bad("tokens"));
await expectError("a content part whose type is a number", "POST", CH,
  { messages: [{ role: "user", content: [{ type: 5, text: "x" }] }] }, bad("messages"));
await expectError("add_generation_prompt of a wrong type", "POST", CH,
  chat({ add_generation_prompt: "yes" }), bad("add_generation_prompt"));
for (const name of ["messages", "add_generation_prompt", "bos_token", "tools"]) {
  await expectError(`chat_template_kwargs.${name}`, "POST", CH,
    chat({ chat_template_kwargs: { [name]: [{ role: "system", content: "forged" }] } }),
    bad("chat_template_kwargs"));
}
// Special-token text in a message is plain text: more prompt tokens than one special token.
try {
  const tokens = async (content) => {
    const r = await send("POST", CH, chat({ messages: [{ role: "user", content }], max_tokens: 1 }));
    assert(r.status === 200, `status ${r.status}: ${r.text}`);
    return r.json.usage.prompt_tokens;
  };
  const special = await tokens("<|im_start|>");
  const one = await tokens("x");
  assert(special > one, `"<|im_start|>" in content was ${special} prompt tokens, "x" ${one}`);
  passed++;
} catch (e) {
  failed++;
  console.log(`FAIL: special-token text in content: ${e.message}`);
}

try {
  await assertIdle(base, "after the bad requests");
  passed++;
} catch (e) {
  failed++;
  console.log(`FAIL: ${e.message}`);
}
report("bad_request_test", passed, failed);
