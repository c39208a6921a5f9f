#!/usr/bin/env bash
# Two builds of the CPU engine on the same workloads, alternated round by round (which build goes
# first swaps each round), so a kernel change is read against the build before it on the same
# machine and minute, with the FP32 FMA peak of each round beside it (docs/benchmarks.md):
#   prefill   one 512-token prompt in one step (strata generate): prefill tokens/s
#   streams   16 requests of 128 prompt + 32 output tokens (strata bench): decode-phase tokens/s
#             (tokens of decode-only steps / their time) and prompt-phase tokens/s
#   decode    one sequence, 16-token prompt, 32 greedy tokens (strata generate): decode tokens/s
#   prefill2k one 2,048-token prompt in one step: prefill tokens/s (attention's share is larger)
# `bench/models/qwen2-0.5b` with dummy BF16 weights, 2 threads, block size 16, greedy.
# WORKLOADS (space-separated, default "prefill streams decode") picks them.
#
# Usage: tools/bench/cpu_ab_bench.sh [--json] BEFORE_STRATA AFTER_STRATA [ROUNDS (3)]
# Progress goes to stderr; the table (medians, after / before, the FP32 peak range) or with
# --json every round's figures go to stdout.
set -euo pipefail
json=0
if [[ "${1:-}" == "--json" ]]; then json=1; shift; fi
before=${1:?before: a strata binary}
after=${2:?after: a strata binary}
rounds=${3:-3}
floor=${FLOOR:-build/release/bench/strata_cpu_floor}
model=${MODEL:-bench/models/qwen2-0.5b}
read -r -a workloads <<<"${WORKLOADS:-prefill streams decode}"
common=(--model "$model" --load-format dummy --device cpu --threads 2 --block-size 16
        --ignore-eos --temperature 0)
ids() { python3 -c "print(','.join(str(1 + i % 1000) for i in range($1)))"; }
p512=$(ids 512)
p2k=$(ids 2048)
p16=$(ids 16)

prefill() {  # BINARY PROMPT_IDS TOKENS: one prompt in one step
  "$1" generate "${common[@]}" --max-model-len $(($3 + 512)) --prompt-ids "$2" --max-tokens 1 \
    --max-num-batched-tokens "$3" --json 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin)['timing']['prefill_tokens_per_second'])"
}

run() {  # BINARY WORKLOAD: prints the workload's figures, space-separated
  case $2 in
    prefill) prefill "$1" "$p512" 512 ;;
    prefill2k) prefill "$1" "$p2k" 2048 ;;
    decode)
      "$1" generate "${common[@]}" --max-model-len 1024 --prompt-ids "$p16" --max-tokens 32 --json 2>/dev/null |
        python3 -c "import json,sys; print(json.load(sys.stdin)['timing']['decode_tokens_per_second'])" ;;
    streams)
      "$1" bench "${common[@]}" --max-model-len 1024 --num-prompts 16 --input-len 128 --output-len 32 \
        --max-num-seqs 16 --max-num-batched-tokens 2048 --json 2>/dev/null |
        python3 -c "
import json, sys
r = json.load(sys.stdin)['runs'][0]
d, p = r['decode_steps'], r['prompt_steps']
print(d['steps'] * d['mean_seqs'] / d['seconds'], r['prompt_tokens'] / p['seconds'])" ;;
  esac
}

figures() {  # SIDE: that build's figures of the round (in got) as a JSON object
  local side=$1 out="" w sd sp
  for w in "${workloads[@]}"; do
    if [[ $w == streams ]]; then
      read -r sd sp <<<"${got[$side.streams]}"
      out+="${out:+, }\"streams_decode\": $sd, \"streams_prompt\": $sp"
    else
      out+="${out:+, }\"$w\": ${got[$side.$w]}"
    fi
  done
  echo "{$out}"
}

rows=()
for ((i = 0; i < rounds; ++i)); do
  peak=$("$floor" --threads 2 --json | python3 -c "import json,sys; print(json.load(sys.stdin)['fp32_gflops'])")
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "round $((i + 1))/$rounds, load $load, FP32 peak $peak GFLOP/s" >&2
  order=(before after)
  ((i % 2 == 1)) && order=(after before)
  declare -A got=()
  for w in "${workloads[@]}"; do
    for side in "${order[@]}"; do
      bin=$before
      [[ $side == after ]] && bin=$after
      got[$side.$w]=$(run "$bin" "$w")
    done
    echo "  $w: before ${got[before.$w]}, after ${got[after.$w]}" >&2
  done
  rows+=("{\"round\": $i, \"load\": $load, \"fp32_gflops\": $peak,
    \"before\": $(figures before), \"after\": $(figures after)}")
  unset got
done

python3 - "$json" "${rows[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(a) for a in sys.argv[2:]]
if sys.argv[1] == "1":
    print(json.dumps(rows, indent=1))
    sys.exit()
med = statistics.median
peaks = [r["fp32_gflops"] for r in rows]
print(f"{len(rows)} rounds, load {min(r['load'] for r in rows)}-{max(r['load'] for r in rows)}, "
      f"FP32 peak {min(peaks):.0f}-{max(peaks):.0f} GFLOP/s (2 threads)")
print("| workload | before (median; rounds) | after (median; rounds) | after / before |")
print("|---|---|---|---|")
names = {"prefill": "prefill 512, tokens/s", "prefill2k": "prefill 2048, tokens/s",
         "streams_decode": "16 streams, decode phase", "streams_prompt": "16 streams, prompt phase",
         "decode": "decode, 1 sequence"}
for key, name in names.items():
    if key not in rows[0]["before"]:
        continue
    b = [r["before"][key] for r in rows]
    a = [r["after"][key] for r in rows]
    fmt = lambda v: ", ".join(f"{x:.1f}" for x in v)
    print(f"| {name} | {med(b):.1f} ({fmt(b)}) | {med(a):.1f} ({fmt(a)}) | {med(a) / med(b):.2f} |")
PY
