#!/usr/bin/env bash
# Installs Cuvil's build and test dependencies from Debian 12 packages.
# Idempotent: skips apt-get entirely when every package is already installed.
#
#   scripts/install-deps.sh [--build-only]
#
# --build-only: only what building cuvil-server, cuvilc, cuvil-patch-sandbox and cuvil-probe
# needs (the container image's build stage, deploy/container/Dockerfile): no test tools, cross
# compilers or Python packages, about a tenth of the download.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache mold pkg-config git
  llvm-19-dev clang-19 clang-format-19 lld-19 libfuzzer-19-dev libclang-rt-19-dev libzstd-dev libedit-dev libffi-dev libxml2-dev zlib1g-dev libcurl4-openssl-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libonnx-dev libonnx-testdata
  libabsl-dev libspdlog-dev libfmt-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev nlohmann-json3-dev libssl-dev
  libbpf-dev bpftool systemtap-sdt-dev
  prometheus python3 python3-onnx python3-numpy python3-grpcio python3-grpc-tools python3-protobuf python3-prometheus-client
  pybind11-dev python3-pybind11 python3-dev python3-torch python3-torchvision
  nodejs
  haproxy
  curl
  g++-aarch64-linux-gnu qemu-user
  wasi-libc libclang-rt-19-dev-wasm32
  gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-dev
  libstdc++-arm-none-eabi-newlib qemu-system-arm
)

if [[ ${1:-} == --build-only ]]; then
  PACKAGES=(
    build-essential cmake ninja-build mold pkg-config git
    llvm-19-dev clang-19 lld-19 libzstd-dev libedit-dev libffi-dev libxml2-dev zlib1g-dev
    libcurl4-openssl-dev
    libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
    libonnx-dev libabsl-dev libspdlog-dev libfmt-dev libxxhash-dev
    libgtest-dev libgmock-dev
    libcpp-httplib-dev nlohmann-json3-dev libssl-dev
    libbpf-dev bpftool systemtap-sdt-dev
  )
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
