#!/usr/bin/env bash
# Installs the pinned reference (@huggingface/jinja) under build/chat_template_node (git-ignored)
# and regenerates tests/data/chat_templates/fixtures.json. Needs node + npm and the tokenizer files
# that scripts/install_deps.sh fetches into tests/data/tokenizers.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
node_dir="$root/build/chat_template_node"
mkdir -p "$node_dir"
if [[ ! -f "$node_dir/node_modules/@huggingface/jinja/package.json" ]] ||
   ! grep -q '"version": "0.5.11"' "$node_dir/node_modules/@huggingface/jinja/package.json"; then
  (cd "$node_dir" && npm install --silent --no-audit --no-fund --no-save @huggingface/jinja@0.5.11)
fi
node "$root/tools/make_chat_template_fixtures.mjs" "$node_dir"
