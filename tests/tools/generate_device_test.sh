#!/usr/bin/env bash
# `strata generate --device cuda` end to end. Mode cpu: without a GPU it is refused with one line on
# stderr and a non-zero exit (never a crash), and the GPU-only flags are accepted by the CPU path.
# Mode gpu: with a GPU the one request runs through the Engine and prints the CPU path's JSON
# fields (8 greedy ids, usage, finish reason, KV dtype and bytes per token, logprobs), the same
# ids with --no-warm-up.
# Each mode exits 77 (skipped) where it does not apply: cpu where a GPU is present, gpu without one.
# Usage: generate_device_test.sh cpu|gpu STRATA_BINARY TEST_DATA_DIR
set -uo pipefail
mode=$1
strata=$2
data=$3
# bf16 weights, head_dim 64: a shape the GPU kernels take (2 layers x 2 KV heads).
model=$data/models-gpu/qwen3-qknorm-hd64
# shellcheck source=/dev/null
source "$(dirname "${BASH_SOURCE[0]}")/cli_testing.sh"
small_pool=(--kv-cache-memory-bytes $((64 << 20)))

# Whether a GPU is present, as the engine decides it for --device auto (a CUDA build and
# cudaGetDeviceCount > 0, CudaModel::device_available): the device the JSON reports.
probe=$("$strata" generate --model "$model" --prompt-ids 1,2,3 --max-tokens 1 --json --threads 2 \
        "${small_pool[@]}") || { echo "generate --device auto failed"; exit 1; }
auto_device=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["device"])' <<<"$probe")

if [[ $mode == cpu ]]; then
  if [[ $auto_device == cuda ]]; then
    echo "generate_device_test cpu: a GPU is present: skipped"
    exit 77
  fi
  [[ $auto_device == cpu ]] && ok || fail "--device auto without a GPU ran on '$auto_device'"
  expect_error cuda-without-gpu \
    "^strata: error: --device cuda: (no CUDA device is available|this build of Strata has no CUDA backend)" \
    generate --model "$model" --prompt-ids 1,2,3 --max-tokens 8 --device cuda
  expect_error cuda-without-gpu-json "--device cuda" generate --model "$model" --prompt-ids 1,2,3 \
    --device cuda --json --logprobs 2 --kv-cache-dtype int8
  # The GPU-only flags are accepted (and have no effect) on the CPU path.
  out=$("$strata" generate --model "$model" --prompt-ids 1,2,3 --max-tokens 4 --ignore-eos --json \
        --device cpu --gpu-memory-utilization 0.5 --enforce-eager --no-warm-up "${small_pool[@]}") \
    || fail "--device cpu with the GPU flags exited non-zero"
  python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["device"]=="cpu" and len(j["output_ids"])==4, j' \
    <<<"$out" && ok || fail "--device cpu JSON"
  finish generate_device_test_cpu
  exit
fi

if [[ $auto_device != cuda ]]; then
  echo "generate_device_test gpu: no CUDA device: skipped"
  exit 77
fi
cuda=(generate --model "$model" --prompt-ids 5,17,99,3,42 --max-tokens 8 --ignore-eos
      --temperature 0 --json --device cuda "${small_pool[@]}")

# 1. greedy: 8 ids in the vocabulary, usage, finish reason, the GPU's bf16 KV (2 x 2 layers x
# 2 KV heads x 64 x 2 bytes per token), the same fields as the CPU path
out=$("$strata" "${cuda[@]}") || fail "generate --device cuda exited non-zero"
cpu=$("$strata" generate --model "$model" --prompt-ids 5,17,99,3,42 --max-tokens 8 --ignore-eos \
      --temperature 0 --json --device cpu --threads 2) || fail "generate --device cpu exited non-zero"
python3 - "$out" "$cpu" <<'PY' && ok || fail "--device cuda JSON"
import json, sys
j, c = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert j["device"] == "cuda", j
assert len(j["output_ids"]) == 8 and all(0 <= t < 256 for t in j["output_ids"]), j
assert j["usage"] == {"prompt_tokens": 5, "completion_tokens": 8}, j
assert j["finish_reason"] == "length", j
assert j["kv_cache_dtype"] == "bfloat16" and j["kv_bytes_per_token"] == 1024, j
assert j["timing"]["prefill_seconds"] > 0 and j["timing"]["decode_seconds"] > 0, j
assert set(j) == set(c), (sorted(j), sorted(c))
PY

# 1b. --no-warm-up: the same greedy ids (the warm-up request leaves nothing behind)
cold=$("$strata" "${cuda[@]}" --no-warm-up) || fail "--no-warm-up exited non-zero"
python3 -c 'import json,sys; a,b=(json.loads(x) for x in sys.argv[1:]); assert a["output_ids"]==b["output_ids"], (a, b)' \
  "$out" "$cold" && ok || fail "--no-warm-up changed the greedy ids"

# 2. --logprobs 2: 8 entries, each the chosen token's logprob and 2 alternatives
out=$("$strata" "${cuda[@]}" --logprobs 2) || fail "--logprobs 2 exited non-zero"
python3 - "$out" <<'PY' && ok || fail "--device cuda logprobs JSON"
import json, sys
j = json.loads(sys.argv[1])
lp = j["logprobs"]
assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 8, lp
assert lp["tokens"] == j["output_ids"], j
assert all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"]), lp
assert all(len(t) == 2 for t in lp["top_logprobs"]), lp
PY

# 3. --echo: the prompt's logprobs first, the first entry null
out=$("$strata" "${cuda[@]}" --logprobs 1 --echo) || fail "--echo exited non-zero"
python3 - "$out" <<'PY' && ok || fail "--device cuda echo JSON"
import json, sys
j = json.loads(sys.argv[1])
lp = j["logprobs"]
assert lp["tokens"] == [5, 17, 99, 3, 42] + j["output_ids"] and len(lp["tokens"]) == 13, lp
assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None, lp
assert all(isinstance(x, float) and x <= 0 for x in lp["token_logprobs"][1:]), lp
PY

# 4. the KV cache flags reach the engine; the table prints on the GPU too
out=$("$strata" "${cuda[@]}" --kv-cache-dtype int8) || fail "--kv-cache-dtype int8 exited non-zero"
python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["kv_cache_dtype"]=="int8" and len(j["output_ids"])==8, j' \
  <<<"$out" && ok || fail "--device cuda int8 JSON"
"$strata" generate --model "$model" --prompt-ids 1,2,3 --max-tokens 2 --ignore-eos --device cuda \
  "${small_pool[@]}" | grep -q "^finish       length after 2 tokens" && ok || fail "--device cuda table"
# int4 (KIVI) with its bf16 residual pool on the device (R = 2 blocks)
out=$("$strata" "${cuda[@]}" --kv-cache-dtype int4 --kv-int4-residual 32) \
  || fail "--kv-cache-dtype int4 exited non-zero"
python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["kv_cache_dtype"]=="int4" and len(j["output_ids"])==8 and j["kv_groups"][1]["kind"]=="newest blocks" and j["kv_groups"][1]["num_blocks"] > 1, j' \
  <<<"$out" && ok || fail "--device cuda int4 JSON"

finish generate_device_test_gpu
