#!/usr/bin/env bash
# Goodput of token eviction on the GPU (docs/benchmarks.md, "Token eviction"): the Llama-3.1-8B
# shape (dummy bf16 weights) in a KV pool too small for the workload's full contexts, long
# prompts arriving at a fixed rate, requests meeting a TTFT / TPOT SLO per second, the full cache
# against StreamingLLM (the policy the GPU engine runs) at a budget of BUDGET tokens; ROUNDS
# (default 2) rounds alternating the two. Run on the GPU machine from the repository root with
# .devcarry/gpu-pack (tools/gpu/gpu_check.sh build) copied there.
#
#   tools/gpu/gpu_kv_eviction_bench.sh OUT_DIR
#
# NUM_BLOCKS (default 2048: 32K tokens, 4 GiB), INPUT_LEN (8192), OUTPUT_LEN (256), RATE (2 a
# second), NUM_PROMPTS (64), BUDGET (1024), SLO (ttft:2000 tpot:50) shape the run.
set -euo pipefail
out="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$root/.devcarry/gpu/bin"
mkdir -p "$root/.devcarry/gpu" "$out"
[[ -x "$bin/strata" ]] || tar xJf "$root/.devcarry/gpu-pack/bin.tar.xz" -C "$root/.devcarry/gpu"
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
cp "$bin/build-info.txt" "$out/build-info.txt"
read -r -a slo <<<"${SLO:-ttft:2000 tpot:50}"
common=(bench --device cuda --model "$root/bench/models/llama-3.1-8b" --load-format dummy
  --temperature 0 --ignore-eos --seed 0 --num-blocks "${NUM_BLOCKS:-2048}" --max-num-seqs 64
  --max-num-batched-tokens 8192 --num-prompts "${NUM_PROMPTS:-64}"
  --input-len "${INPUT_LEN:-8192}" --output-len "${OUTPUT_LEN:-256}"
  --request-rate "${RATE:-2}" --goodput "${slo[@]}")
for round in $(seq 1 "${ROUNDS:-2}"); do
  for config in full streaming_llm; do
    extra=()
    [[ "$config" == full ]] || extra=(--kv-eviction-policy "$config" --kv-budget-tokens "${BUDGET:-1024}")
    echo "### round $round: $config" >&2
    "$bin/strata" "${common[@]}" "${extra[@]}" --json >"$out/$config.$round.json" 2>"$out/$config.$round.log"
    python3 - "$out/$config.$round.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
g = r["goodput"]
print(f"{sys.argv[1].rsplit('/', 1)[-1]}: goodput {g['requests_per_s']:.3f} req/s "
      f"({g.get('good_requests', '?')} good), {r['requests_per_s']:.3f} req/s, TTFT p50 "
      f"{r['ttft_s']['p50']:.3f} s, TPOT mean {r['tpot_s']['mean'] * 1e3:.1f} ms, "
      f"{r['preemptions']} preemptions, max concurrency {r['max_concurrency']}", flush=True)
EOF
  done
done
