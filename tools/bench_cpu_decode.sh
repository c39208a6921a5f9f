#!/usr/bin/env bash
# CPU decode against its memory-bandwidth floor, measured in the same run: the machine's read
# bandwidth (BM_MemoryReadCpu), then `strata generate` on real model shapes with dummy weights.
# Decode of one sequence reads every weight once per token, so the floor is
#   tokens/s <= read bandwidth / weight bytes.
# Usage: tools/bench_cpu_decode.sh [BUILD_DIR] [MODEL_DIR] [THREADS]
set -euo pipefail
build=${1:-build/release}
model=${2:-bench/models/llama-3.2-1b}
threads=${3:-2}
echo "measuring memory read bandwidth ($threads threads)..." >&2
bw=$("$build/bench/strata_attention_cpu_bench" --benchmark_filter=BM_MemoryReadCpu \
      --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_format=json |
     python3 -c 'import json,sys; b=[x for x in json.load(sys.stdin)["benchmarks"] if x["name"].endswith("_median")][0]; print(b["GB/s"])')
echo "running strata generate --load-format dummy on $model..." >&2
out=$("$build/tools/strata/strata" generate --model "$model" --load-format dummy \
      --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 --max-tokens 32 --ignore-eos \
      --temperature 0 --threads "$threads" --json)
python3 - "$bw" "$out" <<'PY'
import json, sys
bw = float(sys.argv[1]) * 1e9
j = json.loads(sys.argv[2])
wb = j["weight_bytes"]
tps = j["timing"]["decode_tokens_per_second"]
floor = bw / wb
print(f"| weights | read bandwidth | decode | floor | ratio |")
print(f"|---|---|---|---|---|")
print(f"| {wb/1e9:.2f} GB | {bw/1e9:.1f} GB/s | {tps:.2f} tokens/s | {floor:.2f} tokens/s | {tps/floor:.2f} |")
PY
