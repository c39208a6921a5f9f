// Bounded load test: N streams at once (default 256) against a running strata serve, each asking
// for exactly MAX_TOKENS tokens (ignore_eos). Asserts that all N were active at the same moment
// -- the engine ran N sequences in one step (strata:num_requests_running_max, the server's own
// count) and the client had N streams open (200 received, not yet finished) --, every stream
// completes with the right number of tokens and no error, and afterwards nothing runs and no KV
// block is held. It also reports how many streams had their first token at once (the client's
// count of streams between first chunk and end): close to N, not asserted, as a stream that
// finishes in the very step the last one starts makes it N - 1 by a hair.
// Usage: node load_test.mjs BASE_URL [N] [MAX_TOKENS]
import { assert, assertIdle, metrics, prompt, report, streamCompletion } from "./harness.mjs";

const base = process.argv[2];
const n = Number(process.argv[3] || 256);
const maxTokens = Number(process.argv[4] || 32);
let passed = 0;
let failed = 0;
const check = (cond, msg) => {
  if (cond) {
    passed++;
  } else {
    failed++;
    console.log(`FAIL: ${msg}`);
  }
};

// Open the connections first (fetch keeps them alive), so the N requests leave at once rather
// than behind N TCP handshakes.
await Promise.all(Array.from({ length: n }, () => fetch(`${base}/health`).then((r) => r.text())));
const before = await metrics(base);
let open = 0;  // 200 received, not finished
let peak = 0;
let streaming = 0;  // first chunk received, not finished
let streamingPeak = 0;
const start = Date.now();
const results = await Promise.all(
  Array.from({ length: n }, (_, i) => {
    let opened = false;
    let started = false;
    const end = () => {
      if (opened) open--;
      if (started) streaming--;
    };
    return streamCompletion(base, {
      prompt: prompt(i), max_tokens: maxTokens, ignore_eos: true, temperature: 0,
    }, {
      onOpen: () => {
        opened = true;
        peak = Math.max(peak, ++open);
      },
      onFirst: () => {
        started = true;
        streamingPeak = Math.max(streamingPeak, ++streaming);
      },
    }).then((r) => {
      end();
      return r;
    }, (e) => {
      end();
      return { status: -1, error: String(e) };
    });
  }),
);
const seconds = (Date.now() - start) / 1e3;
const bad = results.filter((r) => r.status !== 200 || r.error || !r.done ||
  r.tokens !== maxTokens || r.finish !== "length");
check(bad.length === 0, `${bad.length} of ${n} streams went wrong, e.g. ${JSON.stringify(bad[0])}`);
check(peak === n, `the client saw at most ${peak} of ${n} streams open at once`);
const after = await metrics(base);
check(after["strata:num_requests_running_max"] >= n,
  `the server ran at most ${after["strata:num_requests_running_max"]} sequences at once`);
check(after["strata:generation_tokens_total"] - before["strata:generation_tokens_total"] ===
  n * maxTokens, "generation_tokens_total grew by every token");
try {
  await assertIdle(base, "after the load");
  passed++;
} catch (e) {
  failed++;
  console.log(`FAIL: ${e.message}`);
}
console.log(`load_test: ${n} streams x ${maxTokens} tokens in ${seconds.toFixed(2)} s: ` +
  `${after["strata:num_requests_running_max"]} sequences in one step (server), ${peak} streams ` +
  `open at once, ${streamingPeak} between first token and end (client)`);
report("load_test", passed, failed);
