#!/usr/bin/env bash
# Builds tests/aot/two_models.c against the mlp and lenet AOT libraries, as C and as C++ (a C++
# program has its own operator new and libstdc++, which the libraries must not clash with).
# usage: two_models.sh CUVILC SOURCE_DIR MODELS_DIR WORK_DIR
set -euo pipefail
cuvilc=$1 src=$2 models=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
for m in mlp lenet; do "$cuvilc" compile "$models/$m/model.onnx" --aot "$work" --name "$m" >/dev/null; done
${CC:-cc} -O1 -Wall -Werror -I"$work" "$src/tests/aot/two_models.c" "$work/libmlp.a" "$work/liblenet.a" \
  -lm -o "$work/two_models_c"
${CXX:-c++} -O1 -Wall -Werror -x c++ -I"$work" "$src/tests/aot/two_models.c" -x none "$work/libmlp.a" \
  "$work/liblenet.a" -lm -o "$work/two_models_cxx"
"$work/two_models_c"
"$work/two_models_cxx"
