// What an attacker tries against the HTTP layer, over raw sockets: each case must get its status
// at once (never after a timeout), and the server must keep serving. Run against a server started
// with two keys in --api-key-file (KEY1, KEY2), --max-request-body-bytes 1048576 and
// --num-blocks 64 --block-size 16 (a pool of 63 usable blocks: 1,008 tokens per request).
// Usage: node hardening_test.mjs BASE_URL KEY1 KEY2
import net from "node:net";
import { assert, check, done, metricsWhen } from "./harness.mjs";

const base = process.argv[2];
const [key1, key2] = [process.argv[3], process.argv[4]];
const { hostname: host, port } = new URL(base);

// Opens a connection, sends `chunks` (strings or Buffers, or a generator of them: sending stops
// once the server has closed), and resolves with {text, ms, sentAtAnswer} when the server closes
// or `idleMs` passes after the last byte: ms and sentAtAnswer are the time and the bytes sent
// when the first byte of the answer came.
function raw(chunks, { idleMs = 3000 } = {}) {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const socket = net.connect(Number(port), host);
    const got = [];
    let sentBytes = 0;
    let sentAtAnswer = -1;
    let answeredMs = -1;
    let closed = false;
    let timer = null;
    const finish = () => {
      if (timer) clearTimeout(timer);
      socket.destroy();
      resolve({ text: Buffer.concat(got).toString("latin1"), ms: answeredMs, sentAtAnswer });
    };
    const arm = () => {
      if (timer) clearTimeout(timer);
      timer = setTimeout(finish, idleMs);
    };
    socket.on("data", (d) => {
      if (sentAtAnswer < 0) {
        sentAtAnswer = sentBytes;
        answeredMs = Date.now() - started;
      }
      got.push(d);
      arm();
    });
    socket.on("close", () => {
      closed = true;
      finish();
    });
    socket.on("error", () => {});  // a reset after the answer: the answer is what counts
    socket.on("connect", async () => {
      try {
        for (const c of chunks) {
          if (closed) break;
          const buf = Buffer.isBuffer(c) ? c : Buffer.from(c, "latin1");
          sentBytes += buf.length;
          if (!socket.write(buf)) await new Promise((r) => socket.once("drain", r).once("close", r));
          // Let the answer and the close be seen between writes: a loaded machine may otherwise
          // write everything before reading, by which time the server has closed and the reset
          // has dropped its answer.
          await new Promise((r) => setImmediate(r));
        }
      } catch (e) {
        reject(e);
      }
      arm();
    });
  });
}

const status = (text) => Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0);
const statuses = (text) => [...text.matchAll(/HTTP\/1\.[01] (\d{3})/g)].map((m) => Number(m[1]));
async function healthy(what) {
  const res = await fetch(`${base}/health`);
  assert(res.status === 200, `${what}: /health answered ${res.status}`);
}

await check("a path that is not UTF-8 once decoded: 404 with an error object", async () => {
  for (const path of ["/%FF", "/v1/%C3%28", "/%00%FF%FE"]) {
    const r = await raw([`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`]);
    assert(status(r.text) === 404 && r.text.includes('"error"'), `${path}: ${r.text.slice(0, 200)}`);
  }
  await healthy("after the paths");
});

await check("a chunked body over the limit: 413 at once, not after reading it all", async () => {
  const head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" +
    `Authorization: Bearer ${key1}\r\n\r\n`;
  const chunk = "10000\r\n" + "a".repeat(0x10000) + "\r\n";  // 64 KiB a chunk
  function* body() {
    yield head;
    for (let i = 0; i < 300 * 16; ++i) yield chunk;  // 300 MiB if nobody stopped it
  }
  const r = await raw(body(), { idleMs: 2000 });
  assert(status(r.text) === 413, `status ${status(r.text)}: ${r.text.slice(0, 200)}`);
  assert(r.sentAtAnswer < 100 << 20, `the answer came after ${r.sentAtAnswer} bytes`);
  await healthy("after the chunked body");
});

await check("endless header lines: 431, not a request served", async () => {
  function* lines() {
    yield "GET /health HTTP/1.1\r\nHost: x\r\n";
    for (let i = 0; i < 1_000_000; i += 2000) {  // ~30 MB, in 60 KB writes
      let batch = "";
      for (let k = i; k < i + 2000; ++k) batch += `X-Filler-${k}: ${"b".repeat(20)}\r\n`;
      yield batch;
    }
  }
  const r = await raw(lines(), { idleMs: 2000 });
  assert(status(r.text) === 431, `status ${status(r.text)}: ${r.text.slice(0, 200)}`);
  await healthy("after the header lines");
});

await check("a negative or 2^64 Content-Length: 400 at once", async () => {
  for (const len of ["-1", "18446744073709551616", "1e3", "5, 6"]) {
    const r = await raw([`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${len}\r\n\r\n`]);
    assert(status(r.text) === 400 || status(r.text) === 413, `${len}: ${r.text.slice(0, 200)}`);
    assert(r.ms < 1500, `${len}: answered after ${r.ms} ms`);
  }
});

await check("a Content-Length over the limit: 413 before the body is sent", async () => {
  const r = await raw([`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${64 << 20}\r\n` +
    "Expect: 100-continue\r\n\r\n"]);
  assert(status(r.text) === 413 && !r.text.includes("100 Continue"), r.text.slice(0, 200));
  assert(r.ms < 1500, `answered after ${r.ms} ms`);
});

await check("pipelined requests: every one is answered, in order", async () => {
  const one = (prompt) => {
    const body = JSON.stringify({ prompt });
    return `POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key1}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
  };
  const r = await raw([one("In the beginning") + one("God created") + "GET /health HTTP/1.1\r\n" +
    "Host: x\r\nConnection: close\r\n\r\n"]);
  assert(JSON.stringify(statuses(r.text)) === "[200,200,200]", r.text.slice(0, 400));
  const bodies = r.text.split("\r\n\r\n");
  assert(bodies[1].startsWith('{"count"') || bodies[1].includes('"tokens"'), r.text.slice(0, 400));
});

await check("/tokenize and /detokenize need a key; each key of the key file works", async () => {
  const post = (path, body, key) => fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
  });
  assert((await post("/tokenize", { prompt: "hi" })).status === 401, "tokenize without a key");
  assert((await post("/detokenize", { tokens: [5] })).status === 401, "detokenize without a key");
  assert((await post("/tokenize", { prompt: "hi" }, "nope")).status === 401, "a wrong key");
  for (const key of [key1, key2]) {
    assert((await post("/tokenize", { prompt: "hi" }, key)).status === 200, `tokenize with ${key}`);
    const c = await post("/v1/completions", { prompt: [5, 6], max_tokens: 2 }, key);
    assert(c.status === 200, `completion with ${key}: ${c.status}`);
  }
  assert((await fetch(`${base}/metrics`)).status === 200, "/metrics is open by default");
});

await check("/v1/models advertises, and the server enforces, what the pool holds", async () => {
  const res = await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${key1}` } });
  const models = await res.json();
  const len = models.data[0].max_model_len;
  assert(len === 63 * 16, `max_model_len ${len}, expected ${63 * 16} (63 blocks of 16)`);
  const over = await fetch(`${base}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key1}` },
    body: JSON.stringify({ prompt: [5, 6, 7, 8], max_tokens: len - 3 }),
  });
  const body = await over.json();
  assert(over.status === 400 && body.error.code === "context_length_exceeded", JSON.stringify(body));
});

await check("a plain request whose client goes away is cancelled", async () => {
  const before = (await metricsWhen(base, () => true))["strata:generation_tokens_total"];
  const c = new AbortController();
  const call = fetch(`${base}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key1}` },
    body: JSON.stringify({ prompt: [7, 8, 9], max_tokens: 990, ignore_eos: true }),
    signal: c.signal,
  }).catch((e) => e.name);
  await metricsWhen(base, (m) => m["strata:num_requests_running"] === 1, 10000);
  c.abort();
  await call;
  const m = await metricsWhen(base, (m) => m["strata:num_requests_running"] === 0, 3000);
  assert(m["strata:num_requests_running"] === 0, `still running: ${m["strata:num_requests_running"]}`);
  const generated = m["strata:generation_tokens_total"] - before;
  assert(generated < 900, `the abandoned request ran to its end (${generated} tokens)`);
  assert(m["strata:kv_cache_used_blocks"] === 0, `blocks held: ${m["strata:kv_cache_used_blocks"]}`);
});

await healthy("at the end");
done("hardening_test");
