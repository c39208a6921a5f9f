// Structured outputs through the official openai npm client (pinned in client/package.json)
// against a running strata serve: chat with response_format json_schema (nested objects, enums,
// anyOf, bounded integers and strings, arrays with minItems / maxItems, $ref) greedy and seeded,
// streaming, n > 1 and json_object; completions with vLLM's guided_choice / guided_regex /
// guided_json / guided_grammar (a recursive GBNF grammar, nesting cut at the server's
// --structured-output-max-grammar-depth 3) and structured_outputs; and the 400s naming the field
// for what does not compile.
// Every finished output is validated with ajv (regexes with an anchored JavaScript RegExp).
// Usage: node structured_output_openai_test.mjs BASE_URL API_KEY
import { assert, assertIdle, check, done } from "./harness.mjs";
import {
  assertApiError, assertJsonValid, assertMatchesWhole, assertStop, nonsenseSchema, pkg,
  refusedSchema, schemas,
} from "./structured_output_testing.mjs";

const { default: OpenAI } = await import(pkg("openai"));
const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: process.argv[3], maxRetries: 0 });
const model = "strata-tiny";
const read = (e) => {
  assert(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
  return { status: e.status, param: e.param, message: e.message };
};
const jsonSchema = (name, schema) => ({
  type: "json_schema", json_schema: { name, schema, strict: true },
});
const messages = (what) => [
  { role: "system", content: "You answer with JSON only." },
  { role: "user", content: `Describe ${what} as JSON.` },
];

await check("chat json_schema, greedy and seeded temperature 1, each schema", async () => {
  const runs = [];
  for (const [name, schema] of Object.entries(schemas)) {
    for (const sampling of [{ temperature: 0 }, { temperature: 1, seed: 1234 }]) {
      runs.push((async () => {
        const what = `${name} ${JSON.stringify(sampling)}`;
        const r = await client.chat.completions.create({
          model, messages: messages(`a ${name}`), max_tokens: 400, ...sampling,
          response_format: jsonSchema(name, schema),
        });
        const c = r.choices[0];
        assertStop(c.finish_reason, c.message.content, what);
        assertJsonValid(schema, c.message.content, what);
        return c.message.content;
      })());
    }
  }
  await Promise.all(runs);
});

await check("chat json_schema: a seed repeats its output", async () => {
  const args = {
    model, messages: messages("a person"), max_tokens: 400, temperature: 1, seed: 99,
    response_format: jsonSchema("person", schemas.person),
  };
  // One after the other, so both run in a batch of one.
  const a = await client.chat.completions.create(args);
  const b = await client.chat.completions.create(args);
  assert(a.choices[0].message.content === b.choices[0].message.content,
    `${a.choices[0].message.content} != ${b.choices[0].message.content}`);
});

await check("chat json_schema streamed: the concatenated deltas validate", async () => {
  const stream = await client.chat.completions.create({
    model, messages: messages("a list of items"), max_tokens: 400, temperature: 1, seed: 5,
    response_format: jsonSchema("items", schemas.items), stream: true,
  });
  let text = "";
  let finish = null;
  let chunks = 0;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
    chunks++;
  }
  assert(chunks > 3, `${chunks} chunks: not streamed`);
  assertStop(finish, text, "stream");
  assertJsonValid(schemas.items, text, "stream");
});

await check("chat json_schema with n = 3: every choice validates", async () => {
  const r = await client.chat.completions.create({
    model, messages: messages("a result"), max_tokens: 400, temperature: 1, seed: 7, n: 3,
    response_format: jsonSchema("result", schemas.result),
  });
  assert(r.choices.length === 3, `${r.choices.length} choices`);
  for (const c of r.choices) {
    assertStop(c.finish_reason, c.message.content, `choice ${c.index}`);
    assertJsonValid(schemas.result, c.message.content, `choice ${c.index}`);
  }
});

await check("chat json_object: an object, plain and streamed", async () => {
  const args = {
    model, messages: messages("anything"), max_tokens: 400, temperature: 1, seed: 3,
    response_format: { type: "json_object" },
  };
  const r = await client.chat.completions.create(args);
  const c = r.choices[0];
  // Any object: nothing bounds its strings, so "length" is possible and only "stop" is checked.
  if (c.finish_reason === "stop") {
    assertJsonValid({ type: "object" }, c.message.content, "json_object");
  }
  const stream = await client.chat.completions.create({ ...args, stream: true });
  let text = "";
  let finish = null;
  for await (const chunk of stream) {
    for (const d of chunk.choices) {
      text += d.delta.content ?? "";
      finish = d.finish_reason ?? finish;
    }
  }
  assert(text === c.message.content, `stream ${JSON.stringify(text)} != plain`);
  assert(finish === c.finish_reason, `stream finish ${finish} != ${c.finish_reason}`);
});

await check("completions: guided_choice", async () => {
  const choices = ["alpha", "beta", "gamma delta", "alphabet"];
  const r = await client.completions.create({
    model, prompt: "Pick one:", max_tokens: 20, temperature: 1, seed: 11, n: 4,
    guided_choice: choices, guided_decoding_backend: "xgrammar",
  });
  for (const c of r.choices) {
    assertStop(c.finish_reason, c.text, `choice ${c.index}`);
    assert(choices.includes(c.text), `choice ${c.index}: ${JSON.stringify(c.text)}`);
  }
});

await check("completions: guided_regex, plain and streamed", async () => {
  const pattern = "[0-9]{3}-[a-z]{2,5}( [A-Z][a-z]{1,6}){1,3}";
  const r = await client.completions.create({
    model, prompt: "A code:", max_tokens: 60, temperature: 0, guided_regex: pattern,
  });
  assertStop(r.choices[0].finish_reason, r.choices[0].text, "plain");
  assertMatchesWhole(pattern, r.choices[0].text, "plain");
  const stream = await client.completions.create({
    model, prompt: "A code:", max_tokens: 60, temperature: 1, seed: 8, guided_regex: pattern,
    stream: true,
  });
  let text = "";
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      finish = c.finish_reason ?? finish;
    }
  }
  assertStop(finish, text, "stream");
  assertMatchesWhole(pattern, text, "stream");
});

// Lists of numbers and lists, in GBNF: recursive, so the server expands it to its depth (3: a
// list inside at most 3 more). Its texts are JSON arrays written with ", ".
const listGrammar = `# a list of up to two items, each a number or a list
root ::= list
list ::= "[" ( item ( ", " item )? )? "]"
item ::= [1-9] [0-9]{0,2} | list   # numbers without leading zeros
`;
const assertListGrammar = (text, what) => {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`${what}: not in the grammar (not JSON): ${JSON.stringify(text)}`);
  }
  assert(JSON.stringify(value).replaceAll(",", ", ") === text,
    `${what}: not in the grammar's spelling: ${JSON.stringify(text)}`);
  const depth = (v) => {
    if (typeof v === "number") {
      assert(Number.isInteger(v) && v >= 1 && v <= 999, `${what}: number ${v}`);
      return 0;
    }
    assert(Array.isArray(v) && v.length <= 2, `${what}: ${JSON.stringify(v)}`);
    return 1 + Math.max(0, ...v.map(depth));
  };
  assert(depth(value) <= 4, `${what}: nested deeper than the server's bound: ${text}`);
};

await check("completions and chat: guided_grammar, plain, streamed and n > 1", async () => {
  const plain = await client.completions.create({
    model, prompt: "A list:", max_tokens: 300, temperature: 1, seed: 5, n: 3,
    guided_grammar: listGrammar,
  });
  for (const c of plain.choices) {
    assertStop(c.finish_reason, c.text, `completion ${c.index}`);
    assertListGrammar(c.text, `completion ${c.index}`);
  }
  const stream = await client.chat.completions.create({
    model, messages: messages("a list"), max_tokens: 300, temperature: 1, seed: 6, stream: true,
    structured_outputs: { grammar: listGrammar },
  });
  let text = "";
  let finish = null;
  for await (const chunk of stream) {
    for (const d of chunk.choices) {
      text += d.delta.content ?? "";
      finish = d.finish_reason ?? finish;
    }
  }
  assertStop(finish, text, "chat stream");
  assertListGrammar(text, "chat stream");
  // Greedy decoding of a grammar that nests: the cut is at the server's depth.
  const deep = await client.completions.create({
    model, prompt: "[[[[[[", max_tokens: 300, temperature: 0,
    guided_grammar: 'root ::= "(" root ")" | "x"',
  });
  assertStop(deep.choices[0].finish_reason, deep.choices[0].text, "parentheses");
  assert(/^(\(){0,3}x(\)){0,3}$/.test(deep.choices[0].text) &&
    deep.choices[0].text.split("(").length === deep.choices[0].text.split(")").length,
  `parentheses: ${deep.choices[0].text}`);
});

await check("completions: guided_json, structured_outputs and response_format", async () => {
  const runs = [
    ["guided_json", schemas.person, { guided_json: schemas.person }],
    ["guided_json as text", schemas.result, { guided_json: JSON.stringify(schemas.result) }],
    ["structured_outputs.json", schemas.items, { structured_outputs: { json: schemas.items } }],
    ["response_format", schemas.result, { response_format: jsonSchema("result", schemas.result) }],
  ].map(async ([what, schema, field]) => {
    const r = await client.completions.create({
      model, prompt: "JSON:", max_tokens: 400, temperature: 1, seed: 21, ...field,
    });
    assertStop(r.choices[0].finish_reason, r.choices[0].text, what);
    assertJsonValid(schema, r.choices[0].text, what);
  });
  await Promise.all(runs);
});

await check("completions: structured_outputs regex, choice and json_object", async () => {
  const pattern = "(yes|no), [a-z]{1,8}";
  const regex = await client.completions.create({
    model, prompt: "Answer:", max_tokens: 30, temperature: 1, seed: 4,
    structured_outputs: { regex: pattern },
  });
  assertStop(regex.choices[0].finish_reason, regex.choices[0].text, "regex");
  assertMatchesWhole(pattern, regex.choices[0].text, "regex");
  const choice = await client.completions.create({
    model, prompt: "Answer:", max_tokens: 10, temperature: 0,
    structured_outputs: { choice: ["left", "right"] },
  });
  assert(["left", "right"].includes(choice.choices[0].text), `choice ${choice.choices[0].text}`);
  const object = await client.completions.create({
    model, prompt: "JSON:", max_tokens: 200, temperature: 0,
    structured_outputs: { json_object: true },
  });
  if (object.choices[0].finish_reason === "stop") {
    assertJsonValid({ type: "object" }, object.choices[0].text, "json_object");
  }
});

await check("max_tokens cuts a constrained output: finish_reason length", async () => {
  const r = await client.chat.completions.create({
    model, messages: messages("a person"), max_tokens: 3, temperature: 0,
    response_format: jsonSchema("person", schemas.person),
  });
  const c = r.choices[0];
  assert(c.finish_reason === "length", `finish ${c.finish_reason}`);
  assert(c.message.content.startsWith("{"), `a prefix of the object: ${c.message.content}`);
});

await check("a stop string still cuts a constrained output", async () => {
  // finish_reason "stop" then means the stop string, not a complete output (as in vLLM).
  const r = await client.chat.completions.create({
    model, messages: messages("a person"), max_tokens: 400, temperature: 0, stop: ["\"age\""],
    response_format: jsonSchema("person", schemas.person),
  });
  const c = r.choices[0];
  assert(c.finish_reason === "stop" && c.message.content.startsWith("{\"name\":\"") &&
    !c.message.content.includes("\"age\"") && c.message.content.endsWith(","),
  `${c.finish_reason} ${c.message.content}`);
});

// The chat default max_tokens is the room the context leaves, not completions' 16.
await check("chat without max_tokens finishes a small object", async () => {
    const r = await client.chat.completions.create({
      model, messages: messages("a result"), temperature: 0,
      response_format: jsonSchema("result", schemas.result),
    });
    assertStop(r.choices[0].finish_reason, r.choices[0].message.content, "no max_tokens");
  });

await check("what does not compile is a 400 naming the field", async () => {
  const chat = (extra) => () => client.chat.completions.create({
    model, messages: messages("x"), max_tokens: 8, ...extra,
  });
  const completion = (extra) => () => client.completions.create({
    model, prompt: "x", max_tokens: 8, ...extra,
  });
  for (const [what, call, param, reason] of [
    ["refused keyword", chat({ response_format: jsonSchema("x", refusedSchema) }),
      "response_format"],
    ["unknown type", chat({ response_format: jsonSchema("x", nonsenseSchema) }),
      "response_format"],
    ["guided_json", completion({ guided_json: refusedSchema }), "guided_json"],
    ["guided_json text", completion({ guided_json: "{\"type\": " }), "guided_json"],
    ["guided_regex", completion({ guided_regex: "[a-" }), "guided_regex"],
    ["guided_regex group", chat({ guided_regex: "(ab" }), "guided_regex"],
    ["structured_outputs.regex", completion({ structured_outputs: { regex: "a{3,1}" } }),
      "structured_outputs"],
    ["structured_outputs.json", chat({ structured_outputs: { json: nonsenseSchema } }),
      "structured_outputs"],
    ["guided_grammar syntax", completion({ guided_grammar: "root ::= \"a" }), "guided_grammar",
      "line 1, column 10"],
    ["guided_grammar undefined rule", chat({ guided_grammar: "root ::= a b\na ::= \"x\"" }),
      "guided_grammar", "rule 'b' is not defined"],
    ["guided_grammar without root", completion({ guided_grammar: "start ::= \"x\"" }),
      "guided_grammar", "no 'root' rule"],
    ["guided_grammar empty language", completion({ guided_grammar: "root ::= \"(\" root \")\"" }),
      "guided_grammar", "language is empty"],
    ["structured_outputs.grammar", completion({ structured_outputs: { grammar: "root ::= [z-a]" } }),
      "structured_outputs", "out of order"],
    ["two constraints", completion({ guided_regex: "a", guided_choice: ["b"] }), undefined],
    ["tools on completions",
      completion({ tools: [{ type: "function", function: { name: "f", parameters: {} } }] }),
      "tools"],
  ]) {
    const e = await assertApiError(call, 400, param, read, what);
    assert(e.message.length > 0, `${what}: an empty message`);
    assert(reason === undefined || e.message.includes(reason), `${what}: ${e.message}`);
  }
});

await check("the server is idle afterwards", async () => {
  await assertIdle(base, "after the openai suite");
});

done("structured_output_openai_test");
