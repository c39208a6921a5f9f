// Structured outputs through LangChain JS (@langchain/openai's ChatOpenAI, pinned in
// client/package.json) against a running strata serve: withStructuredOutput with a zod schema
// and with a JSON schema, method "jsonSchema" and the default (which is jsonSchema for a model
// LangChain does not know to lack it), greedy, seeded, batched and streamed; every parsed object
// validated with ajv, and the request bodies recorded to show what was asked. Method
// "functionCalling" sends the schema as a tool with tool_choice naming it: the forced call's
// arguments are constrained by it.
// Usage: node structured_output_langchain_test.mjs BASE_URL API_KEY
import { assert, assertIdle, check, done } from "./harness.mjs";
import { assertValid, pkg, recordingFetch, schemas } from "./structured_output_testing.mjs";

const { ChatOpenAI } = await import(pkg("@langchain/openai"));
const { z } = await import(pkg("zod"));
const base = process.argv[2];
const bodies = [];
const chat = (fields = {}) => new ChatOpenAI({
  model: "strata-tiny", apiKey: process.argv[3],
  configuration: { baseURL: `${base}/v1`, fetch: recordingFetch(bodies) },
  maxRetries: 0, maxTokens: 400, temperature: 0, ...fields,
});
const ask = (what) => [
  ["system", "You answer with JSON only."],
  ["human", `Describe ${what} as JSON.`],
];

// The zod twin of structured_output_testing.mjs's personSchema: the JSON schema LangChain
// derives from it is what the server compiles, and ajv checks the result against the original.
const Person = z.object({
  name: z.string().min(1).max(16),
  age: z.number().int().min(0).max(120),
  role: z.enum(["admin", "editor", "guest"]),
  address: z.object({ city: z.string().max(12), zip: z.string().regex(/^[0-9]{5}$/) }),
  tags: z.array(z.string().max(8)).min(1).max(3),
});

await check("zod schema, method jsonSchema, greedy and seeded", async () => {
  const runs = [{ temperature: 0 }, { temperature: 1, seed: 1234 }].map(async (sampling) => {
    const model = chat(sampling).withStructuredOutput(Person, { method: "jsonSchema", name: "p" });
    const person = await model.invoke(ask("a person"));
    assertValid(schemas.person, person, `zod ${JSON.stringify(sampling)}`);
  });
  await Promise.all(runs);
});

await check("JSON schemas, method jsonSchema, batched", async () => {
  const names = Object.keys(schemas);
  const results = await Promise.all(names.map((name) => chat({ temperature: 1, seed: 77 })
    .withStructuredOutput(schemas[name], { method: "jsonSchema", name })
    .invoke(ask(`a ${name}`))));
  names.forEach((name, i) => assertValid(schemas[name], results[i], name));
  const model = chat().withStructuredOutput(schemas.result, { method: "jsonSchema", name: "r" });
  const batch = await model.batch([ask("a result"), ask("an outcome"), ask("a verdict")]);
  assert(batch.length === 3, `${batch.length} results`);
  batch.forEach((r, i) => assertValid(schemas.result, r, `batch ${i}`));
});

await check("the default method sends response_format json_schema", async () => {
  // includeRaw shows the message the parsed object came from: its content is the JSON text, and
  // no tool call was made.
  const model = chat({ temperature: 1, seed: 9 })
    .withStructuredOutput(schemas.person, { name: "person", includeRaw: true });
  bodies.length = 0;
  const { raw, parsed } = await model.invoke(ask("a person"));
  assert(bodies.length === 1, `${bodies.length} requests`);
  const format = bodies[0].response_format;
  assert(format?.type === "json_schema" && format.json_schema.name === "person" &&
    JSON.stringify(format.json_schema.schema) === JSON.stringify(schemas.person),
  `response_format ${JSON.stringify(format)}`);
  assert(bodies[0].tools === undefined, "tools sent");
  assert(!raw.tool_calls?.length, `tool calls: ${JSON.stringify(raw.tool_calls)}`);
  assert(raw.response_metadata?.finish_reason === "stop",
    `finish ${raw.response_metadata?.finish_reason}`);
  assertValid(schemas.person, JSON.parse(raw.content), "raw content");
  assertValid(schemas.person, parsed, "parsed");
});

await check("streamed: the last object validates", async () => {
  const model = chat({ temperature: 1, seed: 31 })
    .withStructuredOutput(schemas.items, { method: "jsonSchema", name: "items" });
  let last = null;
  let chunks = 0;
  for await (const chunk of await model.stream(ask("some items"))) {
    last = chunk;
    chunks++;
  }
  assert(chunks >= 1, "no chunk");
  assertValid(schemas.items, last, "last chunk");
});

await check("method functionCalling: a forced tool call whose arguments fit the schema", async () => {
  for (const [schema, json] of [[Person, schemas.person], [schemas.result, schemas.result]]) {
    const model = chat().withStructuredOutput(schema, { method: "functionCalling", name: "f" });
    bodies.length = 0;
    assertValid(json, await model.invoke(ask("a person")), "functionCalling");
    assert(bodies.length === 1 && bodies[0].tools?.length === 1, "one request, with tools");
    assert(bodies[0].tool_choice?.function?.name === "f", JSON.stringify(bodies[0].tool_choice));
  }
});

// LangChain sends no max_tokens: the chat default must leave the JSON room to finish.
await check("ChatOpenAI without maxTokens", async () => {
    const model = chat({ maxTokens: undefined })
      .withStructuredOutput(schemas.result, { method: "jsonSchema", name: "result" });
    assertValid(schemas.result, await model.invoke(ask("a result")), "no maxTokens");
  });

await check("the server is idle afterwards", async () => {
  await assertIdle(base, "after the LangChain suite");
});

done("structured_output_langchain_test");
