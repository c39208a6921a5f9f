// SIGTERM during load: N streams (default 64) run, half short enough to finish within the
// shutdown timeout and half too long to, plus one long plain request. The server gets SIGTERM
// once every long stream has its first chunk and every short one is `shortLeft` tokens from its
// end: a few steps of work, whatever the machine's speed (a sanitizer build on a loaded 2-core
// machine runs a step of 65 sequences in ~0.4 s, too slow for a whole short stream in 3 s).
// Asserts: new connections are refused at once, a new request on an open keep-alive connection
// gets 503, every short stream completes (and some were still decoding at the signal), every
// long one ends cleanly (a last chunk with finish_reason "abort", then [DONE]), the plain
// request gets a 503 error object, no connection hangs, and the process is gone within the
// timeout (plus slack for a loaded machine). The caller checks the exit status.
// Usage: node sigterm_test.mjs BASE_URL SERVER_PID SHUTDOWN_TIMEOUT_S [N]
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import { assert, check, done, prompt, streamCompletion } from "./harness.mjs";

const base = process.argv[2];
const pid = Number(process.argv[3]);
const timeoutS = Number(process.argv[4]);
const n = Number(process.argv[5] || 64);
const shortTokens = 16;
const shortLeft = 4;  // tokens each short stream still has to decode when SIGTERM goes
const longTokens = 4000;  // minutes of decoding: only the deadline ends it
const slackS = 3;
const { hostname, port } = new URL(base);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Gone, or a zombie its parent (the test script) has not reaped yet.
const exited = () => {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1][0] === "Z";
  } catch {
    return true;
  }
};
const within = (p, ms, what) => Promise.race([
  p, sleep(ms).then(() => { throw new Error(`${what}: still open after ${ms} ms`); }),
]);

// node:http with one kept-alive connection: opened now, reused after the signal.
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
function request(method, path, body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, method, path, agent,
      headers: { "content-type": "application/json" } }, (res) => {
      let text = "";
      res.on("data", (d) => { text += d; });
      res.on("end", () => resolve({ status: res.statusCode, body: text }));
    });
    req.on("error", reject);
    req.end(body);
  });
}
assert((await request("GET", "/health")).status === 200, "health before");

// Tokens each stream has received so far. All are ready for the signal once every long stream
// has its first chunk and every short one is `shortLeft` tokens (or fewer) from its end.
const received = new Array(n).fill(0);
const isLong = (i) => i % 2 === 1;
const readyAt = (i) => (isLong(i) ? 1 : shortTokens - shortLeft);
let allReady;
const everyoneReady = new Promise((r) => { allReady = r; });
const streams = Array.from({ length: n }, (_, i) => streamCompletion(base, {
  prompt: prompt(i), max_tokens: isLong(i) ? longTokens : shortTokens, ignore_eos: true,
  temperature: 0,
}, {
  onChunk: (events, tokens) => {
    received[i] = tokens;
    if (received.every((t, j) => t >= readyAt(j))) allReady();
  },
}).catch((e) => ({ error: String(e) })));
const plain = fetch(`${base}/v1/completions`, {
  method: "POST", headers: { "content-type": "application/json" },
  body: JSON.stringify({ prompt: prompt(n), max_tokens: longTokens, ignore_eos: true }),
}).then(async (r) => ({ status: r.status, body: await r.json() }), (e) => ({ error: String(e) }));
// The signal goes the moment the marks are reached: anything awaited in between (a request of
// our own) lets a loaded machine finish the short streams first. The kept-alive connection stays
// open that long because the server runs with --http-read-timeout 120 (stress_test.sh).
await within(everyoneReady, 60000, "the streams reaching their marks");
const shortsDecodingAtSignal = received.filter((t, i) => !isLong(i) && t < shortTokens).length;
const t0 = Date.now();
process.kill(pid, "SIGTERM");
await sleep(200);

await check("new connections are refused", async () => {
  const code = await new Promise((resolve) => {
    const s = net.connect({ host: hostname, port: Number(port) });
    s.on("connect", () => { s.destroy(); resolve("connected"); });
    s.on("error", (e) => resolve(e.code));
  });
  assert(code === "ECONNREFUSED", `a new connection: ${code}`);
});
await check("a new request on a kept-alive connection gets 503", async () => {
  const r = await request("POST", "/v1/completions", JSON.stringify({ prompt: [5, 6], max_tokens: 2 }));
  assert(r.status === 503 && JSON.parse(r.body).error.type === "service_unavailable",
    `${r.status} ${r.body}`);
});
const results = await within(Promise.all(streams), (timeoutS + slackS) * 1000, "the streams");
await check("short streams complete", async () => {
  assert(shortsDecodingAtSignal > 0, "every short stream ended before the signal");
  for (let i = 0; i < n; i += 2) {
    const r = results[i];
    assert(r.status === 200 && !r.error && r.done && r.tokens === shortTokens &&
      r.finish === "length", `stream ${i}: ${JSON.stringify(r)}`);
  }
});
await check("long streams end cleanly with abort and [DONE]", async () => {
  for (let i = 1; i < n; i += 2) {
    const r = results[i];
    assert(r.status === 200 && !r.error && r.done && r.finish === "abort" &&
      r.tokens > 0 && r.tokens < longTokens, `stream ${i}: ${JSON.stringify(r)}`);
  }
});
await check("the plain request gets a 503 error object", async () => {
  const r = await within(plain, 5000, "the plain request");
  assert(r.status === 503 && r.body.error && r.body.error.type === "service_unavailable",
    JSON.stringify(r));
});
await check("the process exits within the shutdown timeout", async () => {
  while (!exited()) {
    assert(Date.now() - t0 < (timeoutS + slackS) * 1000, "still running");
    await sleep(20);
  }
  const s = (Date.now() - t0) / 1e3;
  assert(s >= timeoutS - 0.5, `exited after ${s} s, before the timeout`);
  console.log(`sigterm_test: the server exited ${s.toFixed(2)} s after SIGTERM ` +
    `(--shutdown-timeout ${timeoutS})`);
});
agent.destroy();
done("sigterm_test");
