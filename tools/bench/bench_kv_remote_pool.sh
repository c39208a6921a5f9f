#!/usr/bin/env bash
# The shared KV pool experiment (docs/benchmarks.md, "One KV pool shared by many instances"): N
# `strata serve` instances on this machine take a workload's requests round-robin (`strata bench
# --endpoint` with every instance: a session's turns land on different instances, the worst case
# for caches local to one), first with their local caches only, then with one Redis on loopback
# under every instance's host tier (--kv-remote). The same workload, arrivals and engine flags
# both times.
#
#   tools/bench/bench_kv_remote_pool.sh STRATA MODEL_DIR N OUT_JSON SERVE_ARGS... -- BENCH_ARGS...
#
# SERVE_ARGS go to every `strata serve` (they must give a host tier, --kv-offload-bytes, which the
# remote tier sits under); BENCH_ARGS to `strata bench` (the workload). INSTANCE_ENV, when set,
# is a space-separated list of N assignments prefixed to each instance's command in turn (e.g.
# "CUDA_VISIBLE_DEVICES=0 CUDA_VISIBLE_DEVICES=0"). REDIS_SERVER names the redis-server binary.
# REMOTE_POOL_CONFIGS (space-separated: local shared) runs only those. REDIS_SHARDS (default 1)
# servers share the blocks (each instance is given all of them: --kv-remote once per server),
# each with REDIS_MAXMEMORY (default 8gb) under allkeys-lru. Each configuration's
# `strata bench --json` object goes to OUT_JSON under its name; a summary line is printed per run.
# SERVE_LOG_DIR, when set, receives the instances' logs (serve.I.log) of the last run when the
# script ends, a failed run's included.
set -euo pipefail
strata="$1" model="$2" n="$3" out="$4"
shift 4
serve_args=() bench_args=()
while (($#)) && [[ "$1" != -- ]]; do serve_args+=("$1"); shift; done
(($#)) && shift
bench_args=("$@")
read -r -a instance_env <<<"${INSTANCE_ENV:-}"
redis_server="${REDIS_SERVER:-redis-server}"
tmp="$(mktemp -d)"
pids=()
redis_pid=""
cleanup() {
  [[ -n "${SERVE_LOG_DIR:-}" ]] && cp "$tmp"/serve.*.log "$SERVE_LOG_DIR"/ 2>/dev/null
  kill "${pids[@]}" $redis_pid 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_instances EXTRA_ARGS...: N servers; sets endpoints (comma-separated).
start_instances() {
  endpoints=""
  local i log port
  for ((i = 0; i < n; i++)); do
    log="$tmp/serve.$i.log"
    port=$(free_port)
    env ${instance_env[i]:+"${instance_env[i]}"} "$strata" serve --model "$model" --port "$port" \
      "${serve_args[@]}" "$@" >"$log" 2>&1 &
    pids+=($!)
    endpoints+="${endpoints:+,}http://127.0.0.1:$port"
  done
  for ((i = 0; i < n; i++)); do
    log="$tmp/serve.$i.log"
    for _ in $(seq 1 1200); do
      grep -q "serving .* on http://" "$log" && break
      kill -0 "${pids[${#pids[@]} - n + i]}" 2>/dev/null || { echo "instance $i died:"; cat "$log"; exit 1; }
      sleep 0.1
    done
    grep -q "serving .* on http://" "$log" || { echo "instance $i did not start:"; cat "$log"; exit 1; }
  done
}
stop_all() {
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
}

names=()
run() {  # run NAME EXTRA_SERVE_ARGS...
  local name="$1"
  shift
  case " ${REMOTE_POOL_CONFIGS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name: $n instances $*"
  start_instances "$@"
  "$strata" bench --model "$model" --endpoint "$endpoints" "${bench_args[@]}" --json \
    >"$tmp/$name.json"
  stop_all
  names+=("$name")
  python3 - "$tmp/$name.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
print({k: r.get(k) for k in ("num_requests", "prefix_hit_rate", "cacheable_share",
                             "output_tokens_per_s", "kv_remote_hit_tokens",
                             "kv_remote_written_blocks", "kv_remote_present_blocks",
                             "kv_remote_dropped_writes",
                             "kv_remote_skipped_blocks", "kv_remote_overdue_requests",
                             "kv_remote_read_bytes", "kv_remote_errors")},
      {f"{m}_{p}": r[k][p] for m, k in (("ttft", "ttft_s"), ("e2e", "e2e_latency_s"))
       for p in ("p50", "p99")})
PY
}

run local
redis_pids=()
remote_args=()
for ((k = 0; k < ${REDIS_SHARDS:-1}; k++)); do
  redis_port=$(free_port)
  "$redis_server" --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --maxmemory "${REDIS_MAXMEMORY:-8gb}" --maxmemory-policy allkeys-lru \
    --logfile "$tmp/redis.$k.log" --daemonize no &
  redis_pids+=($!)
  redis_pid="${redis_pids[*]}"
  for _ in $(seq 100); do
    python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$redis_port)); \
s.sendall(b'PING\r\n'); sys.exit(0 if s.recv(16).startswith(b'+PONG') else 1)" 2>/dev/null && break
    sleep 0.05
  done
  remote_args+=(--kv-remote "redis://127.0.0.1:$redis_port")
done
run shared "${remote_args[@]}"
kill "${redis_pids[@]}" 2>/dev/null || true
wait "${redis_pids[@]}" 2>/dev/null || true
redis_pid=""
python3 - "$tmp" "$out" "$n" "${names[@]}" <<'PY'
import json, os, sys
tmp, out, n, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
runs = {m: json.load(open(os.path.join(tmp, m + ".json"))) for m in names}
json.dump({"instances": n, "runs": runs}, open(out, "w"), indent=1)
print(f"| {n} instances | hit rate | of cacheable | output tok/s | TTFT p50 s | TTFT p99 s | "
      "e2e p50 s | e2e p99 s | remote hit tokens |")
print("|---|---|---|---|---|---|---|---|---|")
for m in names:
    r = runs[m]["runs"][0]
    share = r["cacheable_share"] or float("nan")
    print(f"| {m} | {r['prefix_hit_rate']:.3f} | {r['prefix_hit_rate'] / share:.3f} | "
          f"{r['output_tokens_per_s']:.1f} | {r['ttft_s']['p50']:.3f} | {r['ttft_s']['p99']:.3f} | "
          f"{r['e2e_latency_s']['p50']:.3f} | {r['e2e_latency_s']['p99']:.3f} | "
          f"{r.get('kv_remote_hit_tokens', 0)} |")
PY
