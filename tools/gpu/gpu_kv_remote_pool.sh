#!/usr/bin/env bash
# The shared KV pool on the GPU (docs/benchmarks.md, "One KV pool shared by many instances"): two
# `strata serve` instances of the Llama-3.1-8B shape (dummy bf16 weights) on one GPU, each with
# a 32 GiB pool (with its 16 GB of weights, under half the GPU), taking a workload round-robin with their local caches only and then with
# one Redis on loopback under their host tiers (tools/bench/bench_kv_remote_pool.sh). Run on the
# GPU machine from the repository root, with .devcarry/gpu-pack (tools/gpu/gpu_check.sh build,
# which packs Debian's redis-server too) copied there.
#
#   tools/gpu/gpu_kv_remote_pool.sh agentic|trace OUT_DIR [TRACE_JSONL]
#
#   agentic  16 sessions x 8 turns of the agentic workload at length scale 0.5
#   trace    a Mooncake-format trace, all of it, 16 tokens a hash id (one KV block: the
#            synthetic trace's 3,993 requests are then 1.95M prompt tokens, 64 % of them a
#            prefix seen before), arrivals TRACE_TIME_SCALE (default 0.05) of the trace's,
#            outputs a quarter of its lengths; the shared pool on REDIS_SHARDS (default 4)
#            servers of REDIS_MAXMEMORY (default 16gb) each
#
# Extra arguments after the trace go to `strata bench`; SERVE_EXTRA (space-separated) to every
# `strata serve`; KV_OFFLOAD_GIB sets each instance's host tier (default 8), POOL_GIB its pool
# (default 32; an 80 GB GPU holds two instances with 20).
set -euo pipefail
what="$1"
out="$2"
trace="${3:-}"
shift $(($# < 3 ? $# : 3))
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$root/.devcarry/gpu/bin"
mkdir -p "$root/.devcarry/gpu" "$out"
[[ -x "$bin/strata" ]] || tar xJf "$root/.devcarry/gpu-pack/bin.tar.xz" -C "$root/.devcarry/gpu"
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export REDIS_SERVER="$bin/redis/redis-server"
export SERVE_LOG_DIR="${SERVE_LOG_DIR:-$out}"  # the instances' logs come back with the figures
model="$root/bench/models/llama-3.1-8b"
cp "$bin/build-info.txt" "$out/build-info.txt"
# Each instance: a 32 GiB pool (sized, not a share of the free memory, which the other instance
# takes too), a host tier (8 GiB) that every cached block is written through to (and so to Redis,
# when it is there), and room for every stream of an overloaded replay (all come from one
# address: the default 1,024 a client would close the rest).
serve=(--device cuda --load-format dummy --kv-cache-memory-bytes $((${POOL_GIB:-32} << 30))
       --kv-offload-bytes $((${KV_OFFLOAD_GIB:-8} << 30)) --kv-offload-policy write-through --kv-remote-timeout-ms 2000
       --max-connections 16384 --max-connections-per-client 16384)
read -r -a extra <<<"${SERVE_EXTRA:-}"
serve+=("${extra[@]}")
case "$what" in
  agentic)
    "$root/tools/bench/bench_kv_remote_pool.sh" "$bin/strata" "$model" 2 \
      "$out/kv_remote_pool_agentic.json" "${serve[@]}" -- \
      --workload agentic --num-sessions 16 --turns 8 --length-scale 0.5 --seed 1 "$@" 2>&1 |
      grep -v "requests,"
    ;;
  trace)
    REDIS_SHARDS="${REDIS_SHARDS:-4}" REDIS_MAXMEMORY="${REDIS_MAXMEMORY:-16gb}" \
      "$root/tools/bench/bench_kv_remote_pool.sh" "$bin/strata" "$model" 2 \
      "$out/kv_remote_pool_trace.json" "${serve[@]}" -- \
      --trace "$trace" --trace-block-size 16 --trace-time-scale "${TRACE_TIME_SCALE:-0.05}" \
      --trace-output-scale 0.25 "$@" 2>&1 | grep -v "requests,"
    ;;
  *)
    echo "usage: $0 agentic|trace OUT_DIR [TRACE_JSONL]" >&2
    exit 2
    ;;
esac
