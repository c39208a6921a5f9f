#!/usr/bin/env bash
# The KV tiers on the GPU (docs/benchmarks.md, "KV tiers under the pool"): run on the GPU machine
# from the repository root, with .devcarry/gpu-pack (tools/gpu/gpu_check.sh build) copied there.
#
#   tools/gpu/gpu_kv_tiers_bench.sh ttft|agentic|copy OUT_DIR
#
#   copy     the host tier's way back into the pool against one pinned copy over the same link
#            (strata_tier_copy_bench: 2,048 blocks of the 8B shape, 4.3 GB)
#   ttft     the TTFT of a lost 32,768-token prefix by tier (tools/bench/bench_kv_tiers_ttft.sh),
#            Llama-3.1-8B shape, dummy bf16 weights, a 4.4 GB pool
#   agentic  the agentic workload (16 sessions x 8 turns, length scale 0.5) over a 4 GiB pool:
#            pool alone, a 16 GiB host tier (evict, write-through), a 4 GiB host tier over disk
#            with the prefetch on and off (tools/bench/bench_kv_tiers_agentic.sh; KV_TIERS_CONFIGS
#            picks configurations)
set -euo pipefail
what="$1"
out="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$root/.devcarry/gpu/bin"
mkdir -p "$root/.devcarry/gpu" "$out"
tar xJf "$root/.devcarry/gpu-pack/bin.tar.xz" -C "$root/.devcarry/gpu"
export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
model="$root/bench/models/llama-3.1-8b"
cp "$bin/build-info.txt" "$out/build-info.txt"
case "$what" in
  ttft)
    "$root/tools/bench/bench_kv_tiers_ttft.sh" "$bin/strata" "$model" 32768 4404019200 \
      "$out/kv_tiers_ttft.json" --device cuda --load-format dummy 2>&1 | grep -v "requests,"
    ;;
  copy)
    "$bin/strata_tier_copy_bench" | tee "$out/tier_copy.txt"
    ;;
  agentic)
    "$root/tools/bench/bench_kv_tiers_agentic.sh" "$bin/strata" "$model" $((4 << 30)) \
      $((16 << 30)) $((4 << 30)) "$out/kv_tiers_agentic.json" --device cuda --load-format dummy \
      --num-sessions 16 --turns 8 --length-scale 0.5 2>&1 |
      grep -v "requests,"
    ;;
  *)
    echo "usage: $0 ttft|agentic|copy OUT_DIR" >&2
    exit 2
    ;;
esac
