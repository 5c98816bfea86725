#!/usr/bin/env bash
# Builds tests/aot/two_models.c against the mlp and lenet AOT libraries, as C and as C++ (a C++
# program has its own operator new and libstdc++, which the libraries must not clash with).
# usage: [AOT_TARGET=wasm32 CC=clang-19 CROSS_CFLAGS="--target=wasm32-wasi ..." RUNNER="node ..."]
#        two_models.sh CUVILC SOURCE_DIR MODELS_DIR WORK_DIR
# (a cross target builds and runs the C program only: it has no C++ library to test against)
set -euo pipefail
cuvilc=$1 src=$2 models=$3 work=$4
target_args=()
[[ -n ${AOT_TARGET:-} ]] && target_args=(--target "$AOT_TARGET")
read -r -a runner <<< "${RUNNER:-}"
read -r -a cross_cflags <<< "${CROSS_CFLAGS:-}"
rm -rf "$work" && mkdir -p "$work"
for m in mlp lenet; do
  "$cuvilc" compile "$models/$m/model.onnx" --aot "$work" --name "$m" "${target_args[@]}" >/dev/null
done
${CC:-cc} "${cross_cflags[@]}" -O1 -Wall -Werror -I"$work" "$src/tests/aot/two_models.c" \
  "$work/libmlp.a" "$work/liblenet.a" -lm -o "$work/two_models_c"
"${runner[@]}" "$work/two_models_c"
[[ -n ${AOT_TARGET:-} ]] && exit 0
${CXX:-c++} -O1 -Wall -Werror -x c++ -I"$work" "$src/tests/aot/two_models.c" -x none "$work/libmlp.a" \
  "$work/liblenet.a" -lm -o "$work/two_models_cxx"
"$work/two_models_cxx"
