#!/usr/bin/env bash
# Two builds of the GPU engine on the same workloads in one call, alternating, so a change to the
# engine's structure can be held to "within noise" of the build before it (docs/gpu-runs.md).
# The Llama-3.1-8B shape with dummy bf16 weights, greedy, EOS ignored:
#   offline   256 requests of 512 prompt + 256 output tokens
#   decode    one request, 1024-token prompt, 128 output tokens: time per output token
#   fp8_decode  the same with FP8 weights (--quantization fp8)
#   fp8_long  1,024 requests of 2,048 + 256 tokens in a 16 GiB FP8 (e4m3) KV pool, scales
#             calculated on the device (tools/gpu/gpu_kv_quant_bench.sh's workload)
# Run from the repository root by `tools/gpu/gpu_check.sh run` (GPU_CHECK_STEPS=ab):
#
#   tools/gpu/gpu_ab_bench.sh BEFORE_BIN_DIR AFTER_BIN_DIR OUT_JSON
#
# GPU_AB_WORKLOADS picks the workloads (default: offline decode fp8_long). OUT_JSON maps
# "<workload>" to {"before": ..., "after": ..., "after_vs_before": output tokens/s ratio}.
set -euo pipefail
before="$1"
after="$2"
out="$3"
model=bench/models/llama-3.1-8b
tmp="$(mktemp -d)"
common=(--device cuda --model "$model" --load-format dummy --temperature 0 --ignore-eos)
i=0
for w in ${GPU_AB_WORKLOADS:-offline decode fp8_long}; do
  case "$w" in
    offline) args=(--gpu-memory-utilization 0.9 --num-prompts 256 --input-len 512 --output-len 256
                   --max-num-seqs 256 --max-num-batched-tokens 8192) ;;
    decode) args=(--gpu-memory-utilization 0.9 --num-prompts 1 --input-len 1024 --output-len 128
                  --max-num-seqs 1) ;;
    fp8_decode) args=(--quantization fp8 --gpu-memory-utilization 0.9 --num-prompts 1 --input-len 1024
                      --output-len 128 --max-num-seqs 1) ;;
    fp8_long) args=(--kv-cache-dtype fp8_e4m3 --calculate-kv-scales --kv-cache-memory-bytes
                    17179869184 --num-prompts 1024 --input-len 2048 --output-len 256
                    --max-num-seqs 256 --max-num-batched-tokens 8192) ;;
    *) echo "gpu_ab_bench.sh: unknown workload $w" >&2; exit 2 ;;
  esac
  # Alternate which build goes first, so a drift in clocks does not favour one of them.
  order=(before after)
  ((i % 2 == 1)) && order=(after before)
  for which in "${order[@]}"; do
    dir="$before"
    [ "$which" = after ] && dir="$after"
    echo "== $w ($which): strata bench ${args[*]}"
    "$dir/strata" bench "${common[@]}" "${args[@]}" --json >"$tmp/${w}_$which.json"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['runs'][0]; \
print({k: r.get(k) for k in ('output_tokens_per_s', 'duration_s', 'ttft_s', 'tpot_s', 'inter_token_latency_s')})" \
      "$tmp/${w}_$which.json"
  done
  i=$((i + 1))
done
python3 - "$tmp" "$out" <<'PY'
import json, os, sys
tmp, out = sys.argv[1], sys.argv[2]
result = {}
for name in sorted(os.listdir(tmp)):
    w, which = name[:-len(".json")].rsplit("_", 1)
    result.setdefault(w, {})[which] = json.load(open(os.path.join(tmp, name)))
for w, r in result.items():
    tps = [r.get(k, {}).get("runs", [{}])[0].get("output_tokens_per_s") for k in ("before", "after")]
    r["after_vs_before"] = tps[1] / tps[0] if all(tps) else None
json.dump(result, open(out, "w"), indent=1)
PY
echo "wrote $out"
