// `strata route` driven by the official openai npm client (tests/server/client), three
// `strata serve --kv-events-endpoint` instances behind it. Phases:
//   equal     completions and chat, plain and streaming, greedy: through the router exactly as
//             from an instance directly; bad input gets the instance's own error object
//   placement requests sharing a long prefix land on one instance under `prefix` (and find it
//             cached), and spread over all three under round-robin
//   load      streams and plain requests while the test kills an instance: each either
//             finishes or fails cleanly (an error, never a hang); prints "streaming" once every
//             stream has its first token (the test kills then), then "finished failed"
//   after     with an instance gone (or back, `back`), every request succeeds
// Usage: node route_test.mjs PHASE ROUTER_URL DIRECT_URL [RR_ROUTER_URL]
import OpenAI from "../server/client/node_modules/openai/index.mjs";
import { assert, check, done } from "../server/harness.mjs";

const [phase, routerUrl, directUrl, rrUrl] = process.argv.slice(2);
const client = (url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
const router = client(routerUrl);
const direct = client(directUrl);
const model = (await router.models.list()).data[0].id;
const gen = { model, max_tokens: 12, temperature: 0 };

// Per-instance samples of a labelled router metric: {instance url: value}.
async function perInstance(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = {};
  for (const line of text.split("\n")) {
    const m = /^([a-z_:]+)\{instance="([^"]+)"\} (\S+)$/.exec(line);
    if (m && m[1] === name) out[m[2]] = Number(m[3]);
  }
  return out;
}
const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function streamText(c, create, onFirst = () => {}) {
  let text = "";
  for await (const chunk of await create(c)) {
    const ch = chunk.choices[0];
    if (ch) text += ch.text ?? ch.delta?.content ?? "";
    if (text.length > 0) {
      onFirst();
      onFirst = () => {};
    }
  }
  return text;
}
// A prompt of token ids: `blocks` blocks of 16 tokens and 5 more, from `seed`.
function prompt(seed, blocks, tail = 0) {
  const p = [];
  for (let i = 0; i < blocks * 16; i++) p.push(1 + ((seed * 7919 + i * 104729) % 250));
  for (let i = 0; i < 5; i++) p.push(1 + ((tail * 31 + i * 17) % 250));
  return p;
}

if (phase === "equal") {
  const messages = [{ role: "user", content: "Tell me a story about a fox." }];
  await check("completions equal direct ones", async () => {
    const args = { ...gen, prompt: "Once upon a time there was a" };
    const [a, b] = await Promise.all([router.completions.create(args), direct.completions.create(args)]);
    assert(a.choices[0].text === b.choices[0].text, `${a.choices[0].text} / ${b.choices[0].text}`);
    assert(a.usage.completion_tokens === b.usage.completion_tokens, "usage differs");
  });
  await check("streamed completions equal direct ones", async () => {
    const create = (c) => c.completions.create({ ...gen, prompt: "The sea was", stream: true });
    const [a, b] = await Promise.all([streamText(router, create), streamText(direct, create)]);
    assert(a === b && a.length > 0, `${JSON.stringify(a)} / ${JSON.stringify(b)}`);
  });
  await check("chat equals direct chat", async () => {
    const [a, b] = await Promise.all([router.chat.completions.create({ ...gen, messages }),
                                      direct.chat.completions.create({ ...gen, messages })]);
    assert(a.choices[0].message.content === b.choices[0].message.content, "chat differs");
  });
  await check("streamed chat equals direct chat", async () => {
    const create = (c) => c.chat.completions.create({ ...gen, messages, stream: true });
    const [a, b] = await Promise.all([streamText(router, create), streamText(direct, create)]);
    assert(a === b && a.length > 0, `${JSON.stringify(a)} / ${JSON.stringify(b)}`);
  });
  for (const [what, body] of [["bad JSON", "{bad"], ["no prompt", '{"max_tokens":3}'],
                              ["an unknown model", '{"model":"x","prompt":"a"}'],
                              ["a negative max_tokens", '{"prompt":"a","max_tokens":-1}']]) {
    await check(`${what}: the instance's OpenAI error object, unchanged`, async () => {
      const send = (url) => fetch(`${url}/v1/completions`, {
        method: "POST", headers: { "Content-Type": "application/json" }, body });
      const [a, b] = await Promise.all([send(routerUrl), send(directUrl)]);
      assert(a.status === b.status && a.status >= 400, `status ${a.status} / ${b.status}`);
      const [ta, tb] = [await a.text(), await b.text()];
      assert(ta === tb, `${ta} / ${tb}`);
      assert(JSON.parse(ta).error.message.length > 0, "no error message");
    });
  }
  await check("tokenize goes through", async () => {
    const r = await fetch(`${routerUrl}/tokenize`, { method: "POST", body: '{"prompt":"hello"}' });
    assert(r.status === 200 && (await r.json()).tokens.length > 0, `status ${r.status}`);
  });
}

if (phase === "placement") {
  // Each request waits until the router has the previous one's blocks (events are asynchronous).
  async function sendGroup(url, c, seed) {
    const before = await perInstance(url, "strata:router_requests_total");
    const cached = [];
    for (let i = 0; i < 6; i++) {
      const r = await c.completions.create({ ...gen, max_tokens: 2, prompt: prompt(seed, 12, i) });
      cached.push(r.usage.prompt_tokens_details.cached_tokens);
      const end = Date.now() + 3000;
      while (sum(await perInstance(url, "strata:router_index_blocks")) === 0 && Date.now() < end) {
        await sleep(20);
      }
      await sleep(50);
    }
    const after = await perInstance(url, "strata:router_requests_total");
    return { cached, counts: Object.keys(after).map((k) => after[k] - (before[k] ?? 0)) };
  }
  await check("prefix: a shared prefix's requests go to one instance and hit", async () => {
    const { cached, counts } = await sendGroup(routerUrl, router, 11);
    assert(counts.filter((n) => n > 0).length === 1, `spread: ${counts}`);
    assert(cached.slice(1).every((n) => n >= 192), `cached tokens ${cached}`);
    const predicted = sum(await perInstance(routerUrl, "strata:router_predicted_cached_blocks_total"));
    assert(predicted >= 5 * 12, `predicted ${predicted} blocks`);
  });
  await check("round-robin: the same kind of group spreads over every instance", async () => {
    const { counts } = await sendGroup(rrUrl, client(rrUrl), 12);
    assert(counts.length === 3 && counts.every((n) => n === 2), `counts ${counts}`);
  });
}

if (phase === "load") {
  // Long enough that every request is still decoding when the kill lands, which the test sends
  // as soon as all six streams have a token: the plain requests went out with them.
  const long = { model, max_tokens: 300, temperature: 0, ignore_eos: true };
  let finished = 0;
  let failed = 0;
  let streaming = 0;
  const started = () => {
    if (++streaming === 6) console.log("streaming");
  };
  const jobs = [];
  for (let i = 0; i < 6; i++) {
    jobs.push((async () => {
      try {
        await streamText(router, (c) => c.completions.create({ ...long, prompt: `s${i}`, stream: true }),
                         started);
        finished++;
      } catch (e) {
        failed++;  // the stream's error event: a clean end
      }
    })());
    jobs.push((async () => {
      try {
        await router.completions.create({ ...long, prompt: `p${i}` });
        finished++;
      } catch (e) {
        assert(e.status === 502 || e.status === 503, `plain request failed with ${e.status}`);
        failed++;
      }
    })());
  }
  await Promise.all(jobs);
  console.log(`${finished} ${failed}`);
  process.exit(0);
}

if (phase === "after" || phase === "back") {
  await check(`every request succeeds with an instance ${phase === "after" ? "gone" : "back"}`,
    async () => {
      for (let i = 0; i < 6; i++) {
        const r = await router.completions.create({ ...gen, prompt: `after ${i}` });
        assert(r.choices[0].text.length > 0, "empty answer");
      }
    });
}

done(`route_test ${phase}`);
