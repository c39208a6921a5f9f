#!/usr/bin/env bash
# Colocated against disaggregated serving on one GPU (docs/benchmarks.md, "Prefill/decode
# disaggregation"): the Llama-3.1-8B shape (dummy bf16 weights), first one `strata serve`
# instance with a pool of 2 x POOL_GIB, then a prefill and a decode instance with POOL_GIB each
# (the same KV memory in all), at the same offered load: random prompts of INPUT_LEN (default
# 256:4096) tokens arriving at REQUEST_RATE (default 2) a second, NUM_PROMPTS (default 150) of
# them, OUTPUT_LEN (default 256) tokens each (about 0.55 GB/s of KV to move, within what one
# loopback connection carries), so that long prompts arrive while streams decode
# (tools/bench/bench_disaggregation.sh). Run on the GPU machine from the repository root with
# .devcarry/gpu/bin (tools/gpu/gpu_check.sh build packs it, UCX's libraries included).
#
#   tools/gpu/gpu_disaggregation.sh OUT_DIR [BENCH_ARGS...]
#
# DISAGG_CONFIGS picks the runs (bench_disaggregation.sh): colocated, disaggregated (blocks as
# values: GPU -> host tier -> UCX -> host -> GPU), compressed, and region (the blocks copied out
# of the prefill instance's CUDA IPC region, docs/kv.md "One machine"; default: colocated
# disaggregated region). POOL_GIB (default 20) and KV_OFFLOAD_GIB (default 8) size each
# instance's pool and host tier, REGION_GIB (default 2) the prefill instance's region, which
# comes on top of its pool.
#
#   DISAGG_CONFIGS="colocated disaggregated region" NUM_PROMPTS=60 POOL_GIB=8 \
#     tools/gpu/gpu_disaggregation.sh OUT_DIR
set -euo pipefail
out="$1"
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$root/.devcarry/gpu/bin"
mkdir -p "$root/.devcarry/gpu" "$out"
# The whole pack or its engine half (gpu_check.sh build writes both).
for pack in gpu-pack gpu-pack-engine; do
  if [[ ! -x "$bin/strata" && -f "$root/.devcarry/$pack/bin.tar.xz" ]]; then
    tar xJf "$root/.devcarry/$pack/bin.tar.xz" -C "$root/.devcarry/gpu"
  fi
done
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
model="$root/bench/models/llama-3.1-8b"
cp "$bin/build-info.txt" "$out/build-info.txt"
pool=$((${POOL_GIB:-20} << 30))
export DISAGG_CONFIGS="${DISAGG_CONFIGS:-colocated disaggregated region}"
export KV_PEER_REGION_BYTES=$((${REGION_GIB:-2} << 30))
COLOCATED_ARGS="--kv-cache-memory-bytes $((2 * pool))" \
PREFILL_ARGS="--kv-cache-memory-bytes $pool" DECODE_ARGS="--kv-cache-memory-bytes $pool" \
  "$root/tools/bench/bench_disaggregation.sh" "$bin/strata" "$model" "$out/disaggregation.json" \
  --device cuda --load-format dummy --kv-offload-bytes $((${KV_OFFLOAD_GIB:-8} << 30)) -- \
  --input-len "${INPUT_LEN:-256:4096}" --output-len "${OUTPUT_LEN:-256}" \
  --request-rate "${REQUEST_RATE:-2}" --num-prompts "${NUM_PROMPTS:-150}" --ignore-eos \
  --seed 1 "$@" 2>&1 | grep -v "requests,"
