#!/usr/bin/env bash
# Times Cuvil (build/bin/cuvil-bench) and ONNX Runtime (../shared/bench/ort/run.sh) on every model
# of ../shared/models at batch 1 and 8 (transformer: 1 and 4), 1 and 2 intra-op threads, and prints
# the ratio table ORT mean / Cuvil mean (> 1: Cuvil is faster) with its geometric mean.
# usage: bench/compare_ort.sh [MODEL_NAME...]
# env:   MIN_TIME (seconds per measurement, default 3), BUILD (default build),
#        LOCK (a flock file held around each measurement so builds do not disturb it; default
#        /tmp/cuvil-build.lock, empty to disable), RAW (file that receives every raw line),
#        CUVIL_ARGS (extra cuvil-bench flags, e.g. --no-batch-split).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=$(cd "$root/../shared" && pwd)
bench=$root/${BUILD:-build}/bin/cuvil-bench
ort=$shared/bench/ort/run.sh
min_time=${MIN_TIME:-3}
lock=${LOCK-/tmp/cuvil-build.lock}
raw=${RAW:-$(mktemp)}
[[ -x $bench ]] || { echo "missing $bench (TARGETS=cuvil-bench scripts/build.sh)" >&2; exit 1; }

models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
  for d in "$shared"/models/*/; do models+=("$(basename "$d")"); done
fi

locked() { if [[ -n $lock ]]; then flock "$lock" "$@"; else "$@"; fi; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

: >"$raw"
rows=()
for m in "${models[@]}"; do
  onnx=$shared/models/$m/model.onnx
  batches="1 8"
  [[ $m == transformer ]] && batches="1 4"
  for b in $batches; do
    for t in 1 2; do
      o=$(locked "$ort" "$onnx" --batch "$b" --threads "$t" --min-time "$min_time" | tail -n1)
      # shellcheck disable=SC2086  # CUVIL_ARGS is a list of flags.
      c=$(locked "$bench" "$onnx" --batch "$b" --threads "$t" --min-time "$min_time" ${CUVIL_ARGS:-} |
        tail -n1)
      echo "$o" >>"$raw"
      echo "$c" >>"$raw"
      echo "$o" >&2
      echo "$c" >&2
      rows+=("$m $b $t $(field mean_ms "$o") $(field mean_ms "$c") $(field gflops "$c")")
    done
  done
done

printf '\n| model | batch | threads | ORT mean ms | Cuvil mean ms | Cuvil GFLOP/s | ORT/Cuvil |\n'
printf '|---|---:|---:|---:|---:|---:|---:|\n'
printf '%s\n' "${rows[@]}" | awk '
  { r = $4 / $5; s += log(r); n++
    printf "| %s | %s | %s | %.3f | %.3f | %.1f | %.2f |\n", $1, $2, $3, $4, $5, $6, r }
  END { if (n) printf "\ngeometric mean ORT/Cuvil: %.3f over %d runs\n", exp(s / n), n }'
echo "raw lines: $raw"
