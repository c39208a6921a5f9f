// --max-waiting-requests: with LIMIT requests in flight a new one gets 503 with Retry-After and
// an OpenAI error object; once the streams holding the server are cancelled (their clients go
// away) a request is served again and no block is held.
// Usage: node capacity_test.mjs BASE_URL LIMIT
import { assert, assertIdle, metricsWhen, prompt, report, streamCompletion } from "./harness.mjs";

const base = process.argv[2];
const limit = Number(process.argv[3]);
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

const controllers = [];
const holders = Array.from({ length: limit }, (_, i) => {
  const c = new AbortController();
  controllers.push(c);
  return streamCompletion(base, { prompt: prompt(i), max_tokens: 4000, ignore_eos: true },
    {}, { signal: c.signal }).catch((e) => e.name);
});
await metricsWhen(base, (m) => m["strata:num_requests_running"] === limit, 30000);
await check("at capacity: 503, Retry-After, an error object", async () => {
  const res = await fetch(`${base}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: [5, 6], max_tokens: 2 }),
  });
  const body = await res.json();
  assert(res.status === 503, `status ${res.status}`);
  assert(res.headers.get("retry-after") === "1", `Retry-After ${res.headers.get("retry-after")}`);
  assert(body.error && body.error.type === "service_unavailable", JSON.stringify(body));
});
for (const c of controllers) c.abort();
await Promise.all(holders);
await check("served again once the holders went away, nothing leaked", async () => {
  await assertIdle(base, "after the holders");
  const r = await streamCompletion(base, { prompt: [5, 6], max_tokens: 3, ignore_eos: true });
  assert(r.status === 200 && r.tokens === 3 && r.done, JSON.stringify(r));
});
report("capacity_test", passed, failed);
