#!/usr/bin/env bash
# What --kv-quant-check costs at start-up on the GPU: the Llama-3.1-8B shape with dummy bf16
# weights, an 8 GiB fp8_e4m3 pool with scales calculated on the device, one request of 16 + 1
# tokens; the whole `strata bench` process timed without and then with the check (the check's
# table goes to stderr, printed here). Run from the repository root on the GPU machine:
#
#   tools/gpu/gpu_kv_quant_check_bench.sh BIN_DIR
set -euo pipefail
bin="$1"
run() {
  local t0 t1
  t0=$(date +%s.%N)
  "$bin/strata" bench --device cuda --model bench/models/llama-3.1-8b --load-format dummy \
    --temperature 0 --ignore-eos --kv-cache-dtype fp8_e4m3 --calculate-kv-scales \
    --kv-cache-memory-bytes 8589934592 --num-prompts 1 --input-len 16 --output-len 1 "$@" \
    >/dev/null 2>/tmp/kvcheck.err
  t1=$(date +%s.%N)
  grep -E "kv-quant-check|^  [0-9]|KV cache" /tmp/kvcheck.err | grep -v "forward pass" || true
  python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$t1"
}
base=$(run | tail -1)
echo "start-up and one request, no check: $base s"
out=$(run --kv-quant-check)
echo "$out" | head -n -1
check=$(echo "$out" | tail -1)
echo "start-up and one request, --kv-quant-check: $check s"
python3 -c "import sys; b, c = float(sys.argv[1]), float(sys.argv[2]); \
print(f'kv-quant-check start-up cost: {c - b:.2f} s ({c / b:.2f}x the run without it)')" "$base" "$check"
