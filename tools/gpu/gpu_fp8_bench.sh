#!/usr/bin/env bash
# Issue 41's FP8-weight figures on the GPU machine, BF16 and FP8 weights in the same call: the
# Llama-3.1-8B shape with dummy weights (FP8: the same bf16 weights quantized on the GPU at load,
# --quantization fp8), greedy, EOS ignored:
#   offline   256 requests of 512 prompt + 256 output tokens (tools/gpu/gpu_engine_bench.sh's)
#   decode    one request, 1024-token prompt, 128 output tokens: time per output token
# Run from the repository root (by `tools/gpu/gpu_check.sh run` with GPU_CHECK_STEPS=fp8_weights):
#
#   tools/gpu/gpu_fp8_bench.sh BIN_DIR OUT_JSON
#
# OUT_JSON maps "<workload>_<none|fp8>" to its `strata bench --json` object and adds, for FP8,
# the ratio to BF16 (throughput: output tokens/s; decode: inter-token p50).
set -euo pipefail
bin="$1"
out="$2"
model=bench/models/llama-3.1-8b
tmp="$(mktemp -d)"
for q in none fp8; do
  for w in offline decode; do
    case "$w" in
      offline) args=(--num-prompts 256 --input-len 512 --output-len 256 --max-num-seqs 256
                     --max-num-batched-tokens 8192) ;;
      decode) args=(--num-prompts 1 --input-len 1024 --output-len 128 --max-num-seqs 1) ;;
    esac
    echo "== ${w} --quantization $q: strata bench ${args[*]}"
    "$bin/strata" bench --device cuda --model "$model" --load-format dummy --temperature 0 \
      --ignore-eos --gpu-memory-utilization 0.9 --quantization "$q" "${args[@]}" --json \
      >"$tmp/${w}_$q.json"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['runs'][0]; \
print({k: r.get(k) for k in ('output_tokens_per_s', 'duration_s', 'ttft_s', 'tpot_s', 'inter_token_latency_s', 'decode_steps')})" \
      "$tmp/${w}_$q.json"
  done
done
python3 - "$tmp" "$out" <<'PY'
import json, os, sys
tmp, out = sys.argv[1], sys.argv[2]
result = {}
for name in ("offline_none", "offline_fp8", "decode_none", "decode_fp8"):
    p = os.path.join(tmp, name + ".json")
    if os.path.exists(p):
        result[name] = json.load(open(p))
def run(name):
    return result.get(name, {}).get("runs", [{}])[0]
if run("offline_none") and run("offline_fp8"):
    ratio = run("offline_fp8")["output_tokens_per_s"] / run("offline_none")["output_tokens_per_s"]
    result["offline_fp8"]["vs_bf16"] = ratio
    print(f"offline: fp8 {run('offline_fp8')['output_tokens_per_s']:.0f} / bf16 "
          f"{run('offline_none')['output_tokens_per_s']:.0f} output tokens/s = {ratio:.2f}x")
if run("decode_none") and run("decode_fp8"):
    b = run("decode_none")["inter_token_latency_s"]["p50"]
    f = run("decode_fp8")["inter_token_latency_s"]["p50"]
    result["decode_fp8"]["vs_bf16"] = f / b
    print(f"decode: fp8 {f * 1e3:.3f} / bf16 {b * 1e3:.3f} ms per token = {f / b:.3f}x")
json.dump(result, open(out, "w"), indent=1)
PY
echo "wrote $out"
