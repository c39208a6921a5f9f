#!/usr/bin/env bash
# Prefill/decode disaggregation end to end: a prefill instance, a decode instance that sends it
# each prompt and reads the prompt's KV from it over UCX, and a colocated instance, all
# `strata serve` on the bundled model; disaggregation_test.mjs checks with the openai npm client
# that the decode instance answers as the colocated one does, then the prefill instance is
# stopped (SIGSTOP: the transfer times out) and killed (SIGKILL: gone mid-service), and the answers
# must stay right. At the end no instance holds a block for a finished request.
# With `region`, the two instances share the machine's memory as a decode and a prefill instance
# on one GPU do (docs/kv.md, "One machine"): the prefill instance copies its blocks into a
# shared-memory region too (--kv-peer-region-bytes), the decode instance copies them out of it
# (--kv-peer-region) straight into its KV pool, and every block must have come that way.
# Usage: disaggregation_test.sh STRATA_BINARY [region]. Exit 77 (skipped) when the client is not
# installed.
set -uo pipefail
strata=$1
mode=${2:-values}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ ! -d "$here/client/node_modules/openai" ]] || ! command -v node >/dev/null; then
  echo "disaggregation_test: the openai client is not installed (scripts/install_deps.sh): skipped"
  exit 77
fi
# shellcheck source=/dev/null
source "$here/../tools/cli_testing.sh"
# shellcheck source=/dev/null
source "$here/serve_testing.sh"

# start NAME ARGS...: start_server with the bundled model; its URL in url_NAME, pid in pid_NAME.
start() {
  local name=$1
  shift
  start_server --threads 1 --num-blocks 512 "$@"
  printf -v "url_$name" '%s' "$base"
  printf -v "pid_$name" '%s' "$server_pid"
  printf -v "log_$name" '%s' "$server_log"
}
host=$((64 << 20))
prefill_region=()
decode_region=()
if [[ "$mode" == region ]]; then
  prefill_region=(--kv-peer-region-bytes $((32 << 20)))
  decode_region=(--kv-peer-region)
fi
start prefill --role prefill --kv-offload-bytes $host --kv-peer-listen 127.0.0.1:0 \
  "${prefill_region[@]}"
peer=$(sed -n 's|.*KV blocks for decode instances on \([^ ]*\) .*|\1|p' "$log_prefill")
[[ -n "$peer" ]] || { echo "FAIL: no peer address: $(cat "$log_prefill")"; exit 1; }
# The timeouts are what the stopped prefill instance below costs each request, and must outlast
# a first prefill on a loaded CI machine under the sanitizers (2 s and 1 s did not, now and then).
start decode --role decode --kv-offload-bytes $host --kv-peer "$peer" \
  --prefill-url "$url_prefill" --prefill-timeout 15 --kv-peer-timeout-ms 8000 \
  "${decode_region[@]}"
start colocated

node "$here/disaggregation_test.mjs" moved "$url_decode" "$url_colocated" && ok ||
  fail "disaggregated against colocated"
served=$(curl -s "$url_prefill/metrics" | sed -n 's/^strata:kv_peer_served_blocks_total //p')
[[ -n "$served" && "$served" != 0 ]] && ok || fail "the prefill instance served no block ($served)"
if [[ "$mode" == region ]]; then
  read_blocks=$(curl -s "$url_decode/metrics" | sed -n 's/^strata:kv_peer_read_blocks_total //p')
  region_blocks=$(curl -s "$url_decode/metrics" |
    sed -n 's/^strata:kv_peer_region_read_blocks_total //p')
  [[ -n "$region_blocks" && "$region_blocks" != 0 && "$region_blocks" == "$read_blocks" ]] && ok ||
    fail "not every block came out of the region ($region_blocks of $read_blocks)"
  # ... and straight into the decode instance's pool, through none of its host slots.
  pool_blocks=$(curl -s "$url_decode/metrics" |
    sed -n 's/^strata:kv_peer_region_pool_blocks_total //p')
  [[ "$pool_blocks" == "$region_blocks" ]] && ok ||
    fail "blocks went through a host slot ($pool_blocks of $region_blocks straight into the pool)"
fi

kill -STOP "$pid_prefill"
node "$here/disaggregation_test.mjs" fault "$url_decode" "$url_colocated" 1 && ok ||
  fail "the prefill instance stopped: the transfer times out"
kill -CONT "$pid_prefill"
kill -KILL "$pid_prefill"
wait "$pid_prefill" 2>/dev/null
node "$here/disaggregation_test.mjs" fault "$url_decode" "$url_colocated" 2 && ok ||
  fail "the prefill instance gone"
grep -q "prefill failed" "$log_decode" && ok || fail "the decode instance said nothing"
errors=$(curl -s "$url_decode/metrics" | sed -n 's/^strata:kv_peer_errors_total //p')
[[ -n "$errors" && "$errors" != 0 ]] && ok || fail "no failed read counted ($errors)"

# No blocks held once every request has finished.
for url in "$url_decode" "$url_colocated"; do
  used=$(curl -s "$url/metrics" | sed -n 's/^strata:kv_group_used_blocks{[^}]*} //p')
  [[ "$used" == 0 ]] && ok || fail "$url holds $used blocks after its requests"
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "$url_decode/health") == 200 ]] && ok ||
  fail "the decode instance is not healthy at the end"
finish disaggregation_test
