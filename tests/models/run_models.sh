#!/usr/bin/env bash
# Runs `cuvilc test` over every model folder of the shared model zoo: each model is compiled once
# with a symbolic batch and checked on all its data sets (batch 1, 2 and 5).
# usage: run_models.sh MODELS_DIR   (CUVILC names the binary, CUVILC_TEST_ARGS adds flags)
set -uo pipefail
models_dir=$1
cuvilc=${CUVILC:-cuvilc}
if [[ ! -d "$models_dir" ]]; then
  echo "model zoo not found at $models_dir"
  exit 1
fi
dirs=()
for d in "$models_dir"/*/; do
  [[ -f "$d/model.onnx" ]] && dirs+=("${d%/}")
done
((${#dirs[@]} > 0)) || { echo "no models in $models_dir"; exit 1; }
# The zoo's reference tolerance (PyTorch eager fp32 vs compiled code).
# CUVILC_TEST_ARGS: extra flags ("--threads=2" style, split on '=' into flag and value).
extra=()
for a in ${CUVILC_TEST_ARGS:-}; do extra+=("${a%%=*}" "${a#*=}"); done
exec "$cuvilc" test --rtol 1e-3 --atol 1e-3 "${extra[@]}" "${dirs[@]}"
