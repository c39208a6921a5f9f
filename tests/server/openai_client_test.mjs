// The official openai npm client (pinned in client/package.json) against a running strata serve:
// completions plain and streaming (with usage), n > 1, logprobs, token-id prompts, stop strings,
// cached tokens on a repeated prefix, errors as OpenAI error objects, and the server healthy after
// each. Usage: node openai_client_test.mjs BASE_URL API_KEY
import OpenAI from "./client/node_modules/openai/index.mjs";

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: process.argv[3], maxRetries: 0 });
let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
  } catch (e) {
    failed++;
    console.log(`FAIL: ${name}: ${e.stack || e}`);
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

const model = (await client.models.list()).data[0].id;

await check("models", async () => {
  assert(model === "strata-tiny", `model id ${model}`);
});

await check("completion", async () => {
  const r = await client.completions.create({
    model, prompt: "And it came to pass", max_tokens: 16, temperature: 0,
  });
  assert(r.object === "text_completion", "object");
  assert(r.choices.length === 1 && r.choices[0].text.length > 0, "text");
  assert(r.choices[0].finish_reason === "length", `finish ${r.choices[0].finish_reason}`);
  assert(r.usage.completion_tokens === 16 && r.usage.prompt_tokens > 0, "usage");
});

await check("greedy is repeatable and streaming equals plain", async () => {
  const args = { model, prompt: "In the beginning", max_tokens: 20, temperature: 0 };
  const plain = await client.completions.create(args);
  const stream = await client.completions.create({
    ...args, stream: true, stream_options: { include_usage: true },
  });
  let text = "";
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert(text === plain.choices[0].text, `stream '${text}' != plain '${plain.choices[0].text}'`);
  assert(finish === "length", `finish ${finish}`);
  assert(usage && usage.completion_tokens === 20, "usage in the last chunk");
});

await check("n > 1 with a seed, logprobs", async () => {
  const r = await client.completions.create({
    model, prompt: "And the LORD said", max_tokens: 8, n: 3, seed: 7, logprobs: 2,
  });
  assert(r.choices.length === 3, "three choices");
  const idx = r.choices.map((c) => c.index).sort();
  assert(JSON.stringify(idx) === "[0,1,2]", `indices ${idx}`);
  for (const c of r.choices) {
    assert(c.logprobs.tokens.length === 8, "8 logprobs");
    assert(c.logprobs.token_logprobs.every((x) => x <= 0), "logprobs <= 0");
    assert(Object.keys(c.logprobs.top_logprobs[0]).length >= 1, "top logprobs");
  }
});

await check("token-id prompts and a list of prompts", async () => {
  const r = await client.completions.create({
    model, prompt: [[0, 200, 300], [0, 400]], max_tokens: 4, temperature: 0,
  });
  assert(r.choices.length === 2, "a choice per prompt");
  assert(r.usage.prompt_tokens === 5, `prompt tokens ${r.usage.prompt_tokens}`);
});

await check("stop strings cut the text", async () => {
  const args = { model, prompt: "And it came to pass", max_tokens: 40, temperature: 0 };
  const full = (await client.completions.create(args)).choices[0].text;
  const word = full.trim().split(" ")[2];
  const r = await client.completions.create({ ...args, stop: [word] });
  assert(r.choices[0].finish_reason === "stop", `finish ${r.choices[0].finish_reason}`);
  assert(full.startsWith(r.choices[0].text) && !r.choices[0].text.includes(word), "cut");
});

await check("cached tokens on a repeated prefix", async () => {
  const prefix = "Then answered Job and said, ".repeat(12);
  await client.completions.create({ model, prompt: prefix + "one", max_tokens: 2 });
  const r = await client.completions.create({ model, prompt: prefix + "two", max_tokens: 2 });
  assert(r.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(r.usage));
});

await check("chat completion, plain and streaming", async () => {
  const messages = [
    { role: "system", content: "You are a scribe." },
    { role: "user", content: [{ type: "text", text: "What came to pass?" }] },
  ];
  const plain = await client.chat.completions.create({
    model, messages, max_completion_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  assert(plain.object === "chat.completion", "object");
  const m = plain.choices[0].message;
  assert(m.role === "assistant" && m.content.length > 0, "assistant message");
  assert(plain.choices[0].logprobs.content.length === 12, "12 logprob entries");
  assert(plain.choices[0].logprobs.content[0].top_logprobs.length === 2, "top 2");
  assert(plain.usage.completion_tokens === 12, "usage");
  const stream = await client.chat.completions.create({
    model, messages, max_completion_tokens: 12, temperature: 0, stream: true,
  });
  let text = "";
  let role = null;
  for await (const chunk of stream) {
    assert(chunk.object === "chat.completion.chunk", "chunk object");
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
    }
  }
  assert(role === "assistant", "the first chunk carries the role");
  assert(text === m.content, `stream '${text}' != plain '${m.content}'`);
});

await check("echo, sampling fields, user, seeds", async () => {
  const prompt = "And God said";
  const echo = await client.completions.create({
    model, prompt, max_tokens: 4, echo: true, logprobs: 1, temperature: 0,
  });
  const c = echo.choices[0];
  assert(c.text.startsWith(prompt) && c.text.length > prompt.length, `echo '${c.text}'`);
  assert(c.logprobs.tokens.length === echo.usage.prompt_tokens + 4, "prompt + output logprobs");
  assert(c.logprobs.token_logprobs[0] === null, "no logprob for the first prompt token");
  const args = {
    model, prompt, max_tokens: 8, temperature: 0.9, top_p: 0.9, top_k: 20, min_p: 0.05,
    presence_penalty: 0.5, frequency_penalty: 0.5, seed: 11, user: "alice",
  };
  const a = await client.completions.create(args);
  const b = await client.completions.create(args);
  assert(a.choices[0].text === b.choices[0].text, "the same seed samples the same text");
});

await check("cache_salt separates prefix-cache entries", async () => {
  const prefix = "And the evening and the morning were the first day. ".repeat(6);
  const run = (salt, end) => client.completions.create({
    model, prompt: prefix + end, max_tokens: 1, cache_salt: salt,
  });
  await run("salt-a", "one");
  const same = await run("salt-a", "two");
  const other = await run("salt-b", "three");
  assert(same.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(same.usage));
  assert(other.usage.prompt_tokens_details.cached_tokens === 0, JSON.stringify(other.usage));
});

await check("return_tokens_as_token_ids and return_token_ids", async () => {
  const r = await client.completions.create({
    model, prompt: [0, 200, 300], max_tokens: 3, logprobs: 0, temperature: 0,
    return_tokens_as_token_ids: true, return_token_ids: true,
  });
  const c = r.choices[0];
  assert(c.logprobs.tokens.every((t) => /^token_id:\d+$/.test(t)), `${c.logprobs.tokens}`);
  assert(JSON.stringify(c.token_ids) ===
    JSON.stringify(c.logprobs.tokens.map((t) => Number(t.slice(9)))), "token_ids");
});

await check("chat: a tool call and its result, max_completion_tokens", async () => {
  const r = await client.chat.completions.create({
    model, max_completion_tokens: 5, temperature: 0, user: "bob", seed: 1, n: 2,
    stop: ["\n\n"],
    messages: [
      { role: "system", content: "You keep the records." },
      { role: "user", content: "What day is it?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
        function: { name: "today", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "call_1", content: "the first day" },
    ],
  });
  assert(r.choices.length === 2, "n = 2");
  assert(r.usage.completion_tokens <= 10 && r.usage.completion_tokens > 0, JSON.stringify(r.usage));
});

await check("errors are OpenAI error objects", async () => {
  for (const [args, status, code] of [
    [{ model, prompt: "x", max_tokens: 100000 }, 400, "context_length_exceeded"],
    [{ model, prompt: "x", temperature: -1 }, 400, null],
    [{ model: "no-such-model", prompt: "x" }, 404, "model_not_found"],
    [{ model, prompt: "x", n: 1000 }, 400, null],
  ]) {
    try {
      await client.completions.create(args);
      throw new Error(`no error for ${JSON.stringify(args)}`);
    } catch (e) {
      assert(e instanceof OpenAI.APIError, `${e}`);
      assert(e.status === status, `status ${e.status} for ${JSON.stringify(args)}`);
      if (code) assert(e.code === code, `code ${e.code}`);
    }
  }
  for (const messages of [[], [{ role: "wizard", content: "x" }], [{ content: "x" }]]) {
    try {
      await client.chat.completions.create({ model, messages });
      throw new Error(`no error for ${JSON.stringify(messages)}`);
    } catch (e) {
      assert(e instanceof OpenAI.APIError && e.status === 400, `${e}`);
    }
  }
  const health = await fetch(`${base}/health`);
  assert(health.status === 200, "healthy after errors");
});

console.log(`openai_client_test: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
