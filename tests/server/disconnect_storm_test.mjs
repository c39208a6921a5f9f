// Disconnect storm: N clients (default 200) open streams and abort at random points -- some
// before the first byte of the response, some after a few chunks -- while the server runs them.
// Afterwards the server is healthy, nothing runs, no KV block is held, and a normal request
// still gets its exact completion. Seeded, so a failure replays.
// Usage: node disconnect_storm_test.mjs BASE_URL [N]
import { assert, assertIdle, check, done, metrics, prompt, streamCompletion } from "./harness.mjs";

const base = process.argv[2];
const n = Number(process.argv[3] || 200);
const maxTokens = 64;  // far more than any client waits for

let seed = 12345;
const random = () => {  // xorshift32: the same storm every run
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 4294967296;
};

const kinds = { early: 0, chunks: 0, finished: 0 };  // early: aborted before any chunk
const before = await metrics(base);
const start = Date.now();
await check("storm", async () => {
  const runs = Array.from({ length: n }, (_, i) => {
    const controller = new AbortController();
    const early = random() < 0.3;  // abort before the response's first byte
    const afterChunks = 1 + Math.floor(random() * 8);
    const delayMs = Math.floor(random() * 10);
    let chunks = 0;
    if (early) setTimeout(() => controller.abort(), delayMs);
    return streamCompletion(base, {
      prompt: prompt(i), max_tokens: maxTokens, ignore_eos: true, temperature: 0,
    }, {
      onChunk: (k) => {
        chunks = k;
        if (!early && k >= afterChunks) controller.abort();
      },
    }, { signal: controller.signal }).then((r) => {
      // Only a client that had not aborted yet may see the end; it must be a clean one.
      assert(r.status === 200 && !r.error, `request ${i}: ${JSON.stringify(r)}`);
      kinds.finished++;
    }, (e) => {
      assert(e.name === "AbortError", `request ${i}: ${e}`);
      kinds[chunks === 0 ? "early" : "chunks"]++;
    });
  });
  await Promise.all(runs);
});
const seconds = (Date.now() - start) / 1e3;

await check("every client aborted, both before and after the first chunk", async () => {
  assert(kinds.early + kinds.chunks === n, JSON.stringify(kinds));
  assert(kinds.early >= n / 10 && kinds.chunks >= n / 10, JSON.stringify(kinds));
});
await check("cancelled: nothing runs, no block held", async () => {
  await assertIdle(base, "after the storm");
});
await check("most cancelled well before their end", async () => {
  const m = await metrics(base);
  const generated = m["strata:generation_tokens_total"] - before["strata:generation_tokens_total"];
  assert(generated < (n * maxTokens) / 2, `${generated} tokens generated for aborted clients`);
});
await check("healthy, and a normal request still works", async () => {
  assert((await fetch(`${base}/health`)).status === 200, "health");
  const r = await streamCompletion(base, {
    prompt: prompt(9999), max_tokens: 12, ignore_eos: true, temperature: 0,
  });
  assert(r.status === 200 && r.done && r.tokens === 12 && r.finish === "length",
    JSON.stringify(r));
  await assertIdle(base, "after the normal request");
});
console.log(`disconnect_storm_test: ${n} clients in ${seconds.toFixed(2)} s: ` +
  `${kinds.early} aborted before the first byte, ${kinds.chunks} after some chunks`);
done("disconnect_storm_test");
