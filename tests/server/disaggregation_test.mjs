// Disaggregated serving against colocated serving, with the official openai npm client: a decode
// instance (whose prompts a prefill instance computes, their KV read over the peer transport)
// must answer every request as a colocated instance does -- the same tokens, logprobs within
// 1e-5 -- plain, streaming and chat. Phases:
//   moved   the blocks came from the prefill instance (cached tokens, kv_peer_read_blocks), and a
//           prompt sharing a prefix with an earlier one moves only the blocks the decode
//           instance lacks
//   fault   the prefill instance is stopped or gone: the answers are still right (computed on
//           the decode instance)
// Usage: node disaggregation_test.mjs PHASE DECODE_URL COLOCATED_URL
import OpenAI from "./client/node_modules/openai/index.mjs";
import {
  assert, blockPrompt, check, done, metrics, sameCompletion as sameAnswer,
} from "./harness.mjs";

const [phase, decodeUrl, colocatedUrl] = process.argv.slice(2);
const decode = new OpenAI({ baseURL: `${decodeUrl}/v1`, apiKey: "none", maxRetries: 0 });
const colocated = new OpenAI({ baseURL: `${colocatedUrl}/v1`, apiKey: "none", maxRetries: 0 });
async function metric(url, name) {
  const value = (await metrics(url))[name];
  assert(value !== undefined, `${name} missing from ${url}/metrics`);
  return value;
}
const prompt = blockPrompt;
const sameCompletion = (args, what) => sameAnswer(decode, colocated, args, what);

const model = (await decode.models.list()).data[0].id;
const gen = { model, max_tokens: 12, temperature: 0 };

if (phase === "moved") {
  await check("a long prompt's blocks move and the answer is the colocated one", async () => {
    const before = await metric(decodeUrl, "strata:kv_peer_read_blocks_total");
    const d = await sameCompletion({ ...gen, prompt: prompt(1, 20) }, "20 blocks");
    const read = (await metric(decodeUrl, "strata:kv_peer_read_blocks_total")) - before;
    assert(read === 20, `${read} blocks read from the prefill instance, not 20`);
    assert(d.usage.prompt_tokens_details.cached_tokens === 320,
           `cached tokens ${d.usage.prompt_tokens_details.cached_tokens}`);
  });
  await check("only the blocks the decode instance lacks move", async () => {
    const before = await metric(decodeUrl, "strata:kv_peer_read_blocks_total");
    // The first 20 blocks are the last prompt's, in the decode instance's cache now.
    const p = prompt(1, 20).slice(0, 320).concat(prompt(2, 6));
    await sameCompletion({ ...gen, prompt: p }, "shared prefix");
    const read = (await metric(decodeUrl, "strata:kv_peer_read_blocks_total")) - before;
    assert(read === 6, `${read} blocks read, not the 6 new ones`);
  });
  await check("streaming equals plain and the colocated answer", async () => {
    const args = { ...gen, prompt: prompt(3, 8) };
    const c = await colocated.completions.create(args);
    const stream = await decode.completions.create({ ...args, stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    assert(text === c.choices[0].text, `streamed ${JSON.stringify(text)}`);
  });
  await check("chat through the chat template", async () => {
    const args = {
      model, max_tokens: 10, temperature: 0,
      messages: [{ role: "user", content: "And it came to pass in those days ".repeat(12) }],
    };
    const [d, c] = await Promise.all([
      decode.chat.completions.create(args), colocated.chat.completions.create(args),
    ]);
    assert(d.choices[0].message.content === c.choices[0].message.content, "chat content");
    assert(d.usage.prompt_tokens_details.cached_tokens > 0, "no block moved for the chat");
  });
  await check("n > 1 and several prompts in one request", async () => {
    const args = { ...gen, prompt: [prompt(4, 3), prompt(5, 4)], n: 2, temperature: 0 };
    const [d, c] = await Promise.all([
      decode.completions.create(args), colocated.completions.create(args),
    ]);
    const texts = (r) => r.choices.map((x) => `${x.index}:${x.text}`).sort().join("|");
    assert(texts(d) === texts(c), `${texts(d)} against ${texts(c)}`);
  });
} else if (phase === "fault") {
  await check("the answer is right when the prefill instance fails", async () => {
    await sameCompletion({ ...gen, prompt: prompt(10 + Number(process.argv[5] ?? 0), 9) },
                         "computed on the decode instance");
  });
} else {
  throw new Error(`unknown phase ${phase}`);
}
done(`disaggregation_test ${phase}`);
