#!/usr/bin/env bash
# Runs bench/ort-shapes.js with the ONNX Runtime that ../shared/bench/ort/run.sh installs (its
# cache folder; installed on first use by running that script once).
# usage: bench/ort_shapes.sh MODEL.onnx [--batch B] [--threads T] [--min-time S] [--warmup N]
#                            [--shape NAME=D0,D1,...]...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${CUVIL_PEER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cuvil-peer-ort}
if [[ ! -f $dir/node_modules/onnxruntime-node/package.json ]]; then
  "$here/../../shared/bench/ort/run.sh" > /dev/null 2>&1 || true  # installs, then stops at usage
fi
NODE_PATH="$dir/node_modules" exec node "$here/ort-shapes.js" "$@"
