#!/usr/bin/env bash
# `strata route` end to end: three `strata serve --kv-events-endpoint` instances on the bundled
# model behind two routers (prefix and round-robin), checked with the openai npm client
# (route_test.mjs): answers equal direct ones, bad input, prefix placement against round-robin,
# an instance killed (SIGKILL) under load -- taken out, in-flight requests fail cleanly, later
# ones succeed -- and put back once restarted. Then the router's own error cases.
# Usage: route_test.sh STRATA_BINARY. Exit 77 (skipped) when the client is not installed.
set -uo pipefail
strata=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
client="$here/../server/client/node_modules/openai"
if [[ ! -d "$client" ]] || ! command -v node >/dev/null || ! command -v python3 >/dev/null; then
  echo "route_test: the openai client (scripts/install_deps.sh) or python3 is missing: skipped"
  exit 77
fi
# shellcheck source=/dev/null
source "$here/../tools/cli_testing.sh"
# shellcheck source=/dev/null
source "$here/../server/serve_testing.sh"

# The instances' HTTP and event ports, fixed so that they survive a restart.
mapfile -t ports < <(free_ports 9)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT

# instance I: (re)starts instance I on ports[2I] (HTTP), ports[2I+1] (events) and ports[6+I]
# (replay).
instance() {
  local i=$1 log="$tmp/serve$1.$RANDOM.log"
  "$strata" serve --threads 1 --num-blocks 512 --port "${ports[$((2 * i))]}" \
    --kv-events-endpoint "tcp://*:${ports[$((2 * i + 1))]}" \
    --kv-events-replay-endpoint "tcp://*:${ports[$((6 + i))]}" >"$log" 2>&1 &
  pids+=($!)
  printf -v "pid_$i" '%s' "$!"
  wait_for "$log" '.*serving .* on \(http://[0-9.:]*\).*' >/dev/null
}
backends=()
for i in 0 1 2; do
  instance "$i"
  backends+=(--backend "http://127.0.0.1:${ports[$((2 * i))]},events=tcp://127.0.0.1:${ports[$((2 * i + 1))]}")
done
# router POLICY: starts a router on port 0; its URL in $url.
router() {
  local log="$tmp/route.$1.log"
  "$strata" route --port 0 --policy "$1" "${backends[@]}" >"$log" 2>&1 &
  pids+=($!)
  url=$(wait_for "$log" '.*routing to .* on \(http://[0-9.:]*\).*')
}
router prefix
prefix_url=$url
router round-robin
rr_url=$url
direct="http://127.0.0.1:${ports[0]}"

node "$here/route_test.mjs" equal "$prefix_url" "$direct" && ok || fail "equal"
node "$here/route_test.mjs" placement "$prefix_url" "$direct" "$rr_url" && ok || fail "placement"

# An instance killed under load (round-robin, so it has some of the requests).
node "$here/route_test.mjs" load "$rr_url" "$direct" >"$tmp/load.out" 2>&1 &
load=$!
for _ in $(seq 1 600); do
  grep -q '^streaming$' "$tmp/load.out" && break
  kill -0 "$load" 2>/dev/null || break
  sleep 0.05
done
kill -KILL "$pid_1"
wait "$pid_1" 2>/dev/null
if wait "$load" && grep -q '^streaming$' "$tmp/load.out"; then
  read -r finished failed < <(grep -v '^streaming$' "$tmp/load.out")
  ((failed > 0 && finished > 0 && finished + failed == 12)) && ok ||
    fail "load: $finished finished, $failed failed (some of each expected)"
else
  fail "load: $(cat "$tmp/load.out")"
fi
healthy() { curl -s "$1/metrics" | sed -n "s|^strata:router_instance_healthy{instance=\"http://127.0.0.1:${ports[2]}\"} ||p"; }
[[ $(healthy "$rr_url") == 0 ]] && ok || fail "the killed instance is not taken out"
node "$here/route_test.mjs" after "$rr_url" "$direct" && ok || fail "after the kill"

instance 1
for _ in $(seq 1 50); do [[ $(healthy "$rr_url") == 1 ]] && break; sleep 0.1; done
[[ $(healthy "$rr_url") == 1 ]] && ok || fail "the restarted instance is not back"
before=$(curl -s "$rr_url/metrics" | sed -n "s|^strata:router_requests_total{instance=\"http://127.0.0.1:${ports[2]}\"} ||p")
node "$here/route_test.mjs" back "$rr_url" "$direct" && ok || fail "back"
after=$(curl -s "$rr_url/metrics" | sed -n "s|^strata:router_requests_total{instance=\"http://127.0.0.1:${ports[2]}\"} ||p")
((after > before)) && ok || fail "the restarted instance gets no request ($before -> $after)"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$prefix_url/health") == 200 ]] && ok ||
  fail "the router is not healthy at the end"

# A router started now learns what instance 0 cached before it came, through the replay
# endpoint: no request goes through it first.
backends=(--backend "http://127.0.0.1:${ports[0]},events=tcp://127.0.0.1:${ports[1]},replay=tcp://127.0.0.1:${ports[6]}")
router prefix
late_url=$url
blocks=""
for _ in $(seq 1 50); do
  blocks=$(curl -s "$late_url/metrics" | sed -n 's/^strata:router_index_blocks{[^}]*} //p')
  [[ -n "$blocks" && "$blocks" != 0 ]] && break
  sleep 0.1
done
[[ -n "$blocks" && "$blocks" != 0 ]] && ok || fail "a late router's index is empty: no replay"

# SIGTERM: the router stops and exits 0.
late_pid=${pids[-1]}
kill -TERM "$late_pid"
wait "$late_pid" && ok || fail "the router did not exit 0 on SIGTERM"
finish route_test
