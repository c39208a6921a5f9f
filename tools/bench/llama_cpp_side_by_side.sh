#!/usr/bin/env bash
# Strata's CPU engine beside a llama.cpp build, on the same random Qwen2-0.5B-shape BF16 weights
# (docs/benchmarks.md, "Beside llama.cpp"): Strata reads them as model.safetensors, llama.cpp as a
# GGUF file written tensor for tensor by tools/bench/gguf_from_safetensors.py. The project never
# vendors or builds llama.cpp: point the script at a build (its llama-bench and
# llama-batched-bench).
#
#   decode, 1 and 2 threads   Strata: strata generate, 16-token prompt, 128 greedy tokens,
#                             decode tokens/s; llama.cpp: llama-bench -p 0 -n 128 (tg128)
#   prefill 512, 2 threads    Strata: one 512-token prompt in one step, prefill tokens/s;
#                             llama.cpp: llama-bench -p 512 -n 0 (pp512)
#   16 streams x (128 + 32)   Strata: strata bench, 16 requests at once; decode phase = output
#                             tokens of decode-only steps / their time, prompt phase = prompt
#                             tokens / the time of the steps that ran them; llama.cpp:
#                             llama-batched-bench -npp 128 -ntg 32 -npl 16 (S_TG, S_PP)
#
# Each round runs every workload on both engines, alternating which engine goes first from round
# to round; figures are medians over rounds. Each engine holds its weights in anonymous memory
# (Strata's default; llama.cpp's no-mmap load mode). The floors come from strata_cpu_floor
# before and after the rounds: decode against read bandwidth / weight bytes, prefill against the
# BF16 dot-product peak (the FP32 FMA peak on CPUs without AVX-512 BF16) / flops per prompt
# token; each round's figures also go to WORK/rounds.jsonl. A round waits (up to QUIET_WAIT s) for the 1-min
# load average to fall below QUIET_LOAD, and its load is reported: on a shared machine
# llama.cpp's spinning OpenMP threads collapse under co-tenant load, so compare quiet rounds only.
#
# Usage: tools/bench/llama_cpp_side_by_side.sh [--json] [LLAMA_CPP_DIR]
#   LLAMA_CPP_DIR (or the env var): a llama.cpp build: the directory holding llama-bench, or its
#                 source tree with build/bin/.
# Environment: STRATA_BUILD (build/release), MODEL_CONFIG (bench/models/qwen2-0.5b), WORK (where
# the checkpoint and GGUF go; /tmp/strata-side-by-side), ROUNDS (3), QUIET_LOAD (1.0),
# QUIET_WAIT (120), STRATA_ARGS (extra strata flags, e.g. --cpu-matmul-precision bf16),
# OMP_WAIT_POLICY (passed to llama.cpp as set, and reported), WORKLOADS (which rows to run, of
# "decode1 decode2 prefill512 streams"; all by default: decode alone makes quicker rounds, so
# more of them fit in a quiet spell of a shared machine).
set -euo pipefail
json=0
if [[ "${1:-}" == "--json" ]]; then json=1; shift; fi
llama_dir=${1:-${LLAMA_CPP_DIR:-}}
build=${STRATA_BUILD:-build/release}
config=${MODEL_CONFIG:-bench/models/qwen2-0.5b}
work=${WORK:-/tmp/strata-side-by-side}
rounds=${ROUNDS:-3}
quiet_load=${QUIET_LOAD:-1.0}
quiet_wait=${QUIET_WAIT:-120}
read -r -a strata_args <<< "${STRATA_ARGS:-}"
workloads=" ${WORKLOADS:-decode1 decode2 prefill512 streams} "
wants() { [[ "$workloads" == *" $1 "* ]]; }
strata="$build/tools/strata/strata"
die() { echo "llama_cpp_side_by_side: $*" >&2; exit 1; }

[[ -n "$llama_dir" ]] || die "name a llama.cpp build: LLAMA_CPP_DIR=DIR or an argument"
find_bin() {
  for d in "$llama_dir" "$llama_dir/bin" "$llama_dir/build/bin"; do
    [[ -x "$d/$1" ]] && { echo "$d/$1"; return; }
  done
  die "no $1 under $llama_dir (looked in ., bin/, build/bin/)"
}
llama_bench=$(find_bin llama-bench)
batched_bench=$(find_bin llama-batched-bench)
[[ -x "$strata" ]] || die "no strata binary at $strata (set STRATA_BUILD)"
# llama.cpp's no-mmap spelling changed: --load-mode none in newer builds, -mmp 0 / --no-mmap before.
# (The help is read whole first: grep -q closing the pipe early would fail it under pipefail.)
bench_help=$("$llama_bench" --help 2>&1 || true)
if [[ "$bench_help" == *--load-mode* ]]; then
  bench_load=(-lm none) batched_load=(--load-mode none)
else
  bench_load=(-mmp 0) batched_load=(--no-mmap)
fi

model="$work/$(basename "$config")"
gguf="$model.gguf"
mkdir -p "$work"
if [[ ! -f "$model/model.safetensors" ]]; then
  "$build/bench/strata_random_checkpoint" --config "$config" --out "$model" >&2
fi
if [[ ! -f "$gguf" || "$gguf" -ot "$model/model.safetensors" ]]; then
  python3 "$(dirname "$0")/gguf_from_safetensors.py" "$model" "$gguf" >&2
fi

ids() { python3 -c "print(','.join(str(1 + i % 1000) for i in range($1)))"; }
load() { cut -d' ' -f1 /proc/loadavg; }
wait_quiet() {
  local waited=0
  while python3 -c "import sys; sys.exit(0 if float('$(load)') >= $quiet_load else 1)" &&
      ((waited < quiet_wait)); do
    sleep 5; waited=$((waited + 5))
  done
}

s_decode() {  # threads
  "$strata" generate --model "$model" --device cpu --threads "$1" --prompt-ids "$(ids 16)" \
    --max-tokens 128 --ignore-eos --temperature 0 --max-model-len 1024 --json "${strata_args[@]}" |
    python3 -c "import json,sys; print(json.load(sys.stdin)['timing']['decode_tokens_per_second'])"
}
s_prefill() {
  "$strata" generate --model "$model" --device cpu --threads 2 --prompt-ids "$(ids 512)" \
    --max-tokens 1 --ignore-eos --temperature 0 --max-model-len 1024 \
    --max-num-batched-tokens 512 --json "${strata_args[@]}" |
    python3 -c "import json,sys; print(json.load(sys.stdin)['timing']['prefill_tokens_per_second'])"
}
s_streams() {  # prints "decode prompt"
  "$strata" bench --model "$model" --device cpu --threads 2 --num-prompts 16 --input-len 128 \
    --output-len 32 --ignore-eos --temperature 0 --max-num-seqs 16 \
    --max-num-batched-tokens 2048 --max-model-len 1024 --json "${strata_args[@]}" |
    python3 -c "
import json, sys
r = json.load(sys.stdin)['runs'][0]
d, p = r['decode_steps'], r['prompt_steps']
print(d['steps'] * d['mean_seqs'] / d['seconds'], r['prompt_tokens'] / p['seconds'])"
}
l_bench() {  # threads, -p, -n
  "$llama_bench" -m "$gguf" -t "$1" -p "$2" -n "$3" -r 1 "${bench_load[@]}" -o json \
      2>"$work/llama-bench.log" |
    python3 -c "import json,sys; print(json.load(sys.stdin)[0]['avg_ts'])"
}
l_streams() {  # prints "decode prompt"
  "$batched_bench" -m "$gguf" -t 2 -c 4096 -b 2048 -ub 512 -npp 128 -ntg 32 -npl 16 \
    "${batched_load[@]}" --output-format jsonl 2>"$work/llama-batched-bench.log" |
    python3 -c "
import json, sys
for line in sys.stdin:
    if line.startswith('{') and '\"speed_tg\"' in line:
        r = json.loads(line)
        print(r['speed_tg'], r['speed_pp'])"
}

# One measurement, tried twice: a co-tenant's burst can kill a run (llama-bench then prints
# nothing); a second failure stops the script with the command named.
measure() {
  local out
  for _ in 1 2; do
    if out=$("$@") && [[ -n "$out" ]]; then echo "$out"; return; fi
    echo "retrying: $*" >&2
  done
  die "failed twice: $* (llama.cpp's messages: $work/llama-*.log)"
}

floor_before=$("$build/bench/strata_cpu_floor" --threads 2 --json)
floor_one=$("$build/bench/strata_cpu_floor" --threads 1 --json)
results=()
for ((r = 0; r < rounds; ++r)); do
  wait_quiet
  round_load=$(load)
  echo "round $((r + 1))/$rounds, load $round_load" >&2
  for engine in $( ((r % 2 == 0)) && echo "strata llama" || echo "llama strata"); do
    d1=null d2=null pf=null sd=null sp=null
    if [[ $engine == strata ]]; then
      if wants decode1; then d1=$(measure s_decode 1); fi
      if wants decode2; then d2=$(measure s_decode 2); fi
      if wants prefill512; then pf=$(measure s_prefill); fi
      if wants streams; then read -r sd sp <<< "$(measure s_streams)"; fi
    else
      if wants decode1; then d1=$(measure l_bench 1 0 128); fi
      if wants decode2; then d2=$(measure l_bench 2 0 128); fi
      if wants prefill512; then pf=$(measure l_bench 2 512 0); fi
      if wants streams; then read -r sd sp <<< "$(measure l_streams)"; fi
    fi
    results+=("{\"engine\": \"$engine\", \"round\": $r, \"load\": $round_load, \"decode1\": $d1,
      \"decode2\": $d2, \"prefill512\": $pf, \"streams_decode\": $sd, \"streams_prompt\": $sp}")
  done
done
floor_after=$("$build/bench/strata_cpu_floor" --threads 2 --json)
printf '%s\n' "${results[@]}" | tr -d '\n' | sed 's/}{/}\n{/g' >"$work/rounds.jsonl"
echo >>"$work/rounds.jsonl"

python3 - "$json" "$config/config.json" "$model/model.safetensors" "${OMP_WAIT_POLICY:-unset}" \
    "$floor_before" "$floor_after" "$floor_one" "${results[@]}" <<'PY'
import json, os, statistics, sys
as_json = sys.argv[1] == "1"
cfg = json.load(open(sys.argv[2]))
weight_bytes = os.path.getsize(sys.argv[3])
omp = sys.argv[4]
f0, f1, f_one = (json.loads(a) for a in sys.argv[5:8])
rows = [json.loads(a) for a in sys.argv[8:]]
med = statistics.median
h, L, inter = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
hd = cfg.get("head_dim", h // heads)
layer_params = L * (h * heads * hd * 2 + 2 * h * kv * hd + 3 * h * inter)
bw2 = med([f0["read_gbs"], f1["read_gbs"]]) * 1e9
bw1 = f_one["read_gbs"] * 1e9
bf16 = med([f0["bf16_gflops"], f1["bf16_gflops"]]) * 1e9
# Prompt work runs on the BF16 dot products where the CPU has them, else on fp32 FMAs (AVX2).
peak, peak_is = (bf16, "of BF16 peak") if bf16 > 0 else (
    med([f0["fp32_gflops"], f1["fp32_gflops"]]) * 1e9, "of FP32 peak")
flops_per_prompt_token = 2 * layer_params + 2 * L * heads * hd * 512  # + attention, mean len 256
# A decoded token of the 16 streams: every layer, the LM head, attention over ~144 positions.
flops_per_decoded_token = 2 * (layer_params + h * cfg["vocab_size"]) + 4 * L * heads * hd * 144
floors = {
    "decode1": (bw1 / weight_bytes, "of read bandwidth"),
    "decode2": (bw2 / weight_bytes, "of read bandwidth"),
    "prefill512": (peak / flops_per_prompt_token, peak_is),
    # 16 rows per weight read: the lower of 16 x the decode bound and the compute bound.
    "streams_decode": min((16 * bw2 / weight_bytes, "of 16 x the decode bound"),
                          (peak / flops_per_decoded_token, peak_is.replace("peak", "compute"))),
    "streams_prompt": (peak / flops_per_prompt_token, peak_is),
}
names = {"decode1": "decode, 1 thread", "decode2": "decode, 2 threads",
         "prefill512": "prefill 512, 2 threads", "streams_decode": "16 streams x (128 + 32), decode phase",
         "streams_prompt": "16 streams, prompt phase"}
table = []
for key, name in names.items():
    s = [r[key] for r in rows if r["engine"] == "strata" and r[key] is not None]
    l = [r[key] for r in rows if r["engine"] == "llama" and r[key] is not None]
    if not s or not l:
        continue  # a workload left out of WORKLOADS
    floor, what = floors[key]
    table.append({"workload": name, "llama_cpp": med(l), "strata": med(s),
                  "strata_runs": s, "llama_cpp_runs": l, "ratio": med(s) / med(l),
                  "floor": floor, "strata_over_floor": med(s) / floor, "floor_is": what})
report = {"weight_bytes": weight_bytes, "omp_wait_policy": omp,
          "loads": sorted({r["load"] for r in rows}),
          "floors": {"read_gbs_2_threads": bw2 / 1e9, "read_gbs_1_thread": bw1 / 1e9,
                     "bf16_gflops_2_threads": bf16 / 1e9,
                     "fp32_gflops_2_threads": med([f0["fp32_gflops"], f1["fp32_gflops"]])},
          "rows": table}
if as_json:
    print(json.dumps(report, indent=2))
    sys.exit()
fl = report["floors"]
print(f"weights {weight_bytes / 1e9:.2f} GB; read {fl['read_gbs_1_thread']:.1f} GB/s (1 thread), "
      f"{fl['read_gbs_2_threads']:.1f} GB/s (2); BF16 peak {fl['bf16_gflops_2_threads']:.0f}, "
      f"FP32 peak {fl['fp32_gflops_2_threads']:.0f} GFLOP/s (2 threads); OMP_WAIT_POLICY={omp}; load at the rounds' starts {report['loads']}")
print("| workload | llama.cpp | Strata | Strata / llama.cpp | Strata / floor |")
print("|---|---|---|---|---|")
for t in table:
    print(f"| {t['workload']} | {t['llama_cpp']:.1f} tok/s | {t['strata']:.1f} | {t['ratio']:.2f} | "
          f"{t['strata_over_floor']:.2f} {t['floor_is']} |")
PY
