#!/usr/bin/env bash
# Prefix-aware routing (docs/benchmarks.md, "Prefix-aware routing (`strata route`)"): N
# `strata serve --kv-events-endpoint` instances behind `strata route`, and `strata bench
# --endpoint ROUTER` on one workload once per policy (round-robin, least-load, prefix), each on
# freshly started instances (empty caches). Per policy: the global prefix-cache hit rate (the
# prompt tokens the requests found cached, their cached_tokens: the pools' hits and the KV
# tiers'; the JSON also has pool_hit_rate, the instances' own strata:prefix_cache_hits_total /
# queries_total over the run, summed) against the workload's cacheable share, TTFT p50/p99, output tokens/s, the most requests one instance got
# over the mean, and the router's added latency (a one-token completion sent LATENCY_REQUESTS
# times through the router and directly to an instance, one at a time, after the run).
#
#   tools/bench/bench_route.sh [--json] [STRATA [MODEL_DIR]] [-- BENCH_ARGS...]
#
# Environment: N (instances, default 4), THREADS (--threads per instance, default 1),
# POLICIES (default "round-robin least-load prefix"), LATENCY_REQUESTS (default 50),
# SERVE_ARGS (more flags for every `strata serve`, e.g. a pool size and a host tier), POOLS
# (default "local"; "local shared" runs every policy twice: with the instances' own caches, then
# with one fresh redis-server -- REDIS_SERVER, default redis-server; REDIS_MAXMEMORY, default
# 8gb, allkeys-lru -- under every instance's host tier, --kv-remote; SERVE_ARGS must then give a
# host tier, --kv-offload-bytes).
# BENCH_ARGS default to the agentic workload scaled for a CPU; WORKLOAD=pairs replays instead a
# Mooncake-format trace this script writes: 48 documents of 12 blocks, each read twice (by
# requests with 2 blocks of their own, the second a few seconds after the first), so a document's
# second request is a hit only where its first ran: round-robin's chance of that is 1 in N.
set -euo pipefail
json=0
if [[ "${1:-}" == --json ]]; then json=1; shift; fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
positional=()
while (($#)) && [[ "$1" != -- ]]; do positional+=("$1"); shift; done
(($#)) && shift
strata="${positional[0]:-$here/build/release/tools/strata/strata}"
model="${positional[1]:-$here/models/strata-tiny}"
bench_args=("$@")
((${#bench_args[@]})) || bench_args=(--workload agentic --num-sessions 9 --turns 12
                                     --length-scale 0.05 --seed 1)
n="${N:-4}"
tmp="$(mktemp -d)"
if [[ "${WORKLOAD:-}" == pairs ]]; then
  python3 - "$tmp/pairs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(1)
lines = []
for doc in range(48):
    prefix = [doc * 100 + b for b in range(12)]
    first = doc * 250
    for k, at in enumerate((first, first + 3000 + rng.randrange(2000))):
        own = [100000 + doc * 10 + k * 2, 100001 + doc * 10 + k * 2]
        lines.append({"timestamp": at, "input_length": 14 * 16, "output_length": 16,
                      "hash_ids": prefix + own})
lines.sort(key=lambda l: l["timestamp"])
open(sys.argv[1], "w").write("".join(json.dumps(l) + "\n" for l in lines))
PY
  bench_args=(--trace "$tmp/pairs.jsonl" --trace-block-size 16 --trace-hash-block-size 16
              --seed 1)
fi
pids=()
redis_pid=""
cleanup() {
  kill "${pids[@]}" $redis_pid 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_line() {  # wait_line LOG PID PATTERN: prints the first \1 of PATTERN in LOG
  local got=""
  for _ in $(seq 1 600); do
    got=$(sed -n "s|$3|\1|p" "$1" | head -1)
    [[ -n "$got" ]] && break
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$got" ]] || { echo "did not start: $(cat "$1")" >&2; exit 1; }
  printf '%s' "$got"
}
# hits: "HITS QUERIES" summed over the instances' /metrics: their pools' prefix cache (not what
# the KV tiers brought back, which a request's cached_tokens counts too).
hits() {
  local h=0 q=0 u m
  for u in "${urls[@]}"; do
    m=$(curl -s "$u/metrics")
    h=$((h + $(sed -n 's/^strata:prefix_cache_hits_total \([0-9]*\).*/\1/p' <<<"$m")))
    q=$((q + $(sed -n 's/^strata:prefix_cache_queries_total \([0-9]*\).*/\1/p' <<<"$m")))
  done
  echo "$h $q"
}
# latencies URL: LATENCY_REQUESTS one-token completions, one at a time; seconds, one a line.
latencies() {
  for _ in $(seq 1 "${LATENCY_REQUESTS:-50}"); do
    curl -s -o /dev/null -w '%{time_total}\n' "$1/v1/completions" \
      -H 'Content-Type: application/json' \
      -d '{"prompt":"The router adds how much?","max_tokens":1,"temperature":0}'
  done
}

# start_redis: a fresh redis-server on a free port (an empty shared pool); its URL in $redis_url.
start_redis() {
  local port
  port=$(free_port)
  "${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --maxmemory "${REDIS_MAXMEMORY:-8gb}" --maxmemory-policy allkeys-lru \
    --logfile "$tmp/redis.log" --daemonize no &
  redis_pid=$!
  for _ in $(seq 1 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null && break
    sleep 0.05
  done
  redis_url="redis://127.0.0.1:$port"
}

read -r -a policies <<<"${POLICIES:-round-robin least-load prefix}"
read -r -a pools <<<"${POOLS:-local}"
read -r -a serve_args <<<"${SERVE_ARGS:-}"
runs=()
for pool in "${pools[@]}"; do
for policy in "${policies[@]}"; do
  run=$policy
  [[ "${pools[*]}" == local ]] || run="$policy/$pool"
  runs+=("$run")
  tag=${run//\//.}
  remote=()
  if [[ $pool == shared ]]; then
    start_redis
    remote=(--kv-remote "$redis_url")
  fi
  urls=() backends=()
  for ((i = 0; i < n; i++)); do
    port=$(free_port) events=$(free_port)
    "$strata" serve --model "$model" --port "$port" --threads "${THREADS:-1}" \
      "${serve_args[@]}" "${remote[@]}" \
      --kv-events-endpoint "tcp://*:$events" >"$tmp/serve.$i.log" 2>&1 &
    pids+=($!)
    wait_line "$tmp/serve.$i.log" $! '.*serving .* on \(http://[0-9.:]*\).*' >/dev/null
    urls+=("http://127.0.0.1:$port")
    backends+=(--backend "http://127.0.0.1:$port,events=tcp://127.0.0.1:$events")
  done
  "$strata" route --model "$model" --port 0 --policy "$policy" "${backends[@]}" \
    >"$tmp/route.log" 2>&1 &
  pids+=($!)
  router=$(wait_line "$tmp/route.log" $! '.*routing to .* on \(http://[0-9.:]*\).*')
  read -r h0 q0 < <(hits)
  "$strata" bench --model "$model" --endpoint "$router" "${bench_args[@]}" --json \
    >"$tmp/$tag.bench.json"
  read -r h1 q1 < <(hits)
  curl -s "$router/metrics" >"$tmp/$tag.route.prom"
  latencies "$router" >"$tmp/$tag.lat.router"
  latencies "${urls[0]}" >"$tmp/$tag.lat.direct"
  echo "$((h1 - h0)) $((q1 - q0))" >"$tmp/$tag.hits"
  remote_hits=0
  for u in "${urls[@]}"; do
    r=$(curl -s "$u/metrics" | sed -n 's/^strata:kv_remote_hits_total \([0-9]*\).*/\1/p')
    remote_hits=$((remote_hits + ${r:-0}))
  done
  echo "$remote_hits" >"$tmp/$tag.remote"
  kill "${pids[@]}" $redis_pid 2>/dev/null || true
  wait "${pids[@]}" $redis_pid 2>/dev/null || true
  pids=() redis_pid=""
done
done

python3 - "$tmp" "$json" "$n" "${THREADS:-1}" "${runs[@]}" <<'PY'
import json, os, re, statistics, sys
tmp, as_json, n, threads, policies = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5:]
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
out = {"instances": n, "threads_per_instance": threads, "policies": {}}
for p in policies:
    tag = p.replace("/", ".")
    b = json.load(open(os.path.join(tmp, tag + ".bench.json")))
    r = b["runs"][0]
    hits, queries = map(int, open(os.path.join(tmp, tag + ".hits")).read().split())
    remote_tokens = int(open(os.path.join(tmp, tag + ".remote")).read())
    prom = open(os.path.join(tmp, tag + ".route.prom")).read()
    routed = [int(v) for v in re.findall(r'^strata:router_requests_total\{[^}]*\} (\d+)$', prom, re.M)]
    decisions = {k: int(v) for k, v in
                 re.findall(r'^strata:router_decisions_total\{decision="(\w+)"\} (\d+)$', prom, re.M)}
    lr = [float(x) for x in open(os.path.join(tmp, tag + ".lat.router")).read().split()]
    ld = [float(x) for x in open(os.path.join(tmp, tag + ".lat.direct")).read().split()]
    # The prompt tokens the requests found cached, as their cached_tokens say: the pools' hits
    # and the KV tiers' (host, disk, Redis); without tiers the instances' pool figure is equal.
    hit = r["prefix_hit_rate"]
    share = r["cacheable_share"]
    mean = sum(routed) / len(routed)
    out["policies"][p] = {
        "hit_rate": hit, "cacheable_share": share,
        "hit_rate_of_cacheable": hit / share if share else None,
        "pool_hit_rate": hits / queries if queries else 0.0,
        "ttft_p50_s": r["ttft_s"]["p50"], "ttft_p99_s": r["ttft_s"]["p99"],
        "output_tokens_per_s": r["output_tokens_per_s"], "num_requests": r["num_requests"],
        "requests_per_instance": routed, "max_over_mean_load": max(routed) / mean if mean else None,
        "decisions": decisions, "remote_hit_tokens": remote_tokens,
        "router_latency_p50_s": pct(lr, 50), "router_latency_p99_s": pct(lr, 99),
        "direct_latency_p50_s": pct(ld, 50), "direct_latency_p99_s": pct(ld, 99),
        "added_latency_p50_s": pct(lr, 50) - pct(ld, 50),
        "added_latency_p99_s": pct(lr, 99) - pct(ld, 99),
    }
if as_json:
    json.dump(out, sys.stdout, indent=1)
    print()
    sys.exit(0)
print(f"{n} instances x --threads {threads}, strata bench --endpoint ROUTER")
print("| policy | hit rate | cacheable | of cacheable | TTFT p50 s | TTFT p99 s | output tok/s | "
      "requests per instance | max/mean | tokens from Redis | added latency p50 / p99 ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for p, x in out["policies"].items():
    print(f"| {p} | {x['hit_rate']:.3f} | {x['cacheable_share']:.3f} | "
          f"{x['hit_rate_of_cacheable']:.3f} | {x['ttft_p50_s']:.3f} | {x['ttft_p99_s']:.3f} | "
          f"{x['output_tokens_per_s']:.1f} | {x['requests_per_instance']} | "
          f"{x['max_over_mean_load']:.2f} | {x['remote_hit_tokens']} | "
          f"{x['added_latency_p50_s'] * 1e3:.2f} / {x['added_latency_p99_s'] * 1e3:.2f} |")
PY
