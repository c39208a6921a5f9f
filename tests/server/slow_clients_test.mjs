// Slow clients (slowloris): N connections that each send a request head one byte at a time, every
// second, and never finish it. While they hang on, /health must keep answering quickly (each slow
// client costs the server a socket, never a thread; a probe unanswered within 3 s counts as
// infinite), and the server must close them once its read deadline passes. Prints a line and,
// with --json, one JSON line.
// Usage: node slow_clients_test.mjs BASE_URL N READ_TIMEOUT_S [--json]
import net from "node:net";
import { assert, check, done, metrics } from "./harness.mjs";

const base = process.argv[2];
const n = Number(process.argv[3]);
const readTimeoutS = Number(process.argv[4]);
const json = process.argv.includes("--json");
const { hostname: host, port } = new URL(base);

const head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: ";
let closedByServer = 0;
const sockets = [];
await new Promise((resolve) => {
  let connected = 0;
  for (let i = 0; i < n; ++i) {
    const s = net.connect(Number(port), host);
    s.setNoDelay(true);
    s.on("error", () => {});
    s.on("close", () => ++closedByServer);
    s.on("connect", () => {
      s.write(head.slice(0, 5));
      if (++connected === n) resolve();
    });
    let at = 5;
    s.trickle = setInterval(() => {
      if (s.destroyed) return clearInterval(s.trickle);
      s.write(at < head.length ? head[at++] : "a");
    }, 1000);
    sockets.push(s);
  }
});

// /health while they hang on: 20 probes, 100 ms apart. The slow clients must all be open at each
// probe that starts a second or more before their read deadline (a loaded machine may take
// longer than the deadline for all 20).
const connectedAt = performance.now();
let openAtProbes = n;
let probesBeforeDeadline = 0;
const ms = [];
for (let i = 0; i < 20; ++i) {
  const t0 = performance.now();
  if (t0 - connectedAt < (readTimeoutS - 1) * 1000) {
    openAtProbes = Math.min(openAtProbes, sockets.filter((s) => !s.destroyed).length);
    ++probesBeforeDeadline;
  }
  try {
    const res = await fetch(`${base}/health`, { signal: AbortSignal.timeout(3000) });
    await res.text();
    ms.push(res.status === 200 ? performance.now() - t0 : Infinity);
  } catch {
    ms.push(Infinity);  // no answer within 3 s
  }
  await new Promise((r) => setTimeout(r, 100));
}
ms.sort((a, b) => a - b);
const median = ms[Math.floor(ms.length / 2)];
const max = ms[ms.length - 1];
await check("/health answers while the slow clients hang on", () => {
  assert(probesBeforeDeadline >= 5, `only ${probesBeforeDeadline} probes before the read deadline`);
  assert(openAtProbes === n, `only ${openAtProbes} of ${n} slow connections were held open`);
  assert(median < 100, `/health median ${median.toFixed(1)} ms with ${n} slow clients`);
  assert(max < 2000, `/health slowest ${max.toFixed(1)} ms with ${n} slow clients`);
});

// The read deadline: every slow client is closed by the server.
const deadline = Date.now() + (readTimeoutS + 5) * 1000;
while (closedByServer < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
await check("the read deadline closes every slow client", async () => {
  assert(closedByServer === n, `${n - closedByServer} slow clients still open after the deadline`);
  const m = await metrics(base);
  assert(m["strata:http_read_timeouts_total"] === n,
    `strata:http_read_timeouts_total = ${m["strata:http_read_timeouts_total"]}, expected ${n}`);
});
for (const s of sockets) {
  clearInterval(s.trickle);
  s.destroy();
}
const row = { slow_clients: n, health_median_ms: +median.toFixed(2), health_max_ms: +max.toFixed(2),
  closed_by_deadline: closedByServer };
if (json) console.log(JSON.stringify(row));
else console.log(`slow clients ${n}: /health median ${row.health_median_ms} ms, slowest ` +
  `${row.health_max_ms} ms; closed by the ${readTimeoutS} s read deadline: ${closedByServer}`);
done("slow_clients_test");
