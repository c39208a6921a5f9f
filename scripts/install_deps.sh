#!/usr/bin/env bash
# Installs everything Strata needs to build and test on Debian 12, from Debian's own packages.
# Idempotent; run as root. NVIDIA's CUDA 13 toolkit is not a Debian package: when /usr/local/cuda
# is present the build compiles the CUDA backend too, otherwise it builds the CPU engine only.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git pkg-config python3
  clang clang-tidy clang-format libclang-rt-dev lld
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev
)

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

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install_deps: CUDA toolkit found ($(/usr/local/cuda/bin/nvcc --version | tail -1)): the CUDA backend will be built"
else
  echo "install_deps: no CUDA toolkit at /usr/local/cuda: building the CPU engine only"
fi
