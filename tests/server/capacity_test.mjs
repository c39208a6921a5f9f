// --max-waiting-requests: with LIMIT sequences in flight a new request gets 503 with Retry-After
// and an OpenAI error object; a burst of requests at once admits exactly LIMIT; a request that
// alone needs more sequences (prompts x n) than LIMIT is a 400; once the streams holding the
// server are cancelled (their clients go away) a request is served again and no block is held.
// Usage: node capacity_test.mjs BASE_URL LIMIT
import { assert, assertIdle, check, done, metricsWhen, prompt, streamCompletion } from "./harness.mjs";

const base = process.argv[2];
const limit = Number(process.argv[3]);

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
await check("a burst of 8 x LIMIT requests at once: exactly LIMIT admitted", async () => {
  // Every response's head arrives (200: a stream began; 503: refused) before any stream ends.
  const controllers = [];
  const burst = Array.from({ length: 8 * limit }, (_, i) => {
    const c = new AbortController();
    controllers.push(c);
    return fetch(`${base}/v1/completions`, {
      method: "POST", headers: { "content-type": "application/json" }, signal: c.signal,
      body: JSON.stringify({ prompt: prompt(100 + i), max_tokens: 4000, ignore_eos: true,
        stream: true }),
    }).then((res) => res.status, (e) => e.name);
  });
  const codes = await Promise.all(burst);
  for (const c of controllers) c.abort();
  const admitted = codes.filter((c) => c === 200).length;
  const refused = codes.filter((c) => c === 503).length;
  assert(admitted <= limit && admitted + refused === codes.length,
    `admitted ${admitted} of a limit of ${limit}: ${JSON.stringify(codes)}`);
  await assertIdle(base, "after the burst");
});
await check("prompts x n beyond the limit: 400 naming n", async () => {
  const res = await fetch(`${base}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: Array.from({ length: 4 }, () => "hi"), n: limit, max_tokens: 2 }),
  });
  const body = await res.json();
  assert(res.status === 400 && body.error.param === "n", JSON.stringify(body));
});
done("capacity_test");
