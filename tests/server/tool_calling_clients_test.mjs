// Tool calling end to end with the pinned JavaScript clients (client/package.json) against a
// running strata serve whose chat template is Qwen3's (Hermes <tool_call> format): the official
// openai client (tool_choice required, named, auto and none; streamed tool_calls deltas; a
// conversation that sends the calls and their results back; the 400s), the Vercel AI SDK
// (generateText and streamText with tools) and LangChain JS (bindTools, withStructuredOutput by
// function calling). With required or a named function the arguments are constrained by the
// tool's schema: every call must parse and validate (ajv), whatever the model wants to say.
// Usage: node tool_calling_clients_test.mjs BASE_URL API_KEY
import { assert, assertIdle, check, done } from "./harness.mjs";
import { assertApiError, assertValid, pkg, recordingFetch } from "./structured_output_testing.mjs";

const { default: OpenAI } = await import(pkg("openai"));
const { generateText, streamText, jsonSchema, tool } = await import(pkg("ai"));
const { createOpenAICompatible } = await import(pkg("@ai-sdk/openai-compatible"));
const { ChatOpenAI } = await import(pkg("@langchain/openai"));
const base = process.argv[2];
const key = process.argv[3];
const model = "strata-tiny";
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });

// Bounded schemas, so a constrained call closes within a few dozen tokens.
const weatherParams = {
  type: "object",
  properties: {
    city: { type: "string", minLength: 1, maxLength: 12 },
    unit: { enum: ["c", "f"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
  },
  required: ["city", "unit"],
  additionalProperties: false,
};
const timeParams = {
  type: "object",
  properties: { zone: { enum: ["UTC", "CET", "PST"] } },
  required: ["zone"],
  additionalProperties: false,
};
const params = { get_weather: weatherParams, get_time: timeParams };
const tools = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city",
    parameters: weatherParams } },
  { type: "function", function: { name: "get_time", description: "The time in a zone",
    parameters: timeParams } },
];
const messages = [{ role: "user", content: "What is the weather in Paris, and the time?" }];
const read = (e) => ({
  status: e.status ?? e.response?.status, param: e.param ?? e.error?.param, message: e.message,
});

// A call as OpenAI returns it: a known tool, arguments that parse and fit its schema.
function assertCall(call, what) {
  assert(call.type === "function", `${what}: type ${call.type}`);
  assert(typeof call.id === "string" && call.id.startsWith("call_"), `${what}: id ${call.id}`);
  const schema = params[call.function.name];
  assert(schema, `${what}: unknown tool ${call.function.name}`);
  let args;
  try {
    args = JSON.parse(call.function.arguments);
  } catch (e) {
    throw new Error(`${what}: arguments are not JSON: ${call.function.arguments}`);
  }
  assertValid(schema, args, `${what} ${call.function.name}`);
}

await check("openai: tool_choice required, one call (parallel_tool_calls false)", async () => {
  for (const sampling of [{ temperature: 0 }, { temperature: 1, seed: 7 }]) {
    const r = await client.chat.completions.create({
      model, messages, tools, tool_choice: "required", parallel_tool_calls: false,
      max_tokens: 200, ...sampling,
    });
    const c = r.choices[0];
    assert(c.finish_reason === "tool_calls", `finish ${c.finish_reason}`);
    assert(c.message.content === null, `content ${JSON.stringify(c.message.content)}`);
    assert(c.message.tool_calls?.length === 1, `${c.message.tool_calls?.length} calls`);
    assertCall(c.message.tool_calls[0], `required ${JSON.stringify(sampling)}`);
  }
});

await check("openai: tool_choice required with parallel calls: every call whole and valid",
  async () => {
    const r = await client.chat.completions.create({
      model, messages, tools, tool_choice: "required", max_tokens: 120, temperature: 1, seed: 3,
    });
    const c = r.choices[0];
    assert(["tool_calls", "length"].includes(c.finish_reason), `finish ${c.finish_reason}`);
    assert(c.message.tool_calls?.length >= 1, "no calls");
    c.message.tool_calls.forEach((call, i) => assertCall(call, `call ${i}`));
    assert(new Set(c.message.tool_calls.map((t) => t.id)).size === c.message.tool_calls.length,
      "ids are not unique");
  });

await check("openai: a named function, streamed: deltas add up to one valid call", async () => {
  const stream = await client.chat.completions.create({
    model, messages, tools, tool_choice: { type: "function", function: { name: "get_time" } },
    max_tokens: 100, stream: true,
  });
  const calls = [];
  let finish = null;
  let content = "";
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta?.content ?? "";
    for (const d of choice.delta?.tool_calls ?? []) {
      assert(Number.isInteger(d.index), `delta without index ${JSON.stringify(d)}`);
      calls[d.index] ??= { id: d.id, type: d.type, function: { name: "", arguments: "" } };
      calls[d.index].function.name += d.function?.name ?? "";
      calls[d.index].function.arguments += d.function?.arguments ?? "";
    }
    finish = choice.finish_reason ?? finish;
  }
  assert(finish === "tool_calls", `finish ${finish}`);
  assert(content === "", `content ${JSON.stringify(content)}`);
  assert(calls.length === 1 && calls[0].function.name === "get_time", JSON.stringify(calls));
  assertCall(calls[0], "streamed");
});

await check("openai: auto offers the tools to the model; none hides them", async () => {
  const usage = async (extra) => (await client.chat.completions.create({
    model, messages, max_tokens: 1, temperature: 0, ...extra,
  })).usage.prompt_tokens;
  const plain = await usage({});
  const offered = await usage({ tools });
  const hidden = await usage({ tools, tool_choice: "none" });
  assert(offered > plain + 100, `prompt tokens with tools ${offered}, without ${plain}`);
  assert(hidden === plain, `tool_choice none: ${hidden} prompt tokens, without tools ${plain}`);
  const r = await client.chat.completions.create({
    model, messages, tools, max_tokens: 60, temperature: 0,
  });
  const c = r.choices[0];
  assert(["stop", "length", "tool_calls"].includes(c.finish_reason), `finish ${c.finish_reason}`);
  for (const call of c.message.tool_calls ?? []) assertCall(call, "auto");
});

await check("openai: the calls and their results sent back continue the conversation", async () => {
  const first = await client.chat.completions.create({
    model, messages, tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 100,
  });
  const call = first.choices[0].message.tool_calls[0];
  const r = await client.chat.completions.create({
    model, tools, max_tokens: 8, temperature: 0,
    messages: [
      ...messages, first.choices[0].message,
      { role: "tool", tool_call_id: call.id, content: JSON.stringify({ ok: true }) },
    ],
  });
  assert(r.choices[0].finish_reason, "no finish");
  assert(r.usage.prompt_tokens > first.usage.prompt_tokens, "the history was not rendered");
});

await check("openai: bad tools and tool choices are 400s naming the field", async () => {
  await assertApiError(() => client.chat.completions.create({
    model, messages, tools, tool_choice: { type: "function", function: { name: "nope" } },
  }), 400, "tool_choice", read, "unknown tool");
  await assertApiError(() => client.chat.completions.create({
    model, messages, tools: [{ type: "function", function: { name: "bad name" } }],
  }), 400, "tools", read, "bad name");
  await assertApiError(() => client.chat.completions.create({
    model, messages, tools, tool_choice: "required",
    response_format: { type: "json_object" },
  }), 400, "tool_choice", read, "two constraints");
});

// ---- the Vercel AI SDK ----

const aiBodies = [];
const strata = createOpenAICompatible({
  name: "strata", baseURL: `${base}/v1`, apiKey: key, fetch: recordingFetch(aiBodies),
});
const aiTools = {
  get_weather: tool({ description: "The weather in a city", inputSchema: jsonSchema(weatherParams) }),
  get_time: tool({ description: "The time in a zone", inputSchema: jsonSchema(timeParams) }),
};

await check("ai sdk: generateText with toolChoice required returns typed tool calls", async () => {
  const r = await generateText({
    model: strata(model), tools: aiTools, toolChoice: "required", maxOutputTokens: 120,
    maxRetries: 0, temperature: 0, prompt: "What is the weather in Paris?",
    providerOptions: { strata: { parallel_tool_calls: false } },
  });
  assert(r.finishReason === "tool-calls", `finish ${r.finishReason}`);
  assert(r.toolCalls.length >= 1, "no tool calls");
  for (const c of r.toolCalls) assertValid(params[c.toolName], c.input, `ai sdk ${c.toolName}`);
  assert(aiBodies.at(-1).tool_choice === "required", JSON.stringify(aiBodies.at(-1).tool_choice));
});

await check("ai sdk: streamText with a named tool streams its call", async () => {
  const r = streamText({
    model: strata(model), tools: aiTools, toolChoice: { type: "tool", toolName: "get_weather" },
    maxOutputTokens: 120, maxRetries: 0, prompt: "Weather in Rome?",
  });
  const calls = [];
  for await (const part of r.fullStream) {
    if (part.type === "tool-call") calls.push(part);
    if (part.type === "error") throw part.error;
  }
  assert(calls.length === 1 && calls[0].toolName === "get_weather", JSON.stringify(calls));
  assertValid(weatherParams, calls[0].input, "ai sdk streamed");
  assert(await r.finishReason === "tool-calls", `finish ${await r.finishReason}`);
});

// ---- LangChain JS ----

const chat = (fields = {}) => new ChatOpenAI({
  model, apiKey: key, configuration: { baseURL: `${base}/v1` }, maxRetries: 0, maxTokens: 120,
  temperature: 0, ...fields,
});

await check("langchain: bindTools with tool_choice required gives parsed tool_calls", async () => {
  const m = chat().bindTools(tools, { tool_choice: "required", parallel_tool_calls: false });
  const msg = await m.invoke([["human", "What is the weather in Paris?"]]);
  assert(msg.tool_calls?.length === 1, `tool_calls ${JSON.stringify(msg.tool_calls)}`);
  assert((msg.invalid_tool_calls ?? []).length === 0, JSON.stringify(msg.invalid_tool_calls));
  const call = msg.tool_calls[0];
  assertValid(params[call.name], call.args, `langchain ${call.name}`);
});

await check("langchain: withStructuredOutput by function calling", async () => {
  const m = chat().withStructuredOutput(weatherParams, {
    name: "get_weather", method: "functionCalling",
  });
  const out = await m.invoke([["human", "Weather in Oslo, in celsius?"]]);
  assertValid(weatherParams, out, "langchain functionCalling");
});

await check("the server is idle afterwards", () => assertIdle(base, "tool calling"));
done("tool_calling_clients_test");
