#!/usr/bin/env bash
# Structured outputs on the GPU (issue 42's figure): a batch of 64 constrained requests against
# the same workload unconstrained, alternating, on the Llama-3.1-8B shape (dummy weights, Llama
# 3.1's tokenizer), greedy:
#   none     unconstrained, EOS ignored: 64 x (512 + 256)
#   regex    every request constrained to ([a-z ]{1000}){3}: 256 tokens cannot finish it, so every
#            request runs its 256 tokens, each step masked (the masks' cost, the same lengths)
#   schema   every request constrained by tests/data/grammar/schemas/16_meeting_notes.json, EOS
#            honoured where the JSON is complete (validity: every finished output is checked)
# Run from the repository root (by `tools/gpu/gpu_check.sh run` with GPU_CHECK_STEPS=structured):
#
#   tools/gpu/gpu_structured_bench.sh BIN_DIR TOKENIZER_DIR OUT_JSON
#
# OUT_JSON maps "<variant>_<round>" to its `strata bench --json` run and adds each constrained
# variant's output tokens/s over the unconstrained median.
set -euo pipefail
bin="$1"
tok="$2"
out="$3"
tmp="$(mktemp -d)"
common=(bench --device cuda --model bench/models/llama-3.1-8b --load-format dummy
        --tokenizer "$tok" --temperature 0 --gpu-memory-utilization 0.9 --num-prompts 64
        --input-len 512 --output-len 256 --max-num-seqs 64 --max-num-batched-tokens 8192 --json)
for round in 1 2; do
  for v in none regex schema; do
    case "$v" in
      none) args=(--ignore-eos) ;;
      regex) args=(--ignore-eos --structured-output 'regex=([a-z ]{1000}){3}') ;;
      schema) args=(--no-ignore-eos
                    --structured-output "json_schema=@tests/data/grammar/schemas/16_meeting_notes.json") ;;
    esac
    echo "== $v round $round: strata ${args[*]}"
    "$bin/strata" "${common[@]}" "${args[@]}" >"$tmp/${v}_$round.json"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; \
print({k: r.get(k) for k in ('output_tokens_per_s', 'duration_s', 'num_output_tokens', 'decode_steps')})" \
      "$tmp/${v}_$round.json"
  done
done
python3 - "$tmp" "$out" <<'PY'
import json, os, statistics, sys
tmp, out = sys.argv[1], sys.argv[2]
result = {}
for name in sorted(os.listdir(tmp)):
    result[name[:-5]] = json.load(open(os.path.join(tmp, name)))["runs"][0]
def tps(v):
    return statistics.median(result[f"{v}_{r}"]["output_tokens_per_s"] for r in (1, 2))
base = tps("none")
for v in ("regex", "schema"):
    result[f"{v}_over_none"] = tps(v) / base
    print(f"{v}: {tps(v):.1f} output tokens/s, {tps(v) / base:.3f} of unconstrained ({base:.1f})")
json.dump(result, open(out, "w"), indent=1)
PY
