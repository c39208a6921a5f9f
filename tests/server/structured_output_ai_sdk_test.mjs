// Structured outputs through the Vercel AI SDK (ai + @ai-sdk/openai-compatible, pinned in
// client/package.json) against a running strata serve. With supportsStructuredOutputs the
// provider sends response_format json_schema (without it, json_object and the schema only in
// the prompt): generateObject with jsonSchema(...) and with zod, its array and enum outputs,
// generateText with Output.object, and streamObject; every object validated with ajv.
// Usage: node structured_output_ai_sdk_test.mjs BASE_URL API_KEY
import { assert, assertIdle, check, done } from "./harness.mjs";
import { assertValid, pkg, recordingFetch, schemas } from "./structured_output_testing.mjs";

const { generateObject, generateText, streamObject, jsonSchema, Output } = await import(pkg("ai"));
const { createOpenAICompatible } = await import(pkg("@ai-sdk/openai-compatible"));
const { z } = await import(pkg("zod"));
const base = process.argv[2];
const bodies = [];
const strata = createOpenAICompatible({
  name: "strata", baseURL: `${base}/v1`, apiKey: process.argv[3], supportsStructuredOutputs: true,
  fetch: recordingFetch(bodies),
});
const model = strata("strata-tiny");
const settings = {
  model, maxOutputTokens: 400, maxRetries: 0, system: "You answer with JSON only.",
};

await check("generateObject with jsonSchema(...), greedy and seeded, each schema", async () => {
  // The top-level array schema is left to the array output below: an object output takes objects.
  const runs = [];
  for (const name of ["person", "result"]) {
    for (const sampling of [{ temperature: 0 }, { temperature: 1, seed: 4242 }]) {
      runs.push((async () => {
        const what = `${name} ${JSON.stringify(sampling)}`;
        const r = await generateObject({
          ...settings, ...sampling, schema: jsonSchema(schemas[name]), schemaName: name,
          prompt: `Describe a ${name}.`,
        });
        assert(r.finishReason === "stop", `${what}: finish ${r.finishReason}`);
        assertValid(schemas[name], r.object, what);
      })());
    }
  }
  await Promise.all(runs);
  // What the provider sent: the schema itself as response_format json_schema.
  for (const body of bodies) {
    const format = body.response_format;
    assert(format?.type === "json_schema" && format.json_schema.strict === true &&
      JSON.stringify(format.json_schema.schema) ===
        JSON.stringify(schemas[format.json_schema.name]),
    `response_format ${JSON.stringify(format)}`);
  }
  assert(bodies.length === 4, `${bodies.length} requests`);
});

await check("generateObject with a zod schema", async () => {
  const Ticket = z.object({
    id: z.number().int().min(1).max(9999),
    priority: z.enum(["low", "high"]),
    summary: z.string().max(20),
    labels: z.array(z.string().max(6)).min(1).max(2),
    owner: z.object({ team: z.enum(["core", "web"]), oncall: z.boolean() }),
  });
  const r = await generateObject({
    ...settings, temperature: 1, seed: 8, schema: Ticket, prompt: "File a ticket.",
  });
  assertValid({
    type: "object",
    properties: {
      id: { type: "integer", minimum: 1, maximum: 9999 },
      priority: { enum: ["low", "high"] },
      summary: { type: "string", maxLength: 20 },
      labels: { type: "array", items: { type: "string", maxLength: 6 }, minItems: 1, maxItems: 2 },
      owner: {
        type: "object",
        properties: { team: { enum: ["core", "web"] }, oncall: { type: "boolean" } },
        required: ["team", "oncall"],
        additionalProperties: false,
      },
    },
    required: ["id", "priority", "summary", "labels", "owner"],
    additionalProperties: false,
  }, r.object, "zod ticket");
});

await check("generateObject array and enum outputs", async () => {
  const item = schemas.items.$defs.item;
  const [array, choice] = await Promise.all([
    generateObject({
      ...settings, temperature: 1, seed: 12, output: "array", schema: jsonSchema(item),
      prompt: "List some items.",
    }),
    generateObject({
      ...settings, temperature: 1, seed: 13, output: "enum", enum: ["north", "south", "east"],
      prompt: "Pick a direction.",
    }),
  ]);
  assert(Array.isArray(array.object), `not an array: ${JSON.stringify(array.object)}`);
  array.object.forEach((x, i) => assertValid(item, x, `element ${i}`));
  assert(["north", "south", "east"].includes(choice.object), `enum ${choice.object}`);
});

await check("generateText with Output.object", async () => {
  const r = await generateText({
    ...settings, temperature: 1, seed: 14, prompt: "Give a result.",
    output: Output.object({ schema: jsonSchema(schemas.result) }),
  });
  assert(r.finishReason === "stop", `finish ${r.finishReason}`);
  assertValid(schemas.result, JSON.parse(r.text), "text");
  assertValid(schemas.result, r.output, "output");
});

await check("streamObject: partial objects, then the whole validates", async () => {
  const r = streamObject({
    ...settings, temperature: 1, seed: 15, schema: jsonSchema(schemas.person),
    prompt: "Describe a person.",
  });
  let partials = 0;
  for await (const partial of r.partialObjectStream) {
    assert(partial && typeof partial === "object", `partial ${JSON.stringify(partial)}`);
    partials++;
  }
  const object = await r.object;
  assert(partials > 1, `${partials} partial objects: not streamed`);
  assertValid(schemas.person, object, "streamed object");
  assert((await r.finishReason) === "stop", `finish ${await r.finishReason}`);
});

await check("the server is idle afterwards", async () => {
  await assertIdle(base, "after the AI SDK suite");
});

done("structured_output_ai_sdk_test");
