#!/usr/bin/env bash
# `strata route` and one `strata serve --kv-events-endpoint` instance on the bundled model:
#   - connections to the instance are kept alive and reused, request after request, without
#     delay;
#   - a client that goes away mid-stream, or while a plain answer is computed, cancels the
#     instance's request: its /metrics shows nothing running and no block in use long before the
#     generation would have ended, and no request finished;
#   - POST /reset_prefix_cache: 409 with an OpenAI error object while a request is in flight,
#     then 200 with no body; through the router it reaches every instance, the instance's
#     AllBlocksCleared reaches the router, whose index forgets the instance's blocks, and the
#     prompt asked again is computed anew (no cached tokens).
# Usage: route_cancel_test.sh STRATA_BINARY.
set -uo pipefail
strata=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$here/../tools/cli_testing.sh"
# shellcheck source=/dev/null
source "$here/../server/serve_testing.sh"
{ read -r events; read -r replay; } < <(free_ports 2)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
"$strata" serve --port 0 --threads 1 --num-blocks 512 --kv-events-endpoint "tcp://*:$events" \
  --kv-events-replay-endpoint "tcp://*:$replay" >"$tmp/serve.log" 2>&1 &
pids+=($!)
direct=$(wait_for "$tmp/serve.log" '.*serving .* on \(http://[0-9.:]*\).*')
"$strata" route --port 0 \
  --backend "$direct,events=tcp://127.0.0.1:$events,replay=tcp://127.0.0.1:$replay" \
  >"$tmp/route.log" 2>&1 &
pids+=($!)
url=$(wait_for "$tmp/route.log" '.*routing to .* on \(http://[0-9.:]*\).*')

metric() {  # BASE NAME: the value of NAME (a whole line's name, labels included) on BASE
  curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}
complete() {  # BASE JSON-FIELDS: a completion's answer
  curl -s "$1/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"strata-tiny\", $2}"
}
inst="{instance=\"$direct\"}"
prompt='"prompt": "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep."'

# Kept-alive connections: ten requests in a row open one connection.
for _ in $(seq 1 10); do complete "$url" "$prompt, \"max_tokens\": 2" >/dev/null; done
opened=$(metric "$url" "strata:router_connections_opened_total$inst")
[[ "$opened" == 1 ]] && ok || fail "ten requests opened $opened connections"
[[ $(metric "$url" "strata:router_connections_idle$inst") == 1 ]] && ok ||
  fail "the connection is not kept for the next request"

# A kept connection adds no delay: twenty one-token requests through the router take less than
# 20 ms each more than directly (Nagle's algorithm against the instance's delayed ACK would add
# 40 ms to each).
now() { python3 -c 'import time; print(time.monotonic())'; }
timed() {  # BASE: seconds for twenty one-token completions in a row
  local t0
  t0=$(now)
  for _ in $(seq 1 20); do complete "$1" "$prompt, \"max_tokens\": 1" >/dev/null; done
  python3 -c 'import sys, time; print(time.monotonic() - float(sys.argv[1]))' "$t0"
}
direct_s=$(timed "$direct")
routed_s=$(timed "$url")
python3 -c 'import sys; d, r = map(float, sys.argv[1:]); sys.exit(0 if r < d + 0.4 else 1)' \
  "$direct_s" "$routed_s" && ok || fail "20 requests: ${routed_s}s routed, ${direct_s}s direct"

# until CMD...: CMD succeeds within 5 s.
until_ok() {
  for _ in $(seq 1 50); do "$@" && return 0; sleep 0.1; done
  return 1
}
idle() {
  [[ $(metric "$direct" strata:num_requests_running) == 0 &&
     $(metric "$direct" strata:kv_cache_used_blocks) == 0 ]]
}
long='"prompt": "hi", "max_tokens": 4000, "ignore_eos": true'
finished=$(metric "$direct" 'strata:request_success_total{finished_reason="length"}')
# A stream the client leaves after its first bytes: the instance cancels it.
start=$(now)
curl -s -N "$url/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"strata-tiny\", $long, \"stream\": true}" | head -c 2000 >"$tmp/head.out"
grep -q '^data: {' "$tmp/head.out" && ok || fail "the stream did not start: $(cat "$tmp/head.out")"
until_ok idle && ok || fail "a stream the client left still runs on the instance"
# A plain answer the client stops waiting for.
curl -s --max-time 0.5 "$url/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"strata-tiny\", $long}" >/dev/null
until_ok idle && ok || fail "a plain request the client left still runs on the instance"
cut=$(now)
# Both were gone sooner than a quarter of one of them takes to generate (had they run on, 8000
# tokens would still be coming); and neither finished.
complete "$direct" '"prompt": "hi", "max_tokens": 1000, "ignore_eos": true' >/dev/null
python3 -c 'import sys; a, b, c = map(float, sys.argv[1:]); sys.exit(0 if b - a < c - b else 1)' \
  "$start" "$cut" "$(now)" && ok || fail "cancelling took longer than a quarter of a generation"
[[ $(metric "$direct" 'strata:request_success_total{finished_reason="length"}') == $((finished + 1)) ]] &&
  ok || fail "a request the client left finished on the instance"
[[ $(metric "$url" "strata:router_instance_healthy$inst") == 1 ]] && ok ||
  fail "a client going away took the instance out"

# /reset_prefix_cache: refused while a request runs on the instance, then done.
curl -s -N "$direct/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"strata-tiny\", $long, \"stream\": true}" >/dev/null &
busy=$!
running() { [[ $(metric "$direct" strata:num_requests_running) == 1 ]]; }
until_ok running || fail "no request running"
code=$(curl -s -o "$tmp/409.json" -w '%{http_code}' -X POST "$url/reset_prefix_cache")
[[ $code == 409 ]] && grep -q '"type":"conflict_error"' "$tmp/409.json" && ok ||
  fail "reset while busy: $code $(cat "$tmp/409.json")"
kill "$busy" 2>/dev/null
wait "$busy" 2>/dev/null
until_ok idle || fail "the busy request did not end"
# (The long generations evicted the prompt's blocks: asked twice, it hits the second time.)
complete "$url" "$prompt, \"max_tokens\": 1" >/dev/null
cached=$(complete "$url" "$prompt, \"max_tokens\": 1" | sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p')
((cached > 0)) && ok || fail "the prompt asked again hit no cache ($cached)"
index_blocks() { metric "$url" "strata:router_index_blocks$inst"; }
indexed() { (($(index_blocks) > 0)); }
forgotten() { [[ $(index_blocks) == 0 ]]; }
until_ok indexed || fail "the router's index is empty"
code=$(curl -s -o "$tmp/200.out" -w '%{http_code}' -X POST "$url/reset_prefix_cache")
[[ $code == 200 && ! -s "$tmp/200.out" ]] && ok || fail "reset: $code $(cat "$tmp/200.out")"
[[ $(metric "$direct" strata:prefix_cache_blocks) == 0 ]] && ok || fail "the instance kept blocks"
until_ok forgotten && ok || fail "the router still holds $(index_blocks) blocks"
cached=$(complete "$url" "$prompt, \"max_tokens\": 1" | sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p')
[[ $cached == 0 ]] && ok || fail "after the reset the prompt hit $cached cached tokens"
# Bad input to the endpoint: an OpenAI error, the same through the router as direct.
for q in '?reset_running_requests=true' '?bogus=1' '?reset_external=maybe'; do
  a=$(curl -s -w ' %{http_code}' -X POST "$direct/reset_prefix_cache$q")
  b=$(curl -s -w ' %{http_code}' -X POST "$url/reset_prefix_cache$q")
  [[ "$a" == *' 400' && "$a" == "$b" ]] && ok || fail "reset$q: direct '$a', routed '$b'"
done
[[ $(curl -s -o /dev/null -w '%{http_code}' -X POST "$direct/reset_prefix_cache?reset_external=false") == 200 ]] &&
  ok || fail "reset_external=false is refused"
finish route_cancel_test
