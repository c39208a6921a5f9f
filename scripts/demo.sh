#!/usr/bin/env bash
# Installs what the demo needs, builds what it runs and runs it: `strata generate` on the bundled
# default model, strata-tiny (models/strata-tiny: a 6.5M-parameter Qwen3-style model trained on
# the King James Bible and fortunes, docs/strata-tiny.md), with a text prompt, on the CPU engine.
# Only the `strata` CLI is built (the `demo` preset: Release, no CUDA, no tests, benchmarks or
# fuzzers) into build/demo, or STRATA_BUILD_DIR; scripts/test.sh builds and tests everything. The
# output ends with the generated text; the sampling settings come from the model's
# generation_config.json (temperature 0.7, top-p 0.9) and --seed makes the run repeatable.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --demo
build=${STRATA_BUILD_DIR:-build/demo}
cmake --preset demo -B "$build" >/dev/null
cmake --build "$build" --target strata -j "$(nproc)"
model=${STRATA_MODEL:-models/strata-tiny}
"$build/tools/strata/strata" generate --model "$model" --prompt "And it came to pass" \
  --max-tokens 64 --seed 0 "$@"
