// What the server stress tests share: streaming a completion over raw fetch (server-sent events,
// token ids counted), reading /metrics, and small assertions. Node 18+ (global fetch).

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// GET /metrics as {name: value} for the unlabelled samples.
export async function metrics(base, headers = {}) {
  const res = await fetch(`${base}/metrics`, { headers });
  assert(res.status === 200, `/metrics answered ${res.status}`);
  const out = {};
  for (const line of (await res.text()).split("\n")) {
    const m = /^(strata:[a-z_]+) (\S+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

// Polls /metrics until pred(metrics) holds (the engine thread refreshes its snapshot after a
// step, so a just-finished request can take one step to show); returns the last metrics.
export async function metricsWhen(base, pred, timeoutMs = 5000) {
  const end = Date.now() + timeoutMs;
  let m = await metrics(base);
  while (!pred(m) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
    m = await metrics(base);
  }
  return m;
}

// The server at rest: nothing running or waiting, no KV block held, only this scrape in flight.
export async function assertIdle(base, what) {
  const m = await metricsWhen(
    base,
    (m) => m["strata:num_requests_running"] === 0 && m["strata:num_requests_waiting"] === 0 &&
      m["strata:kv_cache_used_blocks"] === 0 && m["strata:http_requests_active"] === 1,
  );
  for (const [k, v] of [["strata:num_requests_running", 0], ["strata:num_requests_waiting", 0],
    ["strata:kv_cache_used_blocks", 0], ["strata:kv_cache_usage_perc", 0],
    ["strata:http_requests_active", 1]]) {
    assert(m[k] === v, `${what}: ${k} = ${m[k]}, expected ${v}`);
  }
  return m;
}

// Streams POST /v1/completions. Returns {status, tokens, finish, done, events, error}:
// tokens counted from each chunk's token_ids, finish the last finish_reason, done whether
// [DONE] came. hooks.onOpen() runs when the 200 response's headers arrive, hooks.onFirst() at
// the first chunk, hooks.onChunk(events, tokens) after each, with the counts so far.
export async function streamCompletion(base, body, hooks = {}, init = {}) {
  const out = { status: 0, tokens: 0, finish: null, done: false, events: 0, error: null };
  const res = await fetch(`${base}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(init.headers || {}) },
    body: JSON.stringify({ ...body, stream: true, return_token_ids: true }),
    signal: init.signal,
  });
  out.status = res.status;
  if (res.status !== 200) {
    out.error = await res.text();
    return out;
  }
  if (hooks.onOpen) hooks.onOpen();
  // Read by hand and stop at an abort: Node 20's fetch can leave a read pending forever once its
  // request is aborted after the body has ended (a hook that aborts while the events of one
  // read are still being handled), and a `for await` would then wait on it, and on the cancel
  // it sends when the loop throws. A pending read loses a race with the abort.
  const signal = init.signal;
  const aborted = signal ? new Promise((_, reject) => {
    const fire = () => reject(signal.reason);
    if (signal.aborted) fire();
    else signal.addEventListener("abort", fire, { once: true });
  }) : null;
  aborted?.catch(() => {});  // seen through the races below
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    if (signal?.aborted) {
      reader.cancel().catch(() => {});
      throw signal.reason;
    }
    const read = reader.read();
    read.catch(() => {});  // a read that loses the race may still reject
    const { done, value: bytes } = await (aborted ? Promise.race([read, aborted]) : read);
    if (done) break;
    buffer += decoder.decode(bytes, { stream: true });
    let at;
    while ((at = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      if (!event.startsWith("data: ")) continue;
      const data = event.slice(6);
      if (data === "[DONE]") {
        out.done = true;
        continue;
      }
      const j = JSON.parse(data);
      if (j.error) out.error = JSON.stringify(j.error);
      for (const c of j.choices || []) {
        out.tokens += (c.token_ids || []).length;
        if (c.finish_reason) out.finish = c.finish_reason;
      }
      if (out.events++ === 0 && hooks.onFirst) hooks.onFirst();
      if (hooks.onChunk) hooks.onChunk(out.events, out.tokens);
    }
  }
  return out;
}

// A token-id prompt of n ids, different for each i (no two requests share a cached prefix).
export function prompt(i, n = 8) {
  return Array.from({ length: n }, (_, k) => 2 + ((i * 131 + k * 17) % 8000));
}

// A token-id prompt of `blocks` blocks of 16 tokens and a few more, from `seed` (the same seed
// and blocks: the same prompt; prompts of one seed share their leading blocks).
export function blockPrompt(seed, blocks) {
  const p = [];
  for (let i = 0; i < blocks * 16 + 5; i++) p.push(1 + ((seed * 7919 + i * 104729) % 250));
  return p;
}

export function sameLogprobs(a, b, what) {
  assert(a.length === b.length, `${what}: ${a.length} logprobs against ${b.length}`);
  for (let i = 0; i < a.length; i++) {
    assert(Math.abs(a[i] - b[i]) <= 1e-5, `${what}: logprob ${i}: ${a[i]} against ${b[i]}`);
  }
}

// The same completion from two openai clients at once: the same text, logprobs within 1e-5.
// Returns the first client's response.
export async function sameCompletion(client, reference, args, what) {
  const [r, c] = await Promise.all([
    client.completions.create({ ...args, logprobs: 1 }),
    reference.completions.create({ ...args, logprobs: 1 }),
  ]);
  assert(r.choices[0].text === c.choices[0].text,
         `${what}: text ${JSON.stringify(r.choices[0].text)} against ${JSON.stringify(c.choices[0].text)}`);
  sameLogprobs(r.choices[0].logprobs.token_logprobs, c.choices[0].logprobs.token_logprobs, what);
  return r;
}

export function report(name, passed, failed) {
  console.log(`${name}: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

// Named checks, counted: a failing one prints its name and stack, and the run goes on; done()
// reports the counts and exits (1 if any failed).
const tally = { passed: 0, failed: 0 };
export async function check(name, fn) {
  try {
    await fn();
    tally.passed++;
  } catch (e) {
    tally.failed++;
    console.log(`FAIL: ${name}: ${e.stack || e}`);
  }
}
export function done(name) {
  report(name, tally.passed, tally.failed);
}
