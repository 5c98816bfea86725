#!/usr/bin/env bash
# Installs dependencies, builds Cuvil, then compiles the bundled example model and runs it once on
# its example input (the serving issue turns this into starting cuvil-server).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
"$root/build/bin/cuvilc" compile "$root/examples/model-repository/mlp/1/model.onnx" --timings
exec "$root/build/bin/cuvilc" run "$root/examples/model-repository/mlp/1/model.onnx" \
  --input "input=$root/examples/data/mlp_input_batch1.pb"
