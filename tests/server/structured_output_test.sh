#!/usr/bin/env bash
# Structured outputs end to end with real JavaScript clients, pinned in client/package.json: one
# strata serve (strata-tiny, an API key) driven in turn by the official openai client
# (structured_output_openai_test.mjs), LangChain JS (structured_output_langchain_test.mjs) and the
# Vercel AI SDK (structured_output_ai_sdk_test.mjs). Each validates every finished output with ajv.
# Usage: structured_output_test.sh STRATA_BINARY. Exit 77 (skipped) when node or one of the
# pinned clients is not installed.
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
key=test-key
start_server --threads 2 --num-blocks 1024 --api-key "$key"

for suite in openai langchain ai_sdk; do
  node "$here/structured_output_${suite}_test.mjs" "$base" "$key" && ok ||
    fail "$suite suite; the server log ends: $(tail -n 5 "$server_log")"
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "$base/health") == 200 ]] && ok ||
  fail "healthy at the end"
finish structured_output_test
