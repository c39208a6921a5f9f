#!/usr/bin/env bash
# Installs dependencies, builds and runs every test stage; prints each stage's time and fails if
# the whole run passes STRATA_TEST_BUDGET_S (default 4800 s: CI stops a run at 90 minutes, and this
# fails it first, with every stage's time printed; the aim is 30 minutes). This is what .ci/run
# executes.
#
# Stages: release build (gcc; CUDA compiled when nvcc exists) and its tests (GPU tests skip
# without a device); clang ASan+UBSan build with the libFuzzer targets, its tests without the
# `slow` label, and each fuzzer for STRATA_FUZZ_SECONDS; the API boundary check
# (scripts/check_api_boundary.sh); clang-tidy on src/core, src/kv, src/engine; the check that
# docs/gpu-runs.md covers the current CUDA sources.
set -euo pipefail
cd "$(dirname "$0")/.."

budget_s=${STRATA_TEST_BUDGET_S:-4800}
fuzz_s=${STRATA_FUZZ_SECONDS:-10}
jobs=${STRATA_JOBS:-$(nproc)}
start=$(date +%s)
stage_start=$start

stage() {
  local now; now=$(date +%s)
  if [[ -n "${current_stage:-}" ]]; then
    printf '== stage %-28s %5d s\n' "$current_stage" $((now - stage_start))
  fi
  if ((now - start > budget_s)); then
    echo "test.sh: over the ${budget_s} s budget after stage '${current_stage}'" >&2
    exit 1
  fi
  current_stage=$1
  stage_start=$now
  [[ "$1" == done ]] || echo "== stage $1"
}

stage install
bash scripts/install_deps.sh

stage release-build
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"

stage release-tests
ctest --preset release -j "$jobs"

stage asan-build
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"

stage asan-tests
ctest --preset asan -j "$jobs"

stage fuzz
# Each fuzzer is one single-threaded process: $jobs of them run at a time, each for fuzz_s
# seconds, their last lines printed in order; any crash fails the stage.
fuzz_one() {
  local fuzzer=$1 name scratch dict=()
  name=$(basename "$fuzzer" _fuzz)
  scratch=$(mktemp -d)  # first corpus folder: libFuzzer writes new inputs there, not into fuzz/
  [[ -f "fuzz/${name}.dict" ]] && dict=(-dict="fuzz/${name}.dict")
  local rc=0 out
  out=$(mktemp)
  "$fuzzer" -max_total_time="$fuzz_s" -artifact_prefix="$scratch/" "${dict[@]}" "$scratch" \
    "fuzz/corpus/${name}" >"$out" 2>&1 || rc=$?
  if ((rc == 0)); then
    tail -n 2 "$out"
  else
    # The whole report, and the input that failed, so that a CI log alone reproduces it.
    tail -n 80 "$out"
    for artifact in "$scratch"/crash-* "$scratch"/leak-* "$scratch"/oom-* "$scratch"/timeout-*; do
      [[ -f "$artifact" ]] || continue
      echo "failing input $(basename "$artifact") ($(wc -c <"$artifact") bytes), base64:"
      head -c 65536 "$artifact" | base64 -w 0
      echo
    done
  fi
  rm -rf "$scratch" "$out"
  return "$rc"
}
fuzzers=()
for fuzzer in build/asan/fuzz/*_fuzz; do
  [[ -x "$fuzzer" ]] && fuzzers+=("$fuzzer")
done
fuzz_failed=0
for ((i = 0; i < ${#fuzzers[@]}; i += jobs)); do
  batch=("${fuzzers[@]:i:jobs}")
  pids=()
  logs=()
  for fuzzer in "${batch[@]}"; do
    log=$(mktemp)
    fuzz_one "$fuzzer" >"$log" 2>&1 &
    pids+=($!)
    logs+=("$log")
  done
  for k in "${!batch[@]}"; do
    rc=0
    wait "${pids[$k]}" || rc=$?
    echo "fuzzing $(basename "${batch[$k]}" _fuzz) for ${fuzz_s} s (exit ${rc})"
    cat "${logs[$k]}"
    rm -f "${logs[$k]}"
    ((rc == 0)) || fuzz_failed=1
  done
done
((fuzz_failed == 0)) || { echo "test.sh: a fuzzer failed" >&2; exit 1; }

stage api-boundary
scripts/check_api_boundary.sh

stage clang-tidy
# clang-tidy needs each file's own compile command, and the ASan build's database holds the unity
# batches instead: an unbatched copy of its configuration (configured, never built) gives them.
cmake --preset asan -B build/tidy -DSTRATA_UNITY_BUILD=OFF >/dev/null
mapfile -t tidy_files < <(git ls-files 'src/core/*.cc' 'src/kv/*.cc' 'src/engine/*.cc')
for f in "${tidy_files[@]}"; do
  grep -qF "\"file\": \"$(pwd)/$f\"" build/tidy/compile_commands.json ||
    { echo "test.sh: no compile command for $f: clang-tidy would skip it" >&2; exit 1; }
done
# Internal headers are reached through each folder's include root (build/tidy/strata_modules,
# links to src/), public ones through include/.
run-clang-tidy -quiet -p build/tidy -j "$jobs" \
  -header-filter="$(pwd)/(src|include|build/tidy/strata_modules)/.*" "${tidy_files[@]}" \
  >build/tidy/clang-tidy.log 2>&1 || { tail -n 60 build/tidy/clang-tidy.log; exit 1; }
echo "clang-tidy: ${#tidy_files[@]} files clean"

stage gpu-run-record
if [[ -x tools/gpu/check_gpu_run_current.sh ]]; then
  tools/gpu/check_gpu_run_current.sh
fi

stage done
echo "test.sh: all stages passed in $(( $(date +%s) - start )) s"
