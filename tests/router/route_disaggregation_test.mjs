// `strata route --prefill-backend A --prefill-backend B --decode-backend D` against one
// colocated instance C, with the official openai npm client: every answer through the router
// (D decoding, A or B computing the prompt, its KV read over the peer transport) is C's -- the
// same text, logprobs within 1e-5 -- plain, streaming and chat; each prompt is computed on one
// prefill instance (its prompt tokens) and its blocks read by D, a prompt sharing a prefix goes
// to the prefill instance that holds it (the prefix policy over the prefill instances' KV
// events: its cache hits), and distinct prompts at once spread over both.
// Usage: node route_disaggregation_test.mjs ROUTER_URL COLOCATED_URL DECODE_URL PREFILL_A PREFILL_B
import OpenAI from "../server/client/node_modules/openai/index.mjs";
import {
  assert, blockPrompt, check, done, metrics, sameCompletion as sameAnswer,
} from "../server/harness.mjs";

const [routerUrl, colocatedUrl, decodeUrl, ...prefillUrls] = process.argv.slice(2);
const routed = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: "none", maxRetries: 0 });
const colocated = new OpenAI({ baseURL: `${colocatedUrl}/v1`, apiKey: "none", maxRetries: 0 });
// Prompt tokens each prefill instance computed or found cached (its prefill calls' prompts).
const served = async () =>
  Promise.all(prefillUrls.map(async (u) => (await metrics(u))["strata:prompt_tokens_total"]));
const decodeRead = async () => (await metrics(decodeUrl))["strata:kv_peer_read_blocks_total"];
const prompt = blockPrompt;
const sameCompletion = (args, what) => sameAnswer(routed, colocated, args, what);
// The prefill instance whose prompt tokens grew by `tokens` (the other's did not move).
function whichPrefill(before, after, tokens, what) {
  const grew = after.map((a, i) => a - before[i]);
  const i = grew.findIndex((g) => g > 0);
  assert(i >= 0 && grew[i] === tokens && grew.every((g, j) => j === i || g === 0),
         `${what}: the prefill instances took ${JSON.stringify(grew)} prompt tokens`);
  return i;
}

const model = (await routed.models.list()).data[0].id;
const gen = { model, max_tokens: 12, temperature: 0 };
let first = -1;

await check("a prompt is computed on one prefill instance and decoded as colocated", async () => {
  const [s0, r0] = [await served(), await decodeRead()];
  const r = await sameCompletion({ ...gen, prompt: prompt(1, 20) }, "20 blocks");
  first = whichPrefill(s0, await served(), 20 * 16 + 5, "20 blocks");
  assert((await decodeRead()) - r0 === 20, "the decode instance did not read 20 blocks");
  assert(r.usage.prompt_tokens_details.cached_tokens === 320,
         `cached tokens ${r.usage.prompt_tokens_details.cached_tokens}`);
});
await check("a prompt sharing that prefix goes to the same prefill instance", async () => {
  const hits = async () => (await metrics(prefillUrls[first]))["strata:prefix_cache_hits_total"];
  const h0 = await hits();
  const s0 = await served();
  const p = prompt(1, 20).slice(0, 320).concat(prompt(2, 6));
  await sameCompletion({ ...gen, prompt: p }, "shared prefix");
  assert(whichPrefill(s0, await served(), p.length, "shared prefix") === first,
         "the prompt went to the other prefill instance");
  assert((await hits()) - h0 === 320, `the prefill instance hit ${(await hits()) - h0} tokens`);
});
await check("streaming and chat through the router equal the colocated answers", async () => {
  const args = { ...gen, prompt: prompt(3, 8) };
  const c = await colocated.completions.create(args);
  const stream = await routed.completions.create({ ...args, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert(text === c.choices[0].text, `streamed ${JSON.stringify(text)}`);
  const chat = {
    model, max_tokens: 10, temperature: 0,
    messages: [{ role: "user", content: "And it came to pass in those days ".repeat(12) }],
  };
  const [r, cc] = await Promise.all([
    routed.chat.completions.create(chat), colocated.chat.completions.create(chat),
  ]);
  assert(r.choices[0].message.content === cc.choices[0].message.content, "chat content");
  assert(r.usage.prompt_tokens_details.cached_tokens > 0, "no block moved for the chat");
});
await check("both prefill instances get work under concurrent distinct prompts", async () => {
  const s0 = await served();
  await Promise.all([20, 21, 22, 23, 24, 25].map((seed) =>
    sameCompletion({ ...gen, prompt: prompt(seed, 6) }, `prompt ${seed}`)));
  const s1 = await served();
  assert(s1.every((v, i) => v > s0[i]), `served ${JSON.stringify(s0)} -> ${JSON.stringify(s1)}`);
});
done("route_disaggregation_test");
