// Renders the real chat templates of the tokenizer fixtures and strata-tiny with @huggingface/jinja
// (the reference for src/chat_template) over a set of conversations, and writes the outputs to
// tests/data/chat_templates/fixtures.json. Run through make_chat_template_fixtures.sh, which installs
// the pinned package; the C++ test must reproduce every output byte for byte.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(process.argv[2] + "/");
const { Template } = require("@huggingface/jinja");
const version = JSON.parse(readFileSync(join(process.argv[2], "node_modules/@huggingface/jinja/package.json"), "utf8")).version;

// Template sources, relative to the repository root (tests/data/tokenizers is fetched by
// scripts/install_deps.sh; models/strata-tiny is committed).
const templates = [
  { name: "qwen3", config: "tests/data/tokenizers/qwen3/tokenizer_config.json", extra: [{ enable_thinking: true }, { enable_thinking: false }, {}] },
  { name: "llama3_1", config: "tests/data/tokenizers/llama3_1/tokenizer_config.json", extra: [{}] },
  { name: "deepseek_v3", config: "tests/data/tokenizers/deepseek_v3/tokenizer_config.json", extra: [{}] },
  { name: "strata_tiny", config: "models/strata-tiny/tokenizer_config.json", extra: [{}] },
];

const conversations = {
  single_user: [{ role: "user", content: "Hello!" }],
  system_user: [
    { role: "system", content: "You are a helpful assistant." },
    { role: "user", content: "What is 2 + 2?" },
  ],
  multi_turn: [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Name a colour." },
    { role: "assistant", content: "Blue." },
    { role: "user", content: "Another one?" },
  ],
  two_systems: [
    { role: "system", content: "First rule." },
    { role: "system", content: "Second rule." },
    { role: "user", content: "Go." },
  ],
  reasoning_history: [
    { role: "user", content: "Think first: 3 * 7?" },
    { role: "assistant", content: "<think>\nThree sevens are 21.\n</think>\n\n21" },
    { role: "user", content: "And 3 * 8?" },
  ],
  assistant_last: [
    { role: "user", content: "Start a story." },
    { role: "assistant", content: "Once upon a time" },
  ],
  tool_results: [
    { role: "user", content: "Weather in Paris and Rome?" },
    { role: "assistant", content: "Let me check." },
    { role: "tool", content: "{\"city\": \"Paris\", \"temp\": 18}" },
    { role: "tool", content: "{\"city\": \"Rome\", \"temp\": 24}" },
    { role: "assistant", content: "Paris 18, Rome 24." },
    { role: "user", content: "Thanks" },
  ],
  empty_content: [
    { role: "user", content: "" },
    { role: "assistant", content: "" },
    { role: "user", content: "" },
  ],
  unicode_and_braces: [
    { role: "system", content: "Réponds en français 🇫🇷." },
    { role: "user", content: "  héllo 世界 🎉 {{ not a tag }} {% neither %}\n\t" },
  ],
};

const cases = [];
for (const t of templates) {
  const config = JSON.parse(readFileSync(join(root, t.config), "utf8"));
  const token = (v) => (v == null ? "" : typeof v === "string" ? v : v.content);
  const template = new Template(config.chat_template);
  for (const extra of t.extra) {
    for (const [conversation, messages] of Object.entries(conversations)) {
      for (const add_generation_prompt of [true, false]) {
        const context = {
          messages, add_generation_prompt,
          bos_token: token(config.bos_token), eos_token: token(config.eos_token), ...extra,
        };
        const entry = { template: t.name, source: t.config, conversation, context };
        try {
          entry.expected = template.render(context);
        } catch (e) {
          entry.error = String(e.message);
        }
        cases.push(entry);
      }
    }
  }
}
const out = join(root, "tests/data/chat_templates/fixtures.json");
writeFileSync(out, JSON.stringify({ reference: `@huggingface/jinja@${version}`, conversations, cases: cases.map(({ context, ...rest }) => ({ ...rest, add_generation_prompt: context.add_generation_prompt, extra: Object.fromEntries(Object.entries(context).filter(([k]) => !["messages", "add_generation_prompt", "bos_token", "eos_token"].includes(k))), bos_token: context.bos_token, eos_token: context.eos_token })) }, null, 1) + "\n");
console.log(`wrote ${cases.length} cases to ${out}`);
