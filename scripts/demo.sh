#!/usr/bin/env bash
# Installs dependencies, builds Strata (release) and runs the main job: `strata generate` on the
# bundled default model, strata-tiny (models/strata-tiny: a 6.5M-parameter Qwen3-style model
# trained on the King James Bible and fortunes, docs/strata-tiny.md), with a text prompt. The
# output ends with the generated text; the sampling settings come from the model's
# generation_config.json (temperature 0.7, top-p 0.9) and --seed makes the run repeatable.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
model=${STRATA_MODEL:-models/strata-tiny}
./build/release/tools/strata/strata generate --model "$model" --prompt "And it came to pass" \
  --max-tokens 64 --seed 0 "$@"
