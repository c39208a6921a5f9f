#!/usr/bin/env bash
# The GPU engine's benchmarks on the Llama-3.1-8B shape with dummy bf16 weights, beside
# transformers and the hardware floors measured in the same call (docs/benchmarks.md, "GPU
# engine"). Run by `tools/gpu/gpu_check.sh run` on the GPU machine, from the repository root:
#
#   tools/gpu/gpu_engine_bench.sh BIN_DIR OUT_JSON
#
#   peers     tools/gpu/bench_gpu_peers.py: copy bandwidth, bf16 GEMM rate, transformers' offline
#             generate_batch on the same workload and its 32K-token prefill
#   offline   256 requests of 512 prompt + 256 output tokens, EOS ignored, greedy
#   decode    one request, 1024-token prompt, 128 output tokens: time per output token
#   ttft      one 32768-token prompt, 1 output token: time to first token
#   online    the agentic workload (8 sessions x 4 turns) at 2, 8 and 32 requests/s: TTFT and
#             ITL percentiles
# Each Strata run prints its `strata bench --json` object; OUT_JSON collects them all.
set -euo pipefail
bin="$1"
out="$2"
model=bench/models/llama-3.1-8b
common=(--device cuda --model "$model" --load-format dummy --temperature 0 --ignore-eos
        --gpu-memory-utilization 0.9)
tmp="$(mktemp -d)"

echo "== peers (transformers $(python3 -c 'import transformers; print(transformers.__version__)'))"
# PyTorch loads the machine's own libraries, not the ones carried for `strata`.
env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 "$bin/bench_gpu_peers.py" --config "$model/config.json" \
  --json "$tmp/peers.json" 2>&1 | grep -v -i warn || true

run() {  # run NAME strata-bench-args...
  local name="$1"
  shift
  echo "== $name: strata bench $*"
  "$bin/strata" bench "${common[@]}" "$@" --json >"$tmp/$name.json"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['runs'][0]; \
print({k: r.get(k) for k in ('output_tokens_per_s', 'duration_s', 'ttft_s', 'tpot_s', 'steps', 'decode_steps')})" \
    "$tmp/$name.json"
}
run offline --num-prompts 256 --input-len 512 --output-len 256 --max-num-seqs 256 \
  --max-num-batched-tokens 8192
run decode --num-prompts 1 --input-len 1024 --output-len 128 --max-num-seqs 1
run ttft --num-prompts 1 --input-len 32768 --output-len 1 --max-model-len 32800 \
  --max-num-batched-tokens 16384
for rate in 2 8 32; do
  run "online_$rate" --workload agentic --num-sessions 8 --turns 4 --request-rate "$rate" \
    --max-num-seqs 256 --max-num-batched-tokens 8192
done

python3 - "$tmp" "$out" <<'PY'
import json, os, sys
tmp, out = sys.argv[1], sys.argv[2]
result = {}
for name in ("peers", "offline", "decode", "ttft"):
    p = os.path.join(tmp, name + ".json")
    if os.path.exists(p):
        result[name] = json.load(open(p))
result["online"] = {"runs": []}
for rate in (2, 8, 32):
    p = os.path.join(tmp, f"online_{rate}.json")
    if os.path.exists(p):
        r = json.load(open(p))["runs"][0]
        r["request_rate"] = rate
        result["online"]["runs"].append(r)
json.dump(result, open(out, "w"), indent=1)
PY
echo "wrote $out"
