#!/usr/bin/env bash
# Colocated against disaggregated serving on this machine, at the same offered load: first one
# `strata serve` instance (SERVE_ARGS, then COLOCATED_ARGS), then a prefill instance (PREFILL_ARGS)
# and a decode instance (DECODE_ARGS) that sends it each prompt and reads the prompt's KV blocks
# from it (docs/kv.md, "Disaggregation"); `strata bench --endpoint` drives the one that takes the
# clients with BENCH_ARGS both times. Prints a table (output tokens/s, TTFT and inter-token
# latency of the running streams, the blocks moved, the decode instance's reads' time beside the
# part of it that moved blocks (the rest waits for the prefill it overlaps), and the transfer's
# GB/s over that part beside this machine's memcpy bandwidth measured in the same run) and
# writes both runs' reports to OUT_JSON.
#
#   tools/bench/bench_disaggregation.sh STRATA MODEL_DIR OUT_JSON SERVE_ARGS... -- BENCH_ARGS...
#
# SERVE_ARGS go to every instance and must give a host tier (--kv-offload-bytes). The defaults
# split this machine's cores: COLOCATED_ARGS "--threads 2", PREFILL_ARGS and DECODE_ARGS
# "--threads 1". DISAGG_CONFIGS picks the runs: colocated, disaggregated (the default two),
# compressed (disaggregated with --kv-peer-compress), and region (disaggregated with the blocks
# copied out of the prefill instance's region of KV_PEER_REGION_BYTES, default 1 GiB: CUDA IPC
# with --device cuda, shared memory on the CPU; docs/kv.md, "One machine").
set -euo pipefail
strata=$1 model=$2 out=$3
shift 3
serve_args=()
while (($#)) && [[ $1 != -- ]]; do serve_args+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
bench_args=("$@")
read -r -a colocated_args <<<"${COLOCATED_ARGS:---threads 2}"
read -r -a prefill_args <<<"${PREFILL_ARGS:---threads 1}"
read -r -a decode_args <<<"${DECODE_ARGS:---threads 1}"
tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT

# serve NAME ARGS...: starts an instance on a free port; sets url to its URL. Not called in a
# command substitution: its subshell would keep the pid, and stop_all would stop nothing.
serve() {
  local name=$1 port=""
  shift
  "$strata" serve --model "$model" --port 0 "${serve_args[@]}" "$@" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1200); do
    port=$(sed -n 's|.*serving .* on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/$name.log")
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  [[ -n "$port" ]] || { echo "$name did not start:" >&2; cat "$tmp/$name.log" >&2; exit 1; }
  url="http://127.0.0.1:$port"
}
stop_all() {
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
}
metrics() {  # metrics URL: the instance's /metrics text
  python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$1/metrics"
}
names=()
bench() {  # bench NAME URL
  echo "== $1" >&2
  "$strata" bench --model "$model" --endpoint "$2" "${bench_args[@]}" --json >"$tmp/$1.json"
  metrics "$2" >"$tmp/$1.metrics"
  names+=("$1")
}
want() {
  case " ${DISAGG_CONFIGS:-colocated disaggregated} " in *" $1 "*) return 0 ;; esac
  return 1
}

if want colocated; then
  serve colocated "${colocated_args[@]}"
  bench colocated "$url"
  stop_all
fi
prefill_extra=()  # the next disaggregated run's arguments for its prefill instance only
decode_extra=()   # ... and for its decode instance only
disaggregated() {  # disaggregated NAME EXTRA_ARGS...: a prefill and a decode instance
  local name=$1 prefill peer decode
  shift
  serve "$name.prefill" --role prefill --kv-peer-listen 127.0.0.1:0 "${prefill_args[@]}" "$@" \
    "${prefill_extra[@]}"
  prefill=$url
  peer=$(sed -n 's|.*KV blocks for decode instances on \([^ ]*\) .*|\1|p' "$tmp/$name.prefill.log")
  serve "$name.decode" --role decode --kv-peer "$peer" --prefill-url "$prefill" \
    "${decode_args[@]}" "$@" "${decode_extra[@]}"
  decode=$url
  bench "$name" "$decode"
  stop_all
}
if want disaggregated; then disaggregated disaggregated; fi
# The values coded as the pool's dtype suits (--kv-peer-compress) on both sides.
if want compressed; then disaggregated compressed --kv-peer-compress; fi
# One machine: the blocks copied out of the prefill instance's region, not sent as values.
if want region; then
  prefill_extra=(--kv-peer-region-bytes "${KV_PEER_REGION_BYTES:-$((1 << 30))}")
  decode_extra=(--kv-peer-region)
  disaggregated region
  prefill_extra=()
  decode_extra=()
fi
python3 - "$tmp" "$out" "${names[@]}" <<'PY'
import json, os, re, sys, time
tmp, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
def metric(name, text):
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0
# memcpy bandwidth, one core, between buffers already in memory: the copy a transfer costs at
# the least.
a = bytearray(b"\x01") * (1 << 28)
b = bytearray(len(a))
b[:] = a
best = 0.0
for _ in range(5):
    t = time.perf_counter(); b[:] = a; best = max(best, len(a) / (time.perf_counter() - t))
runs = {}
print("| serving | output tok/s | TTFT p50 / p99 s | ITL p50 / p99 ms | e2e p99 s | "
      "blocks moved | GB moved | read s / transfer s | transfer GB/s (of memcpy) |")
print("|---|---|---|---|---|---|---|---|---|")
for n in names:
    rep = json.load(open(os.path.join(tmp, n + ".json")))
    met = open(os.path.join(tmp, n + ".metrics")).read()
    r = rep["runs"][0]
    moved = metric("strata:kv_peer_read_blocks_total", met)
    gb = metric("strata:kv_peer_read_bytes_total", met) / 1e9
    secs = metric("strata:kv_peer_get_seconds_sum", met)
    # The round trips that brought blocks: the reads' time less their waits for the prefill.
    xfer = metric("strata:kv_peer_transfer_seconds_total", met)
    rate = f"{gb / xfer:.2f} ({gb / xfer / (best / 1e9):.2f})" if xfer > 0 else "--"
    region = metric("strata:kv_peer_region_read_blocks_total", met)
    runs[n] = {"report": rep, "peer_read_blocks": moved, "peer_read_gb": gb,
               "peer_get_seconds": secs, "peer_transfer_seconds": xfer,
               "peer_region_read_blocks": region,
               "peer_region_reused": metric("strata:kv_peer_region_reused_total", met),
               "peer_faults": metric("strata:kv_peer_faults_total", met)}
    print(f"| {n} | {r['output_tokens_per_s']:.1f} | {r['ttft_s']['p50']:.3f} / "
          f"{r['ttft_s']['p99']:.3f} | {1e3 * r['inter_token_latency_s']['p50']:.1f} / "
          f"{1e3 * r['inter_token_latency_s']['p99']:.1f} | {r['e2e_latency_s']['p99']:.2f} | "
          f"{int(moved)} | {gb:.3f} | {secs:.2f} / {xfer:.2f} | {rate} |")
for n in names:
    if runs[n]["peer_region_read_blocks"] > 0:
        print(f"{n}: {int(runs[n]['peer_region_read_blocks'])} of {int(runs[n]['peer_read_blocks'])} "
              f"blocks out of the region, {int(runs[n]['peer_region_reused'])} slots reused "
              f"mid-copy, {int(runs[n]['peer_faults'])} faults")
print(f"memcpy on this machine (one core): {best / 1e9:.1f} GB/s")
json.dump({"memcpy_gb_per_s": best / 1e9, "runs": runs}, open(out, "w"), indent=1)
PY
