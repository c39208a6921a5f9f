#!/usr/bin/env bash
# check_gpu_run_current.sh: fails when the CUDA code at HEAD -- the kernels (src/kernels/cuda) and
# the GPU model runner (src/model/cuda) -- is not what the last GPU run tested. docs/gpu-runs.md
# (written by tools/gpu/gpu_check.sh report) records the tree hash of each folder that was built; the
# check compares them with `git rev-parse HEAD:<folder>`. Tree hashes depend on content only, so a run made on
# uncommitted kernels still matches once they are committed unchanged, whatever the commit.
# CI runs this; exit 0 = current, 1 = stale or missing record.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RECORD="$ROOT/docs/gpu-runs.md"

if [ ! -f "$RECORD" ]; then
  echo "check_gpu_run_current: $RECORD is missing; run tools/gpu/gpu_check.sh on an H200 GPU" >&2
  exit 1
fi
commit="$(sed -n 's/^- commit built on: `\([0-9a-f]\{40\}\)`.*/\1/p' "$RECORD" | head -n 1)"
status=0
# check FOLDER RECORD_KEY: the folder's tree at HEAD against the recorded one.
check() {
  local folder="$1" key="$2" current recorded
  if ! current="$(git -C "$ROOT" rev-parse --verify --quiet "HEAD:$folder")"; then
    echo "check_gpu_run_current: no $folder at HEAD; nothing to check"
    return 0
  fi
  recorded="$(sed -n "s/^- $key: \`\([0-9a-f]\{40\}\)\`.*/\1/p" "$RECORD" | head -n 1)"
  if [ -z "$recorded" ]; then
    echo "check_gpu_run_current: no $key line in $RECORD" >&2
    status=1
    return 0
  fi
  if [ "$recorded" = "$current" ]; then
    echo "check_gpu_run_current: ok, $folder ($current) was tested on the GPU (built on ${commit:-?})"
    return 0
  fi
  echo "check_gpu_run_current: $folder changed since the last GPU run" >&2
  echo "  tested tree $recorded (built on commit ${commit:-?}), HEAD has $current" >&2
  if [ -n "$commit" ] && git -C "$ROOT" cat-file -e "$commit^{commit}" 2>/dev/null; then
    git -C "$ROOT" diff --stat "$commit" HEAD -- "$folder" >&2 || true
  fi
  echo "  run tools/gpu/gpu_check.sh (build, run on an H200 GPU, report) and commit docs/gpu-runs.md" >&2
  status=1
}
check src/kernels/cuda kernels_tree
check src/model/cuda model_cuda_tree
exit "$status"
