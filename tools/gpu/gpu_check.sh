#!/usr/bin/env bash
# gpu_check.sh: build, run and record the CUDA kernels' tests, sanitizer runs and benchmarks.
#
#   tools/gpu/gpu_check.sh build            on the CPU machine (nvcc, no GPU needed): builds the
#                                           CUDA test and benchmark binaries (Release, sm_90a,
#                                           GoogleTest and libstdc++ linked statically) into
#                                           .devcarry/gpu/, with the commit and the src/kernels/cuda
#                                           tree hash they came from; then the GPU engine: the
#                                           `strata` CLI and the GPU model test from a full build of
#                                           the tree, with the Debian shared libraries they use
#                                           copied beside them (bin/lib)
#   tools/gpu/gpu_check.sh run OUT_DIR      on the GPU machine, from the repository root with
#                                           .devcarry/gpu-pack (the packed binaries) copied there,
#                                           or one of its halves (gpu-pack-kernels, gpu-pack-engine)
#                                           (nothing else is needed): runs the kernel tests, the GPU
#                                           model test (bf16 fixtures), the decode and prefill
#                                           benchmarks, the MLA decode kernel's tests and
#                                           benchmark, the PyTorch comparison, the KV codec's GPU
#                                           encoder and decoder, a reduced filter of
#                                           the tests under compute-sanitizer memcheck and
#                                           racecheck, and the GPU engine benchmarks beside
#                                           transformers (tools/gpu/gpu_engine_bench.sh); writes at
#                                           most eight files (logs, JSON) under OUT_DIR
#   tools/gpu/gpu_check.sh report RUN_DIR   on the CPU machine: turns RUN_DIR (the files "run"
#                                           wrote) into docs/gpu-runs.md (figures for
#                                           docs/benchmarks.md); RUN_DIR/note.md, if there, follows
#                                           the steps table (how a record joined from several calls
#                                           was put together)
#
# GPU_CHECK_STEPS picks the run's steps (default: all of tests bench prefill ops tensor_cores torch
# kvquant codec mla moe engine_tests engine_bench memcheck racecheck), so a run fits the GPU machine's 10-minute
# calls; the record (docs/gpu-runs.md) merges what the runs of one build measured.
# GPU_CHECK_JOBS sets the build's parallelism (default 1); GPU_CHECK_SANITIZER_FILTER the tests
# run under the sanitizers.
#
# The test binaries are run directly, not through ctest: ctest files hold absolute build paths.
# The build uses a small CMake project of its own (written into .devcarry/gpu/project) that pulls
# in src/core, src/kv, src/kernels/cuda, tests/kernels/cuda and bench/cuda, so it does not depend
# on the rest of the tree configuring.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CARRY="$ROOT/.devcarry/gpu"
JOBS="${GPU_CHECK_JOBS:-1}"

# Tree hash of src/kernels/cuda as it is in the working tree (uncommitted edits included): equal
# to `git rev-parse HEAD:src/kernels/cuda` once those files are committed unchanged.
tree_hash() {
  local idx
  idx="$(mktemp)"
  rm -f "$idx"
  cp "$ROOT/.git/index" "$idx" 2>/dev/null || true
  GIT_INDEX_FILE="$idx" git -C "$ROOT" add -A "$1" >/dev/null
  GIT_INDEX_FILE="$idx" git -C "$ROOT" write-tree --prefix="$1/"
  rm -f "$idx"
}
kernels_tree_hash() { tree_hash src/kernels/cuda; }
# The GPU model runner (src/model/cuda): recorded beside the kernels, checked the same way.
model_cuda_tree_hash() { tree_hash src/model/cuda; }

# The GPU engine: a full Release build of the tree with CUDA, libstdc++ and libgcc static; the
# Debian shared libraries `strata` links (OpenSSL, PCRE2, utf8proc, cpp-httplib, zlib, brotli)
# are copied to bin/lib, since the GPU machine's image may not have these versions (its newer
# libstdc++ and libgcc_s serve cpp-httplib's needs).
build_engine() {
  cmake -S "$ROOT" -B "$CARRY/engine-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
    -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
  ninja -C "$CARRY/engine-build" -j "$JOBS" strata model_cuda_model_test model_cuda_kv_quant_test \
    model_cuda_fp8_weights_test model_cuda_moe_model_test engine_cuda_engine_test strata_tier_copy_bench \
    strata_remote_tier_bench
  cp "$CARRY/engine-build/tools/strata/strata" "$CARRY/engine-build/bench/strata_tier_copy_bench" \
    "$CARRY/engine-build/bench/strata_remote_tier_bench" "$CARRY/engine-build/tests/model/model_cuda_model_test" \
    "$CARRY/engine-build/tests/model/model_cuda_kv_quant_test" \
    "$CARRY/engine-build/tests/model/model_cuda_fp8_weights_test" \
    "$CARRY/engine-build/tests/model/model_cuda_moe_model_test" \
    "$CARRY/engine-build/tests/engine/engine_cuda_engine_test" "$CARRY/bin/"
  mkdir -p "$CARRY/bin/lib"
  ldd "$CARRY/bin/strata" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcublas[^/]*|libcublasLt[^/]*|libstdc\+\+|libgcc_s)\.so' |
    xargs -r -I{} cp -L {} "$CARRY/bin/lib/"
  # UCX loads transports as modules from ucx/ beside libucs: cma, the one two instances on one
  # host read each other's blocks with (disaggregation), travels too.
  local ucx_modules
  ucx_modules="$(dirname "$(ldd "$CARRY/bin/strata" | awk '$1 ~ /^libucs\.so/ {print $3}')")/ucx"
  if [ -f "$ucx_modules/libuct_cma.so.0" ]; then
    mkdir -p "$CARRY/bin/lib/ucx"
    cp -L "$ucx_modules/libuct_cma.so.0" "$CARRY/bin/lib/ucx/"
  fi
  cp "$ROOT/tools/gpu/bench_gpu_peers.py" "$ROOT/tools/gpu/gpu_engine_bench.sh" \
    "$ROOT/tools/gpu/gpu_kv_quant_bench.sh" "$ROOT/tools/gpu/gpu_fp8_bench.sh" "$CARRY/bin/"
  pack_redis
}

# Debian's redis-server for the remote tier's runs (tools/gpu/gpu_kv_remote_pool.sh): the binary,
# the shared libraries it links in bin/redis/lib (apart from bin/lib, so that they never stand in
# for the GPU machine's own in other programs), and bin/redis/redis-server, which runs it with
# them.
pack_redis() {
  local dir="$CARRY/bin/redis" tool
  mkdir -p "$dir/lib"
  for tool in redis-server redis-cli redis-benchmark; do
    cp -L "/usr/bin/$tool" "$dir/$tool.bin"
    ldd "/usr/bin/$tool" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
      grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
      xargs -r -I{} cp -L {} "$dir/lib/"
    printf '%s\n' '#!/usr/bin/env bash' 'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"' \
      "LD_LIBRARY_PATH=\"\$here/lib\" exec -a $tool \"\$here/$tool.bin\" \"\$@\"" >"$dir/$tool"
    chmod +x "$dir/$tool"
  done
}

write_project() {
  mkdir -p "$CARRY/project"
  cat >"$CARRY/project/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.25)
project(strata_gpu_check LANGUAGES C CXX)
set(STRATA_ROOT "$ROOT")
# The included CMakeLists refer to the Strata root as PROJECT_SOURCE_DIR.
set(PROJECT_SOURCE_DIR \${STRATA_ROOT})
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(STRATA_CUDA ON)
include(\${STRATA_ROOT}/cmake/strata_cuda.cmake)
include(\${STRATA_ROOT}/cmake/strata_defaults.cmake)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)  # strata_core's JSON entry point (header-only)
# Everything but the CUDA driver and glibc linked statically, so the binaries run on the GPU
# machine's image.
add_link_options(-static-libstdc++ -static-libgcc)
add_library(GTest::gtest STATIC IMPORTED)
set_target_properties(GTest::gtest PROPERTIES
  IMPORTED_LOCATION /usr/lib/x86_64-linux-gnu/libgtest.a
  INTERFACE_INCLUDE_DIRECTORIES /usr/include
  INTERFACE_LINK_LIBRARIES Threads::Threads)
add_library(GTest::gtest_main STATIC IMPORTED)
set_target_properties(GTest::gtest_main PROPERTIES
  IMPORTED_LOCATION /usr/lib/x86_64-linux-gnu/libgtest_main.a
  INTERFACE_LINK_LIBRARIES GTest::gtest)
function(strata_add_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" \${ARGN})
  add_executable(\${name} \${ARG_SOURCES})
  strata_target_defaults(\${name})
  target_link_libraries(\${name} PRIVATE \${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(\${name} PRIVATE STRATA_TEST_DATA_DIR="\${STRATA_ROOT}/tests/data")
endfunction()
add_subdirectory(\${STRATA_ROOT}/src/core core)
add_subdirectory(\${STRATA_ROOT}/src/kv kv)
add_subdirectory(\${STRATA_ROOT}/src/kernels/cpu kernels_cpu)
add_subdirectory(\${STRATA_ROOT}/src/kernels/cuda kernels_cuda)
add_subdirectory(\${STRATA_ROOT}/tests/kernels/cuda tests_kernels_cuda)
add_subdirectory(\${STRATA_ROOT}/bench/cuda bench_cuda)
EOF
}

cmd_build() {
  write_project
  # Every instance, head dims 96 and 256 included, is built and tested on the GPU.
  cmake -S "$CARRY/project" -B "$CARRY/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSTRATA_CUDA_EXTRA_HEAD_DIMS=ON >/dev/null
  ninja -C "$CARRY/build" -j "$JOBS" strata_kernels_cuda_test strata_decode_bench strata_prefill_bench \
    strata_model_ops_bench strata_tensor_core_bench strata_kv_codec_split_bench strata_mla_decode_bench \
    strata_moe_bench
  mkdir -p "$CARRY/bin"
  cp "$CARRY/build/tests_kernels_cuda/strata_kernels_cuda_test" "$CARRY/bin/"
  cp "$CARRY/build/bench_cuda/strata_decode_bench" "$CARRY/build/bench_cuda/strata_prefill_bench" \
    "$CARRY/build/bench_cuda/strata_model_ops_bench" "$CARRY/build/bench_cuda/strata_tensor_core_bench" \
    "$CARRY/build/bench_cuda/strata_kv_codec_split_bench" "$CARRY/build/bench_cuda/strata_mla_decode_bench" \
    "$CARRY/build/bench_cuda/strata_moe_bench" "$CARRY/bin/"
  cp "$ROOT/tools/gpu/bench_decode_torch.py" "$CARRY/bin/"
  build_engine
  local gpu_paths=(src/kernels/cuda tests/kernels/cuda bench/cuda src/model/cuda tests/model)
  {
    echo "commit=$(git -C "$ROOT" rev-parse HEAD)"
    echo "root=$ROOT"
    echo "kernels_tree=$(kernels_tree_hash)"
    echo "model_cuda_tree=$(model_cuda_tree_hash)"
    if git -C "$ROOT" diff --quiet HEAD -- "${gpu_paths[@]}" &&
       [ -z "$(git -C "$ROOT" ls-files --others --exclude-standard "${gpu_paths[@]}")" ]; then
      echo "dirty=no"
    else
      echo "dirty=yes"
    fi
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nvcc=$(/usr/local/cuda/bin/nvcc --version | tail -1)"
  } >"$CARRY/bin/build-info.txt"
  # The binaries carry CUDA fat binaries; with the tree they exceed what one call to the GPU
  # machine may upload, so they travel stripped and xz-packed. Every test and bench binary holds
  # the same kernels: a dictionary larger than the tar lets xz store them once (14 MB against
  # 35 MB with -6's 8 MiB), which leaves room beside the tree for a second build to compare with.
  strip "$CARRY/bin/strata" "$CARRY/bin/model_cuda_model_test" "$CARRY/bin/model_cuda_kv_quant_test" \
    "$CARRY/bin/model_cuda_fp8_weights_test" "$CARRY/bin/model_cuda_moe_model_test" \
    "$CARRY/bin/engine_cuda_engine_test" \
    "$CARRY/bin/strata_kernels_cuda_test" "$CARRY/bin/strata_decode_bench" "$CARRY/bin/strata_prefill_bench" \
    "$CARRY/bin/strata_model_ops_bench" "$CARRY/bin/strata_tensor_core_bench" \
    "$CARRY/bin/strata_kv_codec_split_bench" "$CARRY/bin/strata_mla_decode_bench" "$CARRY/bin/strata_moe_bench"
  mkdir -p "$ROOT/.devcarry/gpu-pack"
  tar cf - -C "$CARRY" bin | xz -T2 --lzma2=preset=6,dict=512MiB >"$ROOT/.devcarry/gpu-pack/bin.tar.xz"
  # The same build in two halves, for calls where the tree and the whole pack together exceed
  # what one call may upload: the kernels' test and benchmarks (the steps tests, bench, prefill,
  # ops, tensor_cores, torch, kvquant, codec, mla, moe, memcheck, racecheck), and the rest (the
  # engine's steps). `run` unpacks whichever of the three it finds.
  local kernel_files=(build-info.txt strata_kernels_cuda_test strata_decode_bench strata_prefill_bench
    strata_model_ops_bench strata_tensor_core_bench strata_kv_codec_split_bench
    strata_mla_decode_bench strata_moe_bench bench_decode_torch.py)
  local engine_files
  mapfile -t engine_files < <(cd "$CARRY/bin" && ls -A | grep -v -x -F -f <(printf '%s\n' "${kernel_files[@]:1}"))
  mkdir -p "$ROOT/.devcarry/gpu-pack-kernels" "$ROOT/.devcarry/gpu-pack-engine"
  tar cf - -C "$CARRY" "${kernel_files[@]/#/bin/}" |
    xz -T2 --lzma2=preset=6,dict=512MiB >"$ROOT/.devcarry/gpu-pack-kernels/bin.tar.xz"
  tar cf - -C "$CARRY" "${engine_files[@]/#/bin/}" |
    xz -T2 --lzma2=preset=6,dict=512MiB >"$ROOT/.devcarry/gpu-pack-engine/bin.tar.xz"
  du -sh "$CARRY/bin" "$ROOT"/.devcarry/gpu-pack{,-kernels,-engine}/bin.tar.xz
  cat "$CARRY/bin/build-info.txt"
}

# Runs a step under a time limit, keeping its exit status in OUT/status.txt and appending its
# output, after a "### NAME" line, to OUT/LOG.log.
step() {
  local name="$1" log="$2" limit="$3"
  shift 3
  case " ${GPU_CHECK_STEPS:-tests bench prefill ops tensor_cores torch kvquant codec mla moe engine_tests engine_bench memcheck racecheck} " in
    *" $name "*) ;;
    *) return 0 ;;
  esac
  local rc=0
  local t0
  t0=$(date +%s)
  echo "### $name" >>"$OUT/$log.log"
  timeout "$limit" "$@" >>"$OUT/$log.log" 2>&1 || rc=$?
  echo "step $name rc=$rc seconds=$(( $(date +%s) - t0 ))" | tee -a "$OUT/status.txt"
}

cmd_run() {
  OUT="$1"
  mkdir -p "$OUT"
  export PATH="/usr/local/cuda/bin:$PATH"
  local bin="$ROOT/.devcarry/gpu/bin"
  local pack
  for pack in gpu-pack gpu-pack-kernels gpu-pack-engine; do
    if [ -f "$ROOT/.devcarry/$pack/bin.tar.xz" ]; then
      mkdir -p "$ROOT/.devcarry/gpu"
      tar xJf "$ROOT/.devcarry/$pack/bin.tar.xz" -C "$ROOT/.devcarry/gpu"
    fi
  done
  # Seven files in all: build info and step results share one, the sanitizer runs another.
  cp "$bin/build-info.txt" "$OUT/status.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv \
    >>"$OUT/status.txt" 2>&1 || true
  # Most important first: the tests, then the numbers, then the (slow) sanitizer runs.
  step tests tests "${GPU_CHECK_TEST_LIMIT:-300}" "$bin/strata_kernels_cuda_test" --gtest_brief=1
  step bench bench 100 "$bin/strata_decode_bench" --json "$OUT/bench.json"
  # BF16 under every schedule of the warp-specialized kernel (docs/kernels.md; the bench checks
  # they agree bit for bit), then the quantized caches under the default one.
  step prefill bench 240 bash -c '"$1/strata_prefill_bench" --variant all --kv-dtypes bf16 &&
    "$1/strata_prefill_bench" --kv-dtypes fp8_e4m3,fp8_e5m2,int8,int4' _ "$bin"
  step ops bench 120 "$bin/strata_model_ops_bench"
  # The tensor cores' instruction paths (mma.sync, wgmma; 16-bit against e4m3) and the wgmma
  # layout check (bench/cuda/tensor_core_bench.cu).
  step tensor_cores bench 60 "$bin/strata_tensor_core_bench"
  # At most eight files come back from the GPU machine: the torch and quantized-KV steps log into
  # bench.log, the latter with its JSON on one "kvq-json: " line.
  step torch bench 150 env PYTHONUNBUFFERED=1 python3 "$bin/bench_decode_torch.py" --json "$OUT/torch.json"
  # Quantized KV (issue 11): decode attention over FP8 / INT8 / INT4 caches beside BF16's time.
  step kvquant bench 180 bash -c '"$1/strata_decode_bench" --block-size 16 --no-sweep \
    --kv-dtypes bf16,fp8_e4m3,fp8_e5m2,int8,int4 --json /tmp/kvq.json &&
    echo "kvq-json: $(tr -d "\n" </tmp/kvq.json)"' _ "$bin"
  # The KV codec's split scheme on the GPU (docs/kv-codec.md, "On the GPU"): encode and decode of
  # 256 Llama-3.1-8B blocks against a device-to-device copy, its JSON on one "codec-json: " line.
  step codec bench 120 bash -c '"$1/strata_kv_codec_split_bench" --json /tmp/codec.json &&
    echo "codec-json: $(tr -d "\n" </tmp/codec.json)"' _ "$bin"
  # MLA decode over the paged latent (docs/kernels.md, "MLA decode attention"): its tests (also in
  # the tests step) verbose, then heads 16 and 128 against the copy bandwidth, JSON on one
  # "mla-json: " line.
  step mla bench 240 bash -c 'STRATA_MLA_TEST_VERBOSE=1 "$1/strata_kernels_cuda_test" \
    --gtest_filter="MlaDecode*" --gtest_brief=1; a=$?; "$1/strata_mla_decode_bench" --json /tmp/mla.json &&
    echo "mla-json: $(tr -d "\n" </tmp/mla.json)"; exit $((a | $?))' _ "$bin"
  # The MoE layer (docs/kernels.md, "MoE layer"): its tests (also in the tests step), then the
  # layer at Mixtral / Qwen3-MoE / DeepSeek-V2-Lite shapes against the dense GEMM and the copy,
  # JSON on one "moe-json: " line.
  step moe bench 240 bash -c '"$1/strata_kernels_cuda_test" --gtest_filter="Moe*" --gtest_brief=1; a=$?;
    "$1/strata_moe_bench" --json /tmp/moe.json && echo "moe-json: $(tr -d "\n" </tmp/moe.json)";
    exit $((a | $?))' _ "$bin"
  # The GPU engine. The model test reads its fixtures from the path compiled in on the CPU
  # machine (the checkout it was built in, ROOT/tests/data): point that path at this checkout.
  export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  local built_root
  built_root="$(sed -n 's/^root=//p' "$bin/build-info.txt")"
  if [ -n "$built_root" ] && [ ! -e "$built_root" ]; then
    mkdir -p "$(dirname "$built_root")" && ln -s "$ROOT" "$built_root"
  fi
  step engine_tests engine "${GPU_CHECK_ENGINE_TEST_LIMIT:-240}" \
    bash -c '"$1/model_cuda_model_test" --gtest_brief=1; a=$?; "$1/model_cuda_kv_quant_test" --gtest_brief=1; b=$?; "$1/engine_cuda_engine_test" --gtest_brief=1; c=$?; "$1/model_cuda_fp8_weights_test"; d=$?; "$1/model_cuda_moe_model_test" --gtest_brief=1; e=$?; bash tests/tools/generate_device_test.sh gpu "$1/strata" tests/data; exit $((a | b | c | d | e | $?))' _ "$bin"
  step engine_bench engine "${GPU_CHECK_ENGINE_BENCH_LIMIT:-420}" bash "$bin/gpu_engine_bench.sh" "$bin" "$OUT/engine.json"
  # Issue 41's FP8 weights end to end, BF16 and FP8 in one call (about 2 minutes): not in the
  # default steps; GPU_CHECK_STEPS=fp8_weights.
  step fp8_weights engine 300 bash "$bin/gpu_fp8_bench.sh" "$bin" "$OUT/fp8_engine.json"
  # Structured outputs, 64 constrained requests against unconstrained (about 3 minutes): not in
  # the default steps; GPU_CHECK_STEPS=structured, with Llama 3.1's tokenizer carried as
  # .devcarry/tokenizers/llama3_1.tar.xz (tests/data/tokenizers is fetched by install_deps, not
  # tracked; `tar cJf` of that folder, 1.6 MB against its 8.8).
  local tok="$ROOT/.devcarry/tokenizers"
  if [ -f "$tok/llama3_1.tar.xz" ] && [ ! -d "$tok/llama3_1" ]; then
    tar xJf "$tok/llama3_1.tar.xz" -C "$tok"
  fi
  step structured engine 400 bash "$ROOT/tools/gpu/gpu_structured_bench.sh" "$bin" \
    "$tok/llama3_1" "$OUT/structured.json"
  # Disaggregation through CUDA IPC, two processes on this GPU (tools/gpu/gpu_disaggregation_check.sh,
  # about a minute): a prefill and a decode instance against a colocated one. Not in the
  # default steps; GPU_CHECK_STEPS=disagg_ipc. The two-process CUDA IPC region test itself
  # (CudaPeerRegionTest) runs in engine_tests.
  step disagg_ipc engine 240 bash "$ROOT/tools/gpu/gpu_disaggregation_check.sh" "$bin"
  # Issue 11 end to end (about 7 minutes): not in the default steps; GPU_CHECK_STEPS=kvquant_e2e.
  step kvquant_e2e engine 570 bash "$bin/gpu_kv_quant_bench.sh" "$bin" "$OUT/kvq_engine.json"
  # Two builds of the engine on the same workloads, alternating (tools/gpu/gpu_ab_bench.sh; about
  # 5 minutes): the build in .devcarry/gpu-pack-before against this one. Not in the default
  # steps; GPU_CHECK_STEPS=ab.
  if [ -f "$ROOT/.devcarry/gpu-pack-before/bin.tar.xz" ] && [ ! -d "$ROOT/.devcarry/gpu-before/bin" ]; then
    mkdir -p "$ROOT/.devcarry/gpu-before"
    tar xJf "$ROOT/.devcarry/gpu-pack-before/bin.tar.xz" -C "$ROOT/.devcarry/gpu-before"
  fi
  step ab engine 570 bash "$ROOT/tools/gpu/gpu_ab_bench.sh" "$ROOT/.devcarry/gpu-before/bin" "$bin" \
    "$OUT/ab.json"
  # The sanitizers slow kernels by 10-100x: run the small configurations only (MLA decode: its
  # merge paths, padded rows and small blocks, at a few hundred tokens). Racecheck also
  # runs the quantized prefill sweep, whose producer hands code stages between its threads and
  # the bulk copies (every code dtype, both head dims).
  local filter="${GPU_CHECK_SANITIZER_FILTER:-*Small*:*Append*:*BlockCopy*:*Mass*:*Window*:*KvCodecSplitCorrupt*:MlaDecodeTest.BothMergePaths:MlaDecodeTest.SharpSoftmax:MlaDecodeTest.PaddedLatentRowsAndSmallBlocks:MoePermuteTest.*:MoeRouteTest.TiesGoToTheLowerExpertId:MoeLayerTest.ReplaysFromAGraphForANewRouting}"
  step memcheck sanitizer 120 compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$bin/strata_kernels_cuda_test" --gtest_brief=1 --gtest_filter="$filter"
  step racecheck sanitizer 200 compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$bin/strata_kernels_cuda_test" --gtest_brief=1 \
    --gtest_filter="$filter:PrefillAttentionTest.SweepQuantized*"
  cat "$OUT/status.txt"
  tail -n 40 "$OUT/tests.log"
  tail -n 20 "$OUT/engine.log" 2>/dev/null || true
  grep -E "^###|PASSED|FAILED|SUMMARY" "$OUT/sanitizer.log" 2>/dev/null || true
  tail -n 24 "$OUT/bench.log" 2>/dev/null || true
  grep -v Warning "$OUT/bench.log" 2>/dev/null | grep -v "^  return\|^kvq-json\|^codec-json\|^mla-json\|^moe-json" | tail -n 30 || true
}

cmd_report() {
  local run="$1"
  python3 - "$run" "$ROOT/docs/gpu-runs.md" <<'PY'
import json, os, re, sys
run, dst = sys.argv[1], sys.argv[2]
def read(name):
    p = os.path.join(run, name)
    return open(p, encoding="utf-8", errors="replace").read() if os.path.exists(p) else ""
st = read("status.txt").splitlines()
info = dict(l.split("=", 1) for l in st if "=" in l and not l.startswith(("step ", "name")))
gpu = [l for l in st if "NVIDIA" in l]
status = dict((l.split()[1], l.split()[2].split("=")[1]) for l in st if l.startswith("step "))
def gtest_counts(log):
    passed = re.search(r"\[  PASSED  \] (\d+) test", log)
    failed = re.findall(r"\[  FAILED  \] (\S+)", log)
    skipped = re.search(r"\[  SKIPPED \] (\d+) test", log)
    return (int(passed.group(1)) if passed else 0, sorted(set(f for f in failed if "." in f)),
            int(skipped.group(1)) if skipped else 0)
def sanitizer(log):
    m = re.search(r"ERROR SUMMARY: (\d+) error", log)
    h = re.search(r"RACECHECK SUMMARY: (\d+) hazard", log)
    parts = []
    if m: parts.append(f"{m.group(1)} errors")
    if h: parts.append(f"{h.group(1)} hazards")
    return ", ".join(parts) or "no summary"
lines = ["# GPU runs", "",
         "Written by `tools/gpu/gpu_check.sh report` from the files `tools/gpu/gpu_check.sh run` wrote on a",
         "Hopper GPU (the device line names it). `tools/gpu/check_gpu_run_current.sh` compares the tree hashes below with",
         "`git rev-parse HEAD:src/kernels/cuda` and `HEAD:src/model/cuda`: CI fails when the kernels",
         "or the GPU model runner changed after this run.", "",
         "## Latest run", "",
         f"- commit built on: `{info.get('commit', '?')}`" +
         (" (plus uncommitted kernel edits, recorded by tree hash)" if info.get("dirty") == "yes" else ""),
         f"- kernels_tree: `{info.get('kernels_tree', '?')}`",
         f"- model_cuda_tree: `{info.get('model_cuda_tree', '?')}`",
         f"- built: {info.get('built', '?')} with {info.get('nvcc', '?')}, sm_90a",
         f"- device: {gpu[0].strip() if gpu else 'one H200 GPU'}", ""]
p, f, s = gtest_counts(read("tests.log"))
lines += ["| step | exit | result |", "|---|---|---|"]
lines.append(f"| tests (`strata_kernels_cuda_test`) | {status.get('tests', '?')} | {p} passed, {len(f)} failed, {s} skipped |")
san = read("sanitizer.log").split("### ")
san_logs = {part.split("\n", 1)[0].strip(): part for part in san if part.strip()}
for name in ("memcheck", "racecheck"):
    log = san_logs.get(name, "")
    pp, ff, _ = gtest_counts(log)
    lines.append(f"| compute-sanitizer {name} (reduced filter) | {status.get(name, '?')} | {sanitizer(log)}; {pp} passed, {len(ff)} failed |")
eng = read("engine.log")
ep = [int(x) for x in re.findall(r"\[  PASSED  \] (\d+) test", eng)]
ef = sorted(set(x for x in re.findall(r"\[  FAILED  \] (\S+)", eng) if "." in x))
lines.append(f"| GPU engine tests (`model_cuda_model_test`, `model_cuda_kv_quant_test`, `engine_cuda_engine_test`, `model_cuda_fp8_weights_test`, `model_cuda_moe_model_test`) | {status.get('engine_tests', '?')} | {sum(ep)} passed, {len(ef)} failed |")
lines.append(f"| GPU engine benchmarks (`tools/gpu/gpu_engine_bench.sh`) | {status.get('engine_bench', '?')} | see below |")
f = f + ef
lines.append(f"| decode benchmark | {status.get('bench', '?')} | see below |")
lines.append(f"| prefill benchmark | {status.get('prefill', '?')} | see below |")
lines.append(f"| model ops and projections (`strata_model_ops_bench`) | {status.get('ops', '?')} | in the run's bench.log |")
if "tensor_cores" in status:
    lines.append(f"| tensor-core paths and the wgmma layout check (`strata_tensor_core_bench`) | {status['tensor_cores']} | in the run's bench.log |")
lines.append(f"| PyTorch SDPA comparison | {status.get('torch', '?')} | see below |")
lines.append(f"| quantized KV decode attention (`strata_decode_bench --kv-dtypes`) | {status.get('kvquant', '?')} | see below |")
if "codec" in status:
    lines.append(f"| KV codec split on the GPU (`strata_kv_codec_split_bench`) | {status['codec']} | see below |")
if "mla" in status:
    lines.append(f"| MLA decode tests and benchmark (`strata_mla_decode_bench`) | {status['mla']} | in the run's bench.log |")
if "moe" in status:
    lines.append(f"| MoE layer tests and benchmark (`strata_moe_bench`) | {status['moe']} | in the run's bench.log |")
if "kvquant_e2e" in status:
    lines.append(f"| quantized KV end to end (`tools/gpu/gpu_kv_quant_bench.sh`) | {status['kvquant_e2e']} | see below |")
if "fp8_weights" in status:
    lines.append(f"| FP8 weights end to end (`tools/gpu/gpu_fp8_bench.sh`) | {status['fp8_weights']} | see below |")
if f:
    lines += ["", "Failed tests: " + ", ".join(f"`{x}`" for x in f)]
# A record joined from several calls (or builds) says how in RUN_DIR/note.md, kept beside the
# files it describes, so that the next report does not lose it.
note = read("note.md").strip()
if note:
    lines += [""] + note.splitlines()
bench = json.loads(read("bench.json") or "{}")
torch = json.loads(read("torch.json") or "{}")
if bench:
    copy_bw = bench.get("copy_bandwidth_gbs", 0.0)
    sdpa = {(r["batch"], r["context"]): r for r in torch.get("results", [])}
    lines += ["", "## Decode attention benchmark", "",
              f"BF16, {bench.get('num_qo_heads')} query / {bench.get('num_kv_heads')} KV heads, head dim "
              f"{bench.get('head_dim')}; KV bytes read per second (median of event-timed runs). "
              f"Device-to-device copy: {copy_bw:.0f} GB/s (bytes read + written)"
              + (f"; PyTorch's copy in its run: {torch.get('copy_bandwidth_gbs', 0):.0f} GB/s." if torch else "."), "",
              "Copy bandwidth counts bytes read and written; the attention kernels only read. \"unsplit\" is",
              "the same kernel forced to one split per sequence; \"graph\" the planner's launch replayed from",
              "a CUDA graph, as a captured decode step runs it (an event pair around one short launch times",
              "the launch more than the kernel).", "",
              "| block size | batch x context | Strata us | Strata GB/s | unsplit us | graph us | SDPA us | SDPA GB/s | Strata / SDPA | Strata / copy | max abs err |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in bench.get("results", []):
        t = sdpa.get((r["batch"], r["context"]))
        sd_us = f"{t['median_us']:.1f}" if t else "-"
        sd_bw = f"{t['gbs']:.0f}" if t else "-"
        ratio = f"{r['gbs'] / t['gbs']:.2f}" if t else "-"
        graph_us = f"{r['graph_us']:.1f}" if "graph_us" in r else "-"
        lines.append(f"| {r['block_size']} | {r['batch']} x {r['context']} | {r['median_us']:.1f} | {r['gbs']:.0f} | "
                     f"{r.get('unsplit_us', 0):.1f} | {graph_us} | {sd_us} | {sd_bw} | {ratio} | {r['gbs'] / copy_bw:.2f} | {r['max_abs_err']:.2e} |")
pre = [l[6:] for l in read("bench.log").splitlines() if l.startswith("json: ")]
prefill = json.loads(pre[0]).get("cases", []) if pre else []
if prefill:
    sd = {(r["prefix"], r["chunk"]): r for r in torch.get("prefill", [])}
    mm = torch.get("matmul_tflops", 0.0)
    lines += ["", "## Prefill attention benchmark", "",
              "BF16, 32 query / 8 KV heads, head dim 128, block size 16, one sequence; causal TFLOP/s"
              + (f"; bf16 matrix product in the same run: {mm:.0f} TFLOP/s." if mm else "."), "",
              "| schedule | cached prefix | chunk | Strata us | Strata TFLOP/s | SDPA TFLOP/s | Strata / SDPA | Strata / matrix rate | max abs err |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in prefill:
        t = sd.get((r["prefix"], r["chunk"]))
        st = f"{t['tflops']:.0f} ({t['best_backend']})" if t and t.get("best_backend") else "-"
        ratio = f"{r['tflops'] / t['tflops']:.2f}" if t and t.get("best_backend") else "-"
        mm_ratio = f"{r['tflops'] / mm:.2f}" if mm else "-"
        lines.append(f"| {r.get('variant', 'default')} | {r['prefix']} | {r['chunk']} | {r['median_us']:.1f} | {r['tflops']:.1f} | {st} | {ratio} | {mm_ratio} | {r['max_abs_err']:.2e} |")
engine = json.loads(read("engine.json") or "{}")
if engine:
    peers = engine.get("peers", {})
    fl = peers.get("floors", {})
    bw, gemm = fl.get("copy_gbs", 0.0) * 1e9, fl.get("gemm_tflops", 0.0) * 1e12
    wb = peers.get("weight_bytes", 0)
    def engine_run(name):
        r = engine.get(name, {}).get("runs", [])
        return r[0] if r else {}
    lines += ["", "## GPU engine benchmarks", "",
              f"Llama-3.1-8B shape, dummy bf16 weights ({wb / 1e9:.2f} GB), greedy, EOS ignored. Floors in the same",
              f"call: copy bandwidth {bw / 1e9:.0f} GB/s, bf16 GEMM {gemm / 1e12:.0f} TFLOP/s; peer: transformers "
              f"{engine.get('peers', {}).get('transformers', '?')} on the same GPU.", "",
              "| benchmark | Strata | peer / floor | ratio |", "|---|---|---|---|"]
    off = engine_run("offline")
    po = peers.get("offline", {})
    if off and po:
        # Roofline: prefill FLOPs at the GEMM rate plus, per decode step, weights + the KV read.
        h = json.load(open("bench/models/llama-3.1-8b/config.json"))
        params = wb / 2
        n, lin, lout = 256, 512, 256
        kv_tok = 2 * h["num_hidden_layers"] * h["num_key_value_heads"] * h["head_dim"] * 2
        prefill_s = 2 * params * n * lin / gemm
        decode_s = sum((wb + n * (lin + t) * kv_tok) / bw for t in range(lout))
        roof = n * lout / (prefill_s + decode_s)
        lines.append(f"| offline 256 x (512 + 256), output tokens/s | {off['output_tokens_per_s']:.0f} | "
                     f"transformers {po['output_tokens_per_s']:.0f} | {off['output_tokens_per_s'] / po['output_tokens_per_s']:.1f}x |")
        lines.append(f"| (same) against the roofline | {off['output_tokens_per_s']:.0f} | {roof:.0f} | {off['output_tokens_per_s'] / roof:.2f} |")
    dec = engine_run("decode")
    if dec and bw:
        # Steady state: the median gap between tokens. The request's mean time per output token
        # also carries one-time work (the CUDA graph of the next KV-length bucket is captured at
        # the step that first needs it), so it is shown beside it.
        ms = dec["inter_token_latency_s"]["p50"] * 1e3
        mean_ms = dec["tpot_s"]["p50"] * 1e3
        floor_ms = wb / bw * 1e3
        lines.append(f"| batch-1 decode, 1K context, ms per token (inter-token p50) | {ms:.2f} | weights / bandwidth {floor_ms:.2f} | {ms / floor_ms:.2f}x |")
        lines.append(f"| (same request) mean ms per output token, one-time graph captures included | {mean_ms:.2f} | {floor_ms:.2f} | {mean_ms / floor_ms:.2f}x |")
    tt = engine_run("ttft")
    pp = peers.get("prefill", {})
    if tt and pp:
        s_ = tt["ttft_s"]["p50"]
        h = json.load(open("bench/models/llama-3.1-8b/config.json"))
        L = 32768
        flops = 2 * (wb / 2) * L + 2 * h["num_hidden_layers"] * h["num_attention_heads"] * h["head_dim"] * L * L
        lines.append(f"| TTFT, one 32K prompt, s | {s_:.3f} | transformers {pp['seconds']:.3f}; FLOP floor {flops / gemm:.3f} | "
                     f"{s_ / pp['seconds']:.2f}x / {s_ / (flops / gemm):.2f}x |")
    on = engine.get("online", {}).get("runs", [])
    if on:
        lines += ["", "Online, agentic workload (`strata bench --workload agentic`):", "",
                  "| request rate | TTFT p50 / p99 ms | ITL p50 / p99 ms | output tokens/s |", "|---|---|---|---|"]
        for r in on:
            lines.append(f"| {r.get('request_rate', '?')} | {r['ttft_s']['p50'] * 1e3:.1f} / {r['ttft_s']['p99'] * 1e3:.1f} | "
                         f"{r['inter_token_latency_s']['p50'] * 1e3:.2f} / {r['inter_token_latency_s']['p99'] * 1e3:.2f} | {r['output_tokens_per_s']:.0f} |")
kvq_line = [l[len("kvq-json: "):] for l in read("bench.log").splitlines() if l.startswith("kvq-json: ")]
kvq = json.loads(read("kvq.json") or (kvq_line[0] if kvq_line else "{}"))
if kvq:
    lines += ["", "## Quantized KV: decode attention", "",
              f"{kvq.get('num_qo_heads')} query / {kvq.get('num_kv_heads')} KV heads, head dim {kvq.get('head_dim')}, "
              "block size 16, BF16 queries; K/V appended by kv_append from bf16 rows. Time as a ratio to BF16's "
              f"in the same run; copy bandwidth {kvq.get('copy_bandwidth_gbs', 0):.0f} GB/s.", "",
              "| batch x context | KV dtype | us | GB/s of KV read | / copy | time / BF16's | max abs err |",
              "|---|---|---|---|---|---|---|"]
    for r in kvq.get("results", []):
        lines.append(f"| {r['batch']} x {r['context']} | {r['kv_dtype']} | {r['median_us']:.1f} | {r['gbs']:.0f} | "
                     f"{r['gbs'] / kvq['copy_bandwidth_gbs']:.2f} | {r['vs_bf16']:.2f} | {r['max_abs_err']:.2e} |")
codec_line = [l[len("codec-json: "):] for l in read("bench.log").splitlines() if l.startswith("codec-json: ")]
codec = json.loads(codec_line[0] if codec_line else "{}")
if codec:
    lines += ["", "## The KV codec on the GPU", "",
              f"{codec.get('blocks')} Llama-3.1-8B blocks of {codec.get('block_bytes', 0) / 2**20:.0f} MiB (bf16, split, a "
              f"segment per layer's K or V, codebooks calibrated on {codec.get('distinct')} distinct blocks); raw bytes "
              f"per second, medians of {codec.get('reps')} calls; device-to-device cudaMemcpy of the same bytes in the same "
              f"run {codec.get('memcpy_gbs', 0):.0f} GB/s (bytes copied).", "",
              "| values | escapes | ratio | encode GB/s | encode / memcpy | decode GB/s | decode / memcpy |",
              "|---|---|---|---|---|---|---|"]
    for r in codec.get("results", []):
        lines.append(f"| {r['values']} | {100 * r['escape_fraction']:.2f} % | {r['ratio']:.3f} | {r['encode_gbs']:.0f} | "
                     f"{r['encode_vs_memcpy']:.2f} | {r['decode_gbs']:.0f} | {r['decode_vs_memcpy']:.2f} |")
e2e = json.loads(read("kvq_engine.json") or "{}")
if e2e:
    budget = next(iter(e2e.values())).get("header", {}).get("engine", {}).get("max_num_batched_tokens")
    lines += ["", "## Quantized KV: end to end", "",
              "Llama-3.1-8B shape, dummy bf16 weights, `--kv-cache-memory-bytes 16GiB`, 1,024 requests of",
              "2,048 + 256 tokens, EOS ignored, greedy, a step's token budget (`--max-num-batched-tokens`)",
              f"of {budget} (`tools/gpu/gpu_kv_quant_bench.sh`).", "",
              "| KV dtype | bytes/token | output tokens/s | vs bfloat16 | duration s | mean concurrency | preemptions | prompt steps: n, s | decode steps: n, s, mean seqs |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, d in e2e.items():
        r = d["runs"][0]
        ps, ds = r.get("prompt_steps", {}), r.get("decode_steps", {})
        lines.append(f"| {name} | {r.get('kv_bytes_per_token', 0):.0f} | {r['output_tokens_per_s']:.0f} | {d.get('vs_bfloat16') or 0:.2f}x | "
                     f"{r['duration_s']:.1f} | {r.get('mean_concurrency', 0):.1f} | {r.get('preemptions', 0)} | "
                     f"{ps.get('steps', 0)}, {ps.get('seconds', 0):.1f} | "
                     f"{ds.get('steps', 0)}, {ds.get('seconds', 0):.1f}, {ds.get('mean_seqs', 0):.1f} |")
fp8 = json.loads(read("fp8_engine.json") or "{}")
if fp8:
    def fr(name):
        return fp8.get(name, {}).get("runs", [{}])[0]
    lines += ["", "## FP8 weights: end to end", "",
              "Llama-3.1-8B shape, dummy bf16 weights, the same weights quantized on the GPU at load with",
              "`--quantization fp8` (e4m3, one scale per output channel; activations per token on the FP8",
              "tensor cores, bf16 on the decode GEMV), greedy, EOS ignored (`tools/gpu/gpu_fp8_bench.sh`).", "",
              "| workload | BF16 weights | FP8 weights | FP8 / BF16 |", "|---|---|---|---|"]
    if fr("offline_none") and fr("offline_fp8"):
        b, q = fr("offline_none")["output_tokens_per_s"], fr("offline_fp8")["output_tokens_per_s"]
        lines.append(f"| offline 256 x (512 + 256), output tokens/s | {b:.0f} | {q:.0f} | {q / b:.2f}x |")
    if fr("decode_none") and fr("decode_fp8"):
        b = fr("decode_none")["inter_token_latency_s"]["p50"] * 1e3
        q = fr("decode_fp8")["inter_token_latency_s"]["p50"] * 1e3
        lines.append(f"| batch-1 decode, 1K context, ms per token (inter-token p50) | {b:.2f} | {q:.2f} | {q / b:.2f}x |")
    kl = [l.strip() for l in read("engine.log").splitlines() if "fp8 weights ]" in l]
    if kl:
        lines += ["", "Quality (`model_cuda_fp8_weights_test`, whole prompts, FP8 against the same model in BF16):", ""]
        lines += [f"    {l}" for l in kl]
open(dst, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
}

case "${1:-}" in
  build) cmd_build ;;
  run) cmd_run "${2:?run OUT_DIR}" ;;
  report) cmd_report "${2:?report RUN_DIR}" ;;
  *) echo "usage: $0 build | run OUT_DIR | report RUN_DIR" >&2; exit 2 ;;
esac
