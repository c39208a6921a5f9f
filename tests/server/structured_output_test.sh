#!/usr/bin/env bash
# Structured outputs and tool calling end to end with real JavaScript clients, pinned in
# client/package.json: one strata serve (strata-tiny with Qwen3's chat template, whose tool calls
# are Hermes <tool_call> JSON; an API key) driven in turn by the official openai client
# (structured_output_openai_test.mjs), LangChain JS (structured_output_langchain_test.mjs), the
# Vercel AI SDK (structured_output_ai_sdk_test.mjs) and all three calling tools
# (tool_calling_clients_test.mjs). Each validates every finished output with ajv.
# Usage: structured_output_test.sh STRATA_BINARY. Exit 77 (skipped) when node, one of the pinned
# clients or the Qwen3 tokenizer files (scripts/install_deps.sh) are not there.
set -uo pipefail
strata=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for package in openai ajv zod @langchain/openai @langchain/core ai @ai-sdk/openai-compatible; do
  if [[ ! -d "$here/client/node_modules/$package" ]] || ! command -v node >/dev/null; then
    echo "structured_output_test: node or $package is not installed" \
      "(scripts/install_deps.sh): skipped"
    exit 77
  fi
done
# shellcheck source=/dev/null
source "$here/../tools/cli_testing.sh"
# shellcheck source=/dev/null
source "$here/serve_testing.sh"
qwen3_config="$here/../data/tokenizers/qwen3/tokenizer_config.json"
if [[ ! -f "$qwen3_config" ]]; then
  echo "structured_output_test: $qwen3_config is not there (scripts/install_deps.sh): skipped"
  exit 77
fi
node -e 'const fs = require("fs");
  fs.writeFileSync(process.argv[2], JSON.parse(fs.readFileSync(process.argv[1])).chat_template)' \
  "$qwen3_config" "$tmp/qwen3.jinja"
key=test-key
start_server --threads 2 --num-blocks 1024 --api-key "$key" --chat-template "$tmp/qwen3.jinja" \
  --structured-output-max-grammar-depth 3
grep -q "tool calls: hermes" "$server_log" && ok || fail "the template's tool-call format found"

for suite in structured_output_openai structured_output_langchain structured_output_ai_sdk \
  tool_calling_clients; do
  node "$here/${suite}_test.mjs" "$base" "$key" && ok ||
    fail "$suite suite; the server log ends: $(tail -n 5 "$server_log")"
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "$base/health") == 200 ]] && ok ||
  fail "healthy at the end"
finish structured_output_test
