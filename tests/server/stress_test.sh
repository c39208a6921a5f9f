#!/usr/bin/env bash
# `strata serve` under stress, one scenario per run, each on a fresh server (strata-tiny):
#   load      256 streams at once (load_test.mjs), with --max-num-seqs 256
#   storm     200 clients that disconnect at random points (disconnect_storm_test.mjs)
#   sigterm   SIGTERM during 64 streams (sigterm_test.mjs); the server must exit 0
#   capacity  --max-waiting-requests 2: a third request gets 503 + Retry-After, a burst admits
#             exactly 2 (capacity_test.mjs)
#   hardening attacks on the HTTP layer over raw sockets (hardening_test.mjs): bad paths, chunked
#             and header floods, bad Content-Length, pipelining, keys, the advertised length,
#             abandoned requests
#   slow      300 slowloris clients: /health answers within 100 ms, the read deadline closes
#             them (slow_clients_test.mjs)
# Usage: stress_test.sh STRATA_BINARY SCENARIO. Exit 77 (skipped) without node.
set -uo pipefail
strata=$1
scenario=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! command -v node >/dev/null; then
  echo "stress_test: node is not installed (scripts/install_deps.sh): skipped"
  exit 77
fi
# shellcheck source=/dev/null
source "$here/../tools/cli_testing.sh"
# shellcheck source=/dev/null
source "$here/serve_testing.sh"
common=(--threads 2 --num-blocks 2048)
# run_node WHAT SCRIPT ARGS...: one scenario's node client; a failure names node's exit status
# (a signal shows as 128 + its number) and the server log's last lines, since a client that dies
# early prints nothing of its own.
run_node() {
  local what=$1
  shift
  node "$@"
  local rc=$?
  ((rc == 0)) && ok ||
    fail "$what (node exited with $rc); the server log ends: $(tail -n 5 "$server_log")"
}

case "$scenario" in
  load)
    start_server "${common[@]}" --max-num-seqs 256
    run_node "load" "$here/load_test.mjs" "$base" 256 32
    ;;
  storm)
    start_server "${common[@]}"
    run_node "disconnect storm" "$here/disconnect_storm_test.mjs" "$base" 200
    ;;
  sigterm)
    timeout_s=3
    start_server "${common[@]}" --shutdown-timeout "$timeout_s" --http-read-timeout 120
    run_node "sigterm" "$here/sigterm_test.mjs" "$base" "$server_pid" "$timeout_s" 64
    wait "$server_pid"
    rc=$?
    ((rc == 0)) && ok || fail "the server exited with $rc after SIGTERM: $(tail -n 5 "$server_log")"
    grep -q "shutting down: " "$server_log" && grep -q "cancelling" "$server_log" && ok ||
      fail "the shutdown log: $(cat "$server_log")"
    ;;
  capacity)
    start_server "${common[@]}" --max-waiting-requests 2
    run_node "capacity" "$here/capacity_test.mjs" "$base" 2
    ;;
  hardening)
    printf '# two tenants\nkey-one\n\nkey-two\n' >"$tmp/keys"
    start_server --threads 2 --num-blocks 64 --block-size 16 --api-key-file "$tmp/keys" \
      --max-request-body-bytes 1048576
    run_node "hardening" "$here/hardening_test.mjs" "$base" key-one key-two
    ;;
  slow)
    start_server "${common[@]}" --http-read-timeout 6
    run_node "slow clients" "$here/slow_clients_test.mjs" "$base" 300 6
    ;;
  *)
    echo "unknown scenario '$scenario'"
    exit 2
    ;;
esac
finish "stress_test $scenario"
