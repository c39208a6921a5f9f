#!/usr/bin/env bash
# The CPU engine against its floors, all measured in the same run (docs/benchmarks.md, CPU engine):
#   floor     strata_cpu_floor: read bandwidth at THREADS threads, FP32 (and BF16) peak flop/s
#   decode    one sequence, 16-token prompt, 32 greedy tokens (strata generate): tokens/s against
#             weight bytes / read bandwidth (one decode step reads every weight once)
#   prefill   one 512-token prompt: tokens/s against FP32 peak / flops per prompt token
#   streams   16 sequences of 128 prompt + 32 output tokens (strata bench): decode-phase tokens/s
#             (16 / time per output token, prefill excluded) against the lower of
#             16 x the decode bandwidth bound and FP32 peak / flops per decoded token
# Each figure is the median of RUNS runs; the floor is taken before and after them (each floor is
# the best of its repetitions, so load on a shared machine never lowers the bound).
# Usage: tools/bench/bench_cpu_decode.sh [BUILD_DIR] [MODEL_DIR] [THREADS] [RUNS]
set -euo pipefail
build=${1:-build/release}
model=${2:-bench/models/qwen2-0.5b}
threads=${3:-2}
runs=${4:-3}
strata="$build/tools/strata/strata"
common=(--model "$model" --load-format dummy --threads "$threads" --block-size 16)
ids() { python3 -c "print(','.join(str(1 + i % 1000) for i in range($1)))"; }

floor_before=$("$build/bench/strata_cpu_floor" --threads "$threads" --json)
decode=() prefill=() streams=()
for ((r = 0; r < runs; ++r)); do
  echo "run $((r + 1))/$runs (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  decode+=("$("$strata" generate "${common[@]}" --prompt-ids "$(ids 16)" --max-tokens 32 \
      --ignore-eos --temperature 0 --max-model-len 1024 --json)")
  prefill+=("$("$strata" generate "${common[@]}" --prompt-ids "$(ids 512)" --max-tokens 1 \
      --ignore-eos --temperature 0 --max-model-len 1024 --max-num-batched-tokens 512 --json)")
  streams+=("$("$strata" bench "${common[@]}" --num-prompts 16 --input-len 128 --output-len 32 \
      --ignore-eos --max-num-seqs 16 --max-num-batched-tokens 2048 --max-model-len 1024 --json)")
done
floor_after=$("$build/bench/strata_cpu_floor" --threads "$threads" --json)

python3 - "$model/config.json" "$floor_before" "$floor_after" "${decode[@]}" "${prefill[@]}" \
    "${streams[@]}" <<'PY'
import json, statistics, sys
cfg = json.load(open(sys.argv[1]))
f0, f1 = json.loads(sys.argv[2]), json.loads(sys.argv[3])
rest = [json.loads(a) for a in sys.argv[4:]]
n = len(rest) // 3
decode, prefill, streams = rest[:n], rest[n:2 * n], rest[2 * n:]
med = statistics.median
h, L, inter, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
hd = cfg.get("head_dim", h // heads)
layer_params = L * (h * heads * hd * 2 + 2 * h * kv * hd + 3 * h * inter)
head_params = h * vocab
bw = med([f0["read_gbs"], f1["read_gbs"]]) * 1e9
peak = med([f0["fp32_gflops"], f1["fp32_gflops"]]) * 1e9
wb = decode[0]["weight_bytes"]
print(f"floor ({f0['threads']} threads): read {f0['read_gbs']:.1f} / {f1['read_gbs']:.1f} GB/s "
      f"(before / after), FP32 peak {f0['fp32_gflops']:.0f} / {f1['fp32_gflops']:.0f} GFLOP/s "
      f"({f0['fp32_isa']}), BF16 peak {f0['bf16_gflops']:.0f} GFLOP/s")
print("| workload | median (runs) | bound | ratio |")
print("|---|---|---|---|")
tps = med([d["timing"]["decode_tokens_per_second"] for d in decode])
print(f"| decode, 1 sequence | {tps:.2f} tokens/s {sorted(round(d['timing']['decode_tokens_per_second'], 2) for d in decode)} "
      f"| {bw / wb:.2f} tokens/s ({wb / 1e9:.2f} GB / {bw / 1e9:.1f} GB/s) | {tps / (bw / wb):.2f} |")
pf = med([p["timing"]["prefill_tokens_per_second"] for p in prefill])
attn = 2 * L * heads * hd * 512  # QK^T + PV, mean causal length 256, per prompt token
pf_bound = peak / (2 * layer_params + attn)
print(f"| prefill, 512 tokens | {pf:.1f} tokens/s {sorted(round(p['timing']['prefill_tokens_per_second'], 1) for p in prefill)} "
      f"| {pf_bound:.1f} tokens/s (FP32 peak) | {pf / pf_bound:.2f} |")
tg = [16 / s["runs"][0]["tpot_s"]["p50"] for s in streams]
s_tg = med(tg)
bw16 = 16 * bw / wb
cmp16 = peak / (2 * (layer_params + head_params))
lo = min(bw16, cmp16)
print(f"| 16 streams, decode phase | {s_tg:.1f} tokens/s {sorted(round(t, 1) for t in tg)} "
      f"| {lo:.1f} tokens/s (bandwidth {bw16:.0f}, compute {cmp16:.0f}) | {s_tg / lo:.2f} |")
PY
