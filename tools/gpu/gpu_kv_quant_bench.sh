#!/usr/bin/env bash
# Issue 11's end-to-end figure on the GPU machine: the Llama-3.1-8B shape with dummy bf16
# weights, a 16 GiB KV pool, 1,024 offline requests of 2,048 prompt + 256 output tokens, EOS
# ignored, greedy, once per KV dtype in the same call: bfloat16, fp8_e4m3 (scales calculated on
# the device at start-up), int8 and int4 (KIVI, the default residual window of one block). Run by `tools/gpu/gpu_check.sh run` from the repository root:
#
#   tools/gpu/gpu_kv_quant_bench.sh BIN_DIR OUT_JSON [NUM_PROMPTS]
#
# GPU_KVQ_DTYPES picks the dtypes (default: bfloat16 fp8_e4m3 int8 int4; ratios need bfloat16);
# GPU_KVQ_BATCHED_TOKENS the token budget of a step (--max-num-batched-tokens, default 8192).
#
# A quantized pool holds about twice (int4: three times) the tokens, so as many more sequences
# decode per step; the
# prompt phase (compute-bound) is the same for every dtype. OUT_JSON maps each dtype to its
# `strata bench --json` object and adds each one's output tokens/s as a ratio to bfloat16's.
set -euo pipefail
bin="$1"
out="$2"
num_prompts="${3:-1024}"
budget="${GPU_KVQ_BATCHED_TOKENS:-8192}"
tmp="$(mktemp -d)"
for dtype in ${GPU_KVQ_DTYPES:-bfloat16 fp8_e4m3 int8 int4}; do
  extra=()
  [ "$dtype" = fp8_e4m3 ] && extra=(--calculate-kv-scales)
  echo "== $dtype: $num_prompts x (2048 + 256), --kv-cache-memory-bytes 16GiB, budget $budget"
  "$bin/strata" bench --device cuda --model bench/models/llama-3.1-8b --load-format dummy \
    --temperature 0 --ignore-eos --kv-cache-dtype "$dtype" "${extra[@]}" \
    --kv-cache-memory-bytes 17179869184 --num-prompts "$num_prompts" --input-len 2048 \
    --output-len 256 --max-num-seqs 256 --max-num-batched-tokens "$budget" --json >"$tmp/$dtype.json"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['runs'][0]; \
print({k: r.get(k) for k in ('output_tokens_per_s', 'duration_s', 'ttft_s', 'tpot_s', 'steps', 'prompt_steps', 'decode_steps')})" \
    "$tmp/$dtype.json"
done
python3 - "$tmp" "$out" <<'PY'
import json, os, sys
tmp, out = sys.argv[1], sys.argv[2]
result = {}
for dtype in ("bfloat16", "fp8_e4m3", "int8", "int4"):
    p = os.path.join(tmp, dtype + ".json")
    if os.path.exists(p):
        result[dtype] = json.load(open(p))
base = result.get("bfloat16", {}).get("runs", [{}])[0].get("output_tokens_per_s")
for dtype, r in result.items():
    tps = r["runs"][0].get("output_tokens_per_s")
    r["vs_bfloat16"] = tps / base if base and tps else None
    print(f"{dtype}: {tps:.0f} output tokens/s, x{r['vs_bfloat16']:.2f} of bfloat16")
json.dump(result, open(out, "w"), indent=1)
PY
echo "wrote $out"
