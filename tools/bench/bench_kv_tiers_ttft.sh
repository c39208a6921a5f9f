#!/usr/bin/env bash
# Time to first token of a prompt whose long prefix the pool has lost, by where the prefix comes
# back from: recomputed (no tiers), the host tier (blocks written down when evicted, and written
# through as soon as cached), or disk (a host tier of a few blocks over a disk tier).
# docs/benchmarks.md, "KV tiers under the pool".
#
#   tools/bench/bench_kv_tiers_ttft.sh STRATA MODEL_DIR PREFIX_TOKENS POOL_BYTES OUT_JSON [args...]
#
# The trace (Mooncake hash ids, 512-token blocks): two prompts A and B of PREFIX_TOKENS each,
# then A and B again twice, each with one new block, 3 s apart so each runs alone. POOL_BYTES
# must hold one prompt's KV but not two, so every prompt evicts the other's blocks: A and B are
# computed cold, and the four later prompts find their prefix only in the tiers (or recompute it).
# TTFT p50 over the six is the later prompts' (four of six); max is a cold prompt's. Extra args go
# to every `strata bench` (e.g. --device cuda --load-format dummy). Each configuration's
# `strata bench --json` object goes to OUT_JSON under its name, with the disk directory's read
# bandwidth measured after the disk run (dd of the tier's files, page cache dropped if allowed).
set -euo pipefail
strata="$1" model="$2" prefix="$3" pool="$4" out="$5"
shift 5
blocks=$((prefix / 512))
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 - "$blocks" "$tmp/trace.jsonl" <<'PY'
import json, sys
n, path = int(sys.argv[1]), sys.argv[2]
a, b = list(range(n)), list(range(1000, 1000 + n))
rows, t, extra = [], 0, 5000
for ids in (a, b, a, b, a, b):
    tail = [extra]; extra += 1
    full = ids + tail if len(rows) >= 2 else ids
    rows.append({"timestamp": t, "hash_ids": full, "input_length": 512 * len(full), "output_length": 1})
    t += 3000
with open(path, "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
PY
common=(--model "$model" --trace "$tmp/trace.jsonl" --kv-cache-memory-bytes "$pool"
        --max-model-len $((prefix + 1024)) --max-num-batched-tokens 16384 --temperature 0
        --ignore-eos "$@")
run() {  # run NAME extra-args...
  local name="$1"
  shift
  echo "== $name"
  "$strata" bench "${common[@]}" "$@" --json >"$tmp/$name.json"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; t=r['ttft_s']; \
print({'ttft_p50_s': t['p50'], 'ttft_max_s': t['max'], 'host_hit_tokens': r.get('kv_host_tier_hit_tokens'), \
'disk_hit_tokens': r.get('kv_disk_tier_hit_tokens'), 'faults': r.get('kv_tier_faults'), \
'down_s': r.get('kv_tier_down_seconds'), 'up_s': r.get('kv_tier_up_seconds'), \
'disk_read_s': r.get('kv_disk_read_seconds'), 'io_wait_s': r.get('kv_io_wait_seconds')})" "$tmp/$name.json"
}
run recompute
run host --kv-offload-bytes $((pool * 2))
run host_write_through --kv-offload-bytes $((pool * 2)) --kv-offload-policy write-through
mkdir -p "$tmp/disk"
run disk --kv-offload-bytes $((pool / 64)) --kv-disk-path "$tmp/disk" --kv-disk-bytes $((pool * 4))
# The disk's sequential read bandwidth over the tier's own files, after dropping the page cache
# when allowed (else the figure is the page cache's, and says so).
dropped=no
if sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then dropped=yes; fi
bytes=$(du -sb "$tmp/disk" | cut -f1)
t0=$(date +%s.%N)
find "$tmp/disk" -name '*.kvb' -print0 | xargs -0 cat >/dev/null
t1=$(date +%s.%N)
python3 - "$tmp" "$out" "$bytes" "$t0" "$t1" "$dropped" <<'PY'
import json, os, sys
tmp, out, nbytes, t0, t1, dropped = sys.argv[1:]
res = {n: json.load(open(os.path.join(tmp, n + ".json")))
       for n in ("recompute", "host", "host_write_through", "disk")}
res["disk_read"] = {"bytes": int(nbytes), "seconds": float(t1) - float(t0),
                    "gb_per_s": int(nbytes) / max(float(t1) - float(t0), 1e-9) / 1e9,
                    "page_cache_dropped": dropped == "yes"}
json.dump(res, open(out, "w"), indent=1)
print("disk read:", res["disk_read"])
PY
