#!/usr/bin/env bash
# Installs dependencies, builds Strata (release) and runs the main job: `strata generate` on the
# bundled default model. Until the trained demo model lands, that is a small random-weight Llama 3
# checkpoint written by transformers (tests/data/models/llama3-gqa), so its tokens are noise; they
# equal transformers' own greedy continuation, which the test suite checks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
model=${STRATA_MODEL:-tests/data/models/llama3-gqa}
./build/release/tools/strata/strata generate --model "$model" \
  --prompt-ids 1,45,99,17,135,43,120,97,27,136,112,29 \
  --max-tokens 32 --temperature 0 --ignore-eos "$@"
