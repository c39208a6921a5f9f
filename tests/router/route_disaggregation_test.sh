#!/usr/bin/env bash
# `strata route --prefill-backend ... --decode-backend ...` end to end on the bundled model: two
# `strata serve --role prefill` instances publishing KV events, one `--role decode` instance
# configured with both (--prefill-url and --kv-peer each), a colocated instance, and the router;
# route_disaggregation_test.mjs checks the answers against the colocated ones and where the
# prompts went. Then the decode instance's X-Strata-Prefill-Url: a configured one is used, any
# other refused (400 naming it), as is the header on an instance with no prefill instances; and
# the command lines that cannot work are refused.
# Usage: route_disaggregation_test.sh STRATA_BINARY. Exit 77 (skipped) when the client is missing.
set -uo pipefail
strata=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ ! -d "$here/../server/client/node_modules/openai" ]] || ! command -v node >/dev/null; then
  echo "route_disaggregation_test: the openai client is not installed: skipped"
  exit 77
fi
# shellcheck source=/dev/null
source "$here/../tools/cli_testing.sh"
# shellcheck source=/dev/null
source "$here/../server/serve_testing.sh"
{ read -r ev0; read -r ev1; } < <(free_ports 2)

host=$((64 << 20))
start() {  # NAME ARGS...: start_server; its URL in url_NAME, its log in log_NAME
  local name=$1
  shift
  start_server --threads 1 --num-blocks 512 "$@"
  printf -v "url_$name" '%s' "$base"
  printf -v "log_$name" '%s' "$server_log"
}
peer_of() { sed -n 's|.*KV blocks for decode instances on \([^ ]*\) .*|\1|p' "$1"; }
start p0 --role prefill --kv-offload-bytes $host --kv-peer-listen 127.0.0.1:0 \
  --kv-events-endpoint "tcp://*:$ev0"
start p1 --role prefill --kv-offload-bytes $host --kv-peer-listen 127.0.0.1:0 \
  --kv-events-endpoint "tcp://*:$ev1"
peer0=$(peer_of "$log_p0")
peer1=$(peer_of "$log_p1")
[[ -n "$peer0" && -n "$peer1" ]] || { echo "FAIL: no peer address"; exit 1; }
start decode --role decode --kv-offload-bytes $host --prefill-url "$url_p0" --kv-peer "$peer0" \
  --prefill-url "$url_p1" --kv-peer "$peer1"
start colocated
route_log="$tmp/route.log"
"$strata" route --port 0 --prefill-backend "$url_p0,events=tcp://127.0.0.1:$ev0" \
  --prefill-backend "$url_p1,events=tcp://127.0.0.1:$ev1" --decode-backend "$url_decode" \
  >"$route_log" 2>&1 &
server_pids+=($!)
router=""
for _ in $(seq 1 300); do
  router=$(sed -n 's|.*routing to 2 prefill and 1 decode instances (prefix) on \(http://[0-9.:]*\).*|\1|p' "$route_log")
  [[ -n "$router" ]] && break
  sleep 0.1
done
[[ -n "$router" ]] || { echo "FAIL: the router did not start: $(cat "$route_log")"; exit 1; }

node "$here/route_disaggregation_test.mjs" "$router" "$url_colocated" "$url_decode" "$url_p0" \
  "$url_p1" && ok || fail "through the router"
decision=$(curl -s "$router/metrics" | sed -n 's/^strata:router_decisions_total{decision="prefix_match"} //p')
((decision > 0)) && ok || fail "no prefill instance was chosen by its prefix ($decision)"

# The header, on the decode instance directly.
served() { curl -s "$1/metrics" | sed -n 's/^strata:prompt_tokens_total //p'; }
body='{"model": "strata-tiny", "prompt": "'$(printf 'Let there be light. %.0s' $(seq 1 12))'", "max_tokens": 2}'
before=$(served "$url_p1")
code=$(curl -s -o /dev/null -w '%{http_code}' "$url_decode/v1/completions" \
  -H 'Content-Type: application/json' -H "X-Strata-Prefill-Url: $url_p1/" -d "$body")
after=$(served "$url_p1")
[[ $code == 200 ]] && ((after > before)) && ok ||
  fail "the named prefill instance was not used ($code, served $before -> $after)"
for bad in "http://127.0.0.1:1" "$url_colocated" "file:///etc/passwd"; do
  out=$(curl -s -w ' %{http_code}' "$url_decode/v1/completions" -H 'Content-Type: application/json' \
    -H "X-Strata-Prefill-Url: $bad" -d "$body")
  [[ "$out" == *'"param":"X-Strata-Prefill-Url"'*' 400' ]] && ok || fail "header $bad: $out"
done
out=$(curl -s -w ' %{http_code}' "$url_colocated/v1/completions" -H 'Content-Type: application/json' \
  -H "X-Strata-Prefill-Url: $url_p0" -d "$body")
[[ "$out" == *' 400' ]] && ok || fail "the header on a colocated instance: $out"
# Through the router a client's own header is dropped: the router names the prefill instance.
code=$(curl -s -o /dev/null -w '%{http_code}' "$router/v1/completions" \
  -H 'Content-Type: application/json' -H "X-Strata-Prefill-Url: http://127.0.0.1:1" -d "$body")
[[ $code == 200 ]] && ok || fail "a client's header reached the decode instance ($code)"

# Command lines that cannot work.
refused() {  # ARGS...: strata exits non-zero with one line on stderr
  local err
  err=$("$strata" "$@" 2>&1 >/dev/null)
  [[ $? != 0 && $(printf '%s\n' "$err" | wc -l) == 1 ]] && ok || fail "accepted: $* ($err)"
}
refused route --port 0 --backend "$url_p0" --prefill-backend "$url_p0" --decode-backend "$url_decode"
refused route --port 0 --prefill-backend "$url_p0"
refused route --port 0 --decode-backend "$url_decode"
refused route --port 0
refused serve --port 0 --role decode --kv-offload-bytes $host --prefill-url "$url_p0" \
  --prefill-url "$url_p1" --kv-peer "$peer0"
refused serve --port 0 --role decode --kv-offload-bytes $host --prefill-url "$url_p0" \
  --prefill-url "$url_p0/" --kv-peer "$peer0" --kv-peer "$peer0"
finish route_disaggregation_test
