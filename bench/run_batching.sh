#!/usr/bin/env bash
# The dynamic-batching benchmark: the same models with and without dynamic batching, driven by
# cuvil-perf over gRPC at concurrency 1, 4, 16 and 32; writes bench/batching.md.
#
#   bench/run_batching.sh                 # uses build/bin/{cuvil-server,cuvil-perf}
#   BUILD_DIR=build-perf MEASUREMENT_MS=3000 bench/run_batching.sh
#
# Needs: cmake --build build --target cuvil-server cuvil-perf; /usr/bin/python3 with onnx, numpy.
# Not a test: it measures, it does not judge (batching.md states each target and the result).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
SHARED="${SHARED:-$ROOT/../shared}"
MEASUREMENT_MS="${MEASUREMENT_MS:-2000}"
WARMUP_REQUESTS="${WARMUP_REQUESTS:-64}"
CONCURRENCIES="${CONCURRENCIES:-1 4 16 32}"
MODELS="${MODELS:-wmlp mlp lenet}"
OUT="${OUT:-$ROOT/bench/batching.md}"
PY=/usr/bin/python3

SERVER="$BUILD_DIR/bin/cuvil-server"
PERF="$BUILD_DIR/bin/cuvil-perf"
for bin in "$SERVER" "$PERF"; do
  if [[ ! -x "$bin" ]]; then
    echo "missing $bin; build it: cmake --build $BUILD_DIR --target cuvil-server cuvil-perf -j1" >&2
    exit 1
  fi
done

# shellcheck source=bench/start_server.sh
source "$ROOT/bench/start_server.sh"
make_bench_workdir batching

echo "== model repository in $WORK/repo"
"$PY" "$ROOT/bench/make_weight_bound_mlp.py" "$WORK/repo" --shared "$SHARED"

echo "== starting $SERVER"
start_cuvil_server "$WORK/server.log" "$SERVER" --model-repository "$WORK/repo" --grpc-port 0 \
  --http-port 0 --metrics-port 0
echo "== server ready: grpc=$GRPC http=$HTTP"

mkdir -p "$WORK/csv"
: >"$WORK/commands.txt"
status=0
for model in $MODELS; do
  for mode in batched unbatched; do
    for c in $CONCURRENCIES; do
      csv="$WORK/csv/${model}_${mode}_c${c}.csv"
      cmd=("$PERF" -m "${model}_${mode}" -u "$GRPC" -i grpc --concurrency-range "$c"
           --measurement-interval "$MEASUREMENT_MS" --max-requests 200000
           --warmup-requests "$WARMUP_REQUESTS" --input-data random -f "$csv")
      echo "${cmd[*]}" | sed "s|$ROOT/||; s|$WORK|\$WORK|g; s|$GRPC|\$GRPC|" >>"$WORK/commands.txt"
      echo "== ${model}_${mode} concurrency $c"
      if ! "${cmd[@]}"; then
        echo "cuvil-perf failed for ${model}_${mode} at concurrency $c" >&2
        status=1
      fi
    done
  done
done

# Compute time of one full batch (32 rows in one request, nothing else in flight), for the p99 bound.
for model in $MODELS; do
  csv="$WORK/csv/${model}_fullbatch.csv"
  cmd=("$PERF" -m "${model}_unbatched" -u "$GRPC" -i grpc -b 32 --concurrency-range 1
       --measurement-interval "$MEASUREMENT_MS" --max-requests 200000
       --warmup-requests 8 --input-data random -f "$csv")
  echo "${cmd[*]}" | sed "s|$ROOT/||; s|$WORK|\$WORK|g; s|$GRPC|\$GRPC|" >>"$WORK/commands.txt"
  echo "== ${model} full batch of 32"
  if ! "${cmd[@]}"; then
    echo "cuvil-perf failed for ${model} at batch 32" >&2
    status=1
  fi
done

"$PY" "$ROOT/bench/batching_report.py" --build-dir "${BUILD_DIR#"$ROOT"/}" --csv-dir "$WORK/csv" --commands "$WORK/commands.txt" \
  --measurement-ms "$MEASUREMENT_MS" --models "$MODELS" --concurrencies "$CONCURRENCIES" \
  --queue-delay-us 2000 --out "$OUT"
echo "== wrote $OUT"
exit "$status"
