#!/usr/bin/env bash
# bench_http_slow_clients.sh: how many slow (slowloris) clients `strata serve` survives, with
# /health answering within 100 ms, beside another strata binary measured in the same run (an
# older build, say). For each binary and each client count: a fresh server (strata-tiny), N
# connections trickling a request head one byte a second (tests/server/slow_clients_test.mjs),
# 20 /health probes while they hang on.
#
# Usage: tools/bench/bench_http_slow_clients.sh [--json] [--clients "300 1000 4000"] STRATA [PEER_STRATA]
# The first binary gets --max-connections and --max-connections-per-client raised to the largest
# count (the clients all come from 127.0.0.1); a peer is started with the common flags only.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
json=0
clients="300 1000 4000"
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --json) json=1 ;;
    --clients) clients=$2; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
(($# >= 1)) || { echo "usage: $0 [--json] [--clients LIST] STRATA [PEER_STRATA]" >&2; exit 2; }
ulimit -n 65536 2>/dev/null || true
max=0
for n in $clients; do ((n > max)) && max=$n; done
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

rows=()
for which in new peer; do
  bin=${1:-}
  [[ $which == peer ]] && bin=${2:-}
  [[ -n $bin ]] || continue
  extra=()
  [[ $which == new ]] && extra=(--max-connections $((max + 64)) --max-connections-per-client $((max + 64)) --http-read-timeout 5)
  for n in $clients; do
    log="$tmp/serve.log"
    "$bin" serve --port 0 --threads 2 --num-blocks 2048 "${extra[@]}" >"$log" 2>&1 &
    pid=$!
    port=""
    for _ in $(seq 1 300); do
      port=$(sed -n 's|.*serving .* on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log")
      [[ -n $port ]] && break
      sleep 0.1
    done
    [[ -n $port ]] || { echo "the server did not start: $(cat "$log")" >&2; exit 1; }
    echo "bench_http_slow_clients: $which ($bin), $n slow clients" >&2
    row=$(node "$here/tests/server/slow_clients_test.mjs" "http://127.0.0.1:$port" "$n" 5 --json |
      grep '^{' || true)
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
    [[ -n $row ]] || row="{\"slow_clients\":$n,\"health_median_ms\":null}"
    rows+=("{\"binary\":\"$which\",${row#\{}")
  done
done

if ((json)); then
  printf '%s\n' "${rows[@]}"
else
  printf '%-6s %12s %18s %18s %10s\n' binary "slow clients" "/health median ms" "/health max ms" survives
  for r in "${rows[@]}"; do
    node -e '
      const r = JSON.parse(process.argv[1]);
      const f = (x) => (x === null ? "none" : String(x));
      const ok = r.health_median_ms !== null && r.health_median_ms < 100 && r.health_max_ms !== null;
      console.log(`${r.binary.padEnd(6)} ${String(r.slow_clients).padStart(12)} ` +
        `${f(r.health_median_ms).padStart(18)} ${f(r.health_max_ms).padStart(18)} ${(ok ? "yes" : "no").padStart(10)}`);
    ' "$r"
  done
fi
