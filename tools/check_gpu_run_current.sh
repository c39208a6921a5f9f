#!/usr/bin/env bash
# check_gpu_run_current.sh: fails when the CUDA kernels (src/kernels/cuda) at HEAD are not the ones
# the last GPU run tested. docs/gpu-runs.md (written by tools/gpu_check.sh report) records the tree
# hash of src/kernels/cuda that was built; the check compares it with
# `git rev-parse HEAD:src/kernels/cuda`. Tree hashes depend on content only, so a run made on
# uncommitted kernels still matches once they are committed unchanged, whatever the commit.
# CI runs this; exit 0 = current, 1 = stale or missing record.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RECORD="$ROOT/docs/gpu-runs.md"

if ! current="$(git -C "$ROOT" rev-parse --verify --quiet HEAD:src/kernels/cuda)"; then
  echo "check_gpu_run_current: no src/kernels/cuda at HEAD; nothing to check"
  exit 0
fi
if [ ! -f "$RECORD" ]; then
  echo "check_gpu_run_current: $RECORD is missing; run tools/gpu_check.sh on an H200 GPU" >&2
  exit 1
fi
recorded="$(sed -n 's/^- kernels_tree: `\([0-9a-f]\{40\}\)`.*/\1/p' "$RECORD" | head -n 1)"
commit="$(sed -n 's/^- commit built on: `\([0-9a-f]\{40\}\)`.*/\1/p' "$RECORD" | head -n 1)"
if [ -z "$recorded" ]; then
  echo "check_gpu_run_current: no kernels_tree line in $RECORD" >&2
  exit 1
fi
if [ "$recorded" = "$current" ]; then
  echo "check_gpu_run_current: ok, src/kernels/cuda ($current) was tested on the GPU (built on ${commit:-?})"
  exit 0
fi
echo "check_gpu_run_current: src/kernels/cuda changed since the last GPU run" >&2
echo "  tested tree $recorded (built on commit ${commit:-?}), HEAD has $current" >&2
if [ -n "$commit" ] && git -C "$ROOT" cat-file -e "$commit^{commit}" 2>/dev/null; then
  git -C "$ROOT" diff --stat "$commit" HEAD -- src/kernels/cuda >&2 || true
fi
echo "  run tools/gpu_check.sh (build, run on an H200 GPU, report) and commit docs/gpu-runs.md" >&2
exit 1
