// What the structured-output client suites share (structured_output_test.sh runs them): the
// pinned packages of client/node_modules loaded by their ESM entry, the schemas the suites ask
// for, ajv validation of every finished output, and checks of OpenAI error objects.
//
// The schemas are bounded (every string has a maxLength, every array a maxItems, every number
// bounds), so a constrained output must close within a few hundred tokens: on them a finish
// other than "stop" is a failure, not bad luck.
import { readFileSync } from "node:fs";
import { assert } from "./harness.mjs";

const clientDir = new URL("./client/", import.meta.url);

// The URL of a package's ESM entry point (its exports' "import" condition), as `import` would
// resolve it from client/, where the packages live (tests/server has no node_modules).
export function pkg(name, sub = ".") {
  const dir = new URL(`node_modules/${name}/`, clientDir);
  const meta = JSON.parse(readFileSync(new URL("package.json", dir), "utf8"));
  let target = meta.exports?.[sub] ?? (sub === "." ? meta.exports : undefined);
  while (target && typeof target === "object") target = target.import ?? target.default;
  target ??= sub === "." ? (meta.module ?? meta.main ?? "index.js") : sub;
  return new URL(target, dir).href;
}

const { default: Ajv } = await import(pkg("ajv"));
const ajv = new Ajv({ allErrors: true, strict: false });

// Throws unless `value` is valid against `schema` (ajv, draft-07 vocabulary; a schema's own
// $schema is dropped so a 2020-12 one from zod 4 compiles too).
export function assertValid(schema, value, what) {
  const { $schema, ...rest } = schema;
  const validate = ajv.compile(rest);
  assert(validate(value),
    `${what}: ${JSON.stringify(value)} is not valid: ${ajv.errorsText(validate.errors)}`);
}

// Parses a finished output and validates it; returns the value.
export function assertJsonValid(schema, text, what) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`${what}: not JSON (${e.message}): ${JSON.stringify(text)}`);
  }
  assertValid(schema, value, what);
  return value;
}

// A regex of the server's dialect matched the whole output: JavaScript's RegExp, anchored.
export function assertMatchesWhole(pattern, text, what) {
  assert(new RegExp(`^(?:${pattern})$`).test(text),
    `${what}: ${JSON.stringify(text)} does not match /${pattern}/ whole`);
}

export function assertStop(finish, text, what) {
  assert(finish === "stop", `${what}: finish_reason ${finish} (bounded schema), text ${
    JSON.stringify(text)}`);
}

// Awaits a call that must fail with an OpenAI error object of this status naming `param` (or
// one of the names of a list). `read(e)` takes the client's error apart into
// {status, param, message}.
export async function assertApiError(call, status, param, read, what) {
  let err;
  try {
    await call();
  } catch (e) {
    err = e;
  }
  assert(err, `${what}: no error`);
  const got = read(err);
  assert(got.status === status,
    `${what}: status ${got.status}, expected ${status} (${got.message})`);
  const params = [param].flat();
  if (param !== undefined) {
    assert(params.includes(got.param),
      `${what}: param ${got.param}, expected ${params.join(" or ")} (${got.message})`);
  }
  return got;
}

// A fetch that records each request's JSON body in `bodies`, for a client's `fetch` option: what
// the client sent, not only what came back.
export function recordingFetch(bodies) {
  return (url, init) => {
    if (typeof init?.body === "string") bodies.push(JSON.parse(init.body));
    return fetch(url, init);
  };
}

// ---- the schemas ----

// Nested objects, an enum, bounded integers, a string pattern, an array of bounded length.
export const personSchema = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 16 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    role: { enum: ["admin", "editor", "guest"] },
    address: {
      type: "object",
      properties: {
        city: { type: "string", maxLength: 12 },
        zip: { type: "string", pattern: "^[0-9]{5}$" },
      },
      required: ["city", "zip"],
      additionalProperties: false,
    },
    tags: { type: "array", items: { type: "string", maxLength: 8 }, minItems: 1, maxItems: 3 },
  },
  required: ["name", "age", "role", "address", "tags"],
  additionalProperties: false,
};

// anyOf of an integer range, a short string and null; a boolean; a negative integer range.
export const resultSchema = {
  type: "object",
  properties: {
    result: {
      anyOf: [
        { type: "integer", minimum: -50, maximum: 50 },
        { type: "string", maxLength: 10 },
        { type: "null" },
      ],
    },
    ok: { type: "boolean" },
    delta: { type: "integer", minimum: -999, maximum: -10 },
  },
  required: ["result", "ok", "delta"],
  additionalProperties: false,
};

// A top-level array of 2 to 4 objects, through $defs / $ref, with an optional property and a
// const.
export const itemsSchema = {
  $defs: {
    item: {
      type: "object",
      properties: {
        kind: { const: "item" },
        id: { type: "integer", minimum: 1, maximum: 999 },
        label: { type: "string", maxLength: 6 },
        flags: { type: "array", items: { type: "boolean" }, maxItems: 2 },
      },
      required: ["kind", "id", "label"],
      additionalProperties: false,
    },
  },
  type: "array",
  items: { $ref: "#/$defs/item" },
  minItems: 2,
  maxItems: 4,
};

export const schemas = { person: personSchema, result: resultSchema, items: itemsSchema };

// Not compiled by the server: a keyword it refuses (not), and a type that does not exist.
export const refusedSchema = {
  type: "object",
  properties: { a: { not: { type: "string" } } },
  required: ["a"],
};
export const nonsenseSchema = { type: "object", properties: { a: { type: "strng" } } };
