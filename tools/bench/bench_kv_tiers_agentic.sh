#!/usr/bin/env bash
# The agentic workload over a pool that holds a fraction of the sessions' working set, with the
# KV tiers off and on: the pool alone; a host tier (blocks written down when evicted, and written
# through as soon as cached); a small host tier over a disk tier, with the prefetch engine on and
# off. docs/benchmarks.md, "KV tiers under the pool".
#
#   tools/bench/bench_kv_tiers_agentic.sh STRATA MODEL_DIR POOL_BYTES HOST_BYTES SMALL_HOST_BYTES \
#       OUT_JSON [args...]
#
# Extra args go to every `strata bench` (the workload's shape, --device, --load-format). Each
# configuration's `strata bench --json` object goes to OUT_JSON under its name; a summary line per
# configuration is printed as it finishes. KV_TIERS_CONFIGS (space-separated names) runs only
# those configurations.
set -euo pipefail
strata="$1" model="$2" pool="$3" host="$4" small_host="$5" out="$6"
shift 6
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(--model "$model" --workload agentic --kv-cache-memory-bytes "$pool" --temperature 0
        --ignore-eos "$@")
names=()
run() {  # run NAME extra-args...
  local name="$1"
  shift
  case " ${KV_TIERS_CONFIGS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name"
  names+=("$name")
  "$strata" bench "${common[@]}" "$@" --json >"$tmp/$name.json"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; t=r['ttft_s']; \
print({k: r.get(k) for k in ('prefix_hit_rate', 'cacheable_share', 'output_tokens_per_s', \
'kv_host_tier_hit_tokens', 'kv_disk_tier_hit_tokens', 'kv_prefetched_blocks', 'kv_tier_faults', \
'kv_io_wait_seconds', 'kv_disk_read_seconds', 'kv_tier_down_seconds', 'kv_tier_up_seconds')}, \
{'ttft_p50_s': t['p50'], 'ttft_p99_s': t['p99'], 'itl_p99_s': r['inter_token_latency_s']['p99']})" "$tmp/$name.json"
}
run pool_only
run host --kv-offload-bytes "$host"
run host_write_through --kv-offload-bytes "$host" --kv-offload-policy write-through
mkdir -p "$tmp/disk"
run disk_prefetch --kv-offload-bytes "$small_host" --kv-disk-path "$tmp/disk" \
  --kv-disk-bytes $((host * 4))
rm -rf "$tmp/disk" && mkdir -p "$tmp/disk"
run disk_no_prefetch --kv-offload-bytes "$small_host" --kv-disk-path "$tmp/disk" \
  --kv-disk-bytes $((host * 4)) --no-kv-prefetch
python3 - "$tmp" "$out" "${names[@]}" <<'PY'
import json, os, sys
tmp, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
json.dump({n: json.load(open(os.path.join(tmp, n + ".json"))) for n in names}, open(out, "w"),
          indent=1)
PY
