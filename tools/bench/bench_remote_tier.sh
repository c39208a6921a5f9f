#!/usr/bin/env bash
# The remote KV tier's write and read rates beside redis-benchmark's with the same value size, in
# one run against one scratch redis-server on loopback (docs/benchmarks.md, "The remote tier").
#
#   tools/bench/bench_remote_tier.sh BENCH_BINARY [BLOCKS] [BLOCK_BYTES] [BATCH] [OUT_JSON]
#
# REMOTE_TIER_CODEC sets how the tier's values hold the blocks (stored, split or zstd; default stored). The
# peer's values are the stored size either way: the same blocks a second.
# BATCH blocks per RemoteTier::get call (a request's prefix), which the tier reads as pipelined
# MGETs of up to 2 MiB of values, two in flight. redis-benchmark: one connection, SETs of values
# of the tier's value size to new keys (as the tier's writes are), then GETs over BLOCKS distinct
# keys as the tier's reads are (-r: random keys; the keys filled before the GETs), pipelined as
# deep as the tier's reads keep bytes in flight (4 MiB). Each side on a server of its own, started
# for it. Reading one key over and over, as redis-benchmark does without -r, serves the value
# from the server's cache and its writes reuse one allocation: neither is what a tier does.
set -euo pipefail
bench="$1" blocks="${2:-256}" block_bytes="${3:-2097152}" batch="${4:-32}" out="${5:-}"
# A fresh server for each side: a server reusing memory that it freed (FLUSHDB, or a SET over a
# key already there) stores a value without faulting its pages in, which a tier writing new
# blocks never gets.
server=""
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
start_server() {
  if [[ -n "$server" ]]; then kill "$server"; wait "$server" 2>/dev/null || true; fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --logfile /dev/null \
    --daemonize no &
  server=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
}
start_server
strata_json=$("$bench" --url "redis://127.0.0.1:$port" --blocks "$blocks" --block-bytes "$block_bytes" \
  --batch "$batch" \
  ${REMOTE_TIER_CODEC:+--codec "$REMOTE_TIER_CODEC"} --json)
value_bytes=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['value_bytes'])" "$strata_json")
start_server
# The tier keeps two MGETs of up to 2 MiB of values in flight: the same bytes for redis-benchmark.
depth=$(( (4 << 20) / value_bytes )); ((depth >= 1)) || depth=1
peer() { redis-benchmark -p "$port" -c 1 -P "$depth" -d "$value_bytes" --csv -q "$@"; }
# SETs of new keys, as the tier's are (-r over 10^9 keys: no key written twice).
set_csv=$(peer -n "$blocks" -r 1000000000 -t set)
peer -r "$blocks" -n $((blocks * 4)) -t set >/dev/null  # every key there before the GETs (1 - e^-5 of them)
get_csv=$(peer -r "$blocks" -n "$blocks" -t get)
peer_csv="$set_csv
$get_csv"
python3 - "$strata_json" "$peer_csv" "$value_bytes" "$out" <<'PY'
import csv, io, json, sys
strata, peer_csv, value_bytes, out = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
rps = {}
for row in csv.reader(io.StringIO(peer_csv)):
    if row and row[0] in ("SET", "GET"):
        rps[row[0]] = float(row[1])
peer = {k: v * value_bytes / 1e9 for k, v in rps.items()}
res = {"strata": strata, "redis_benchmark_gb_per_s": peer,
       "put_ratio": strata["put_gb_per_s"] / peer["SET"], "get_ratio": strata["get_gb_per_s"] / peer["GET"]}
print(f"| {strata['blocks']} values of {value_bytes} bytes | Strata GB/s | redis-benchmark GB/s | ratio |")
print("|---|---|---|---|")
print(f"| write (pipelined SET NX / SET) | {strata['put_gb_per_s']:.2f} | {peer['SET']:.2f} | {res['put_ratio']:.2f} |")
print(f"| read ({strata['batch']} blocks a call, pipelined MGETs, checked / pipelined GET) | {strata['get_gb_per_s']:.2f} | {peer['GET']:.2f} | {res['get_ratio']:.2f} |")
if out:
    json.dump(res, open(out, "w"), indent=1)
PY
