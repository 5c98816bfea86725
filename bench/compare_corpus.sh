#!/usr/bin/env bash
# Times Cuvil (build/bin/cuvil-bench) against ONNX Runtime (bench/ort_shapes.sh) on every case of a
# corpus: ../shared/models and ../shared/realmodels/cases by default (regenerate the latter as its
# README says). Each case's input shapes come from its test_data_set_0, with dim 0 set to each
# batch of BATCHES when the model's batch is free (else the case runs at its own batch only).
# Every cell runs ORT, then Cuvil, ROUNDS times, alternating, and keeps the median of each side's
# medians; the table gives ORT/Cuvil (> 1: Cuvil is faster) and the geometric mean per thread
# count. A case either side cannot run is listed with the reason, not timed.
# usage: bench/compare_corpus.sh [CASE_DIR...]
# env:   BATCHES (default "1 8"), THREADS (default "1 2"), ROUNDS (default 3), MIN_TIME (seconds per
#        measurement, default 1), BUILD (default build), LOCK (flock file held around each
#        measurement so builds do not disturb it; default /tmp/cuvil-build.lock, empty to disable),
#        FIXED_SHAPE (1: Cuvil compiles each cell for its input sizes, batch still free, as the
#        server does when a config's dims fix them: cuvil-bench --fixed-shape; default 0, the
#        model compiled for every size)
set -euo pipefail
((${ROUNDS:-3} >= 1)) || { echo "compare_corpus: ROUNDS must be at least 1" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
shared=$(cd "$root/.." && pwd)/shared
bench=$root/${BUILD:-build}/bin/cuvil-bench
ort=$root/bench/ort_shapes.sh
lock=${LOCK-/tmp/cuvil-build.lock}
[[ -x $bench ]] || { echo "missing $bench (TARGETS=cuvil-bench scripts/build.sh)" >&2; exit 1; }
cases=("$@")
if [[ ${#cases[@]} -eq 0 ]]; then
  for d in "$shared"/models/*/ "$shared"/realmodels/cases/*/; do [[ -d $d ]] && cases+=("${d%/}"); done
fi
fixed=()
[[ ${FIXED_SHAPE:-0} == 1 ]] && fixed=(--fixed-shape)
locked() { if [[ -n $lock ]]; then flock "$lock" "$@"; else "$@"; fi; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# "NAME=D0,D1,... free|fixed" per input of CASE (shapes of test_data_set_0; free: dim 0 symbolic).
case_shapes() {
  /usr/bin/python3 - "$1" <<'PY'
import glob, os, sys
import onnx
case = sys.argv[1]
model = onnx.load(os.path.join(case, "model.onnx"), load_external_data=False)
inits = {i.name for i in model.graph.initializer}
free = {}
for i in model.graph.input:
    if i.name in inits:
        continue
    d = i.type.tensor_type.shape.dim
    # A scalar has no batch to fix: it never keeps the others at their own batch.
    free[i.name] = "scalar" if not d else ("free" if not d[0].HasField("dim_value") else "fixed")
names = list(free)
files = sorted(glob.glob(os.path.join(case, "test_data_set_0", "input_*.pb")))
for k, f in enumerate(files):
    t = onnx.TensorProto()
    with open(f, "rb") as fh:
        t.ParseFromString(fh.read())
    name = t.name or (names[k] if k < len(names) else "")  # unnamed: by position
    dims = ",".join(str(x) for x in t.dims)
    print(f"{name}={dims} {free.get(name, 'fixed')}")
PY
}

rows=()
refused=()
for c in "${cases[@]}"; do
  name=$(basename "$c")
  if ! shapes=$(case_shapes "$c" 2>&1); then
    refused+=("$name: reading its inputs failed: $(tr '\n' ' ' <<<"$shapes" | cut -c1-200)")
    continue
  fi
  mapfile -t ins <<<"$shapes"
  if [[ -z $shapes ]]; then
    refused+=("$name: no test_data_set_0 inputs")
    continue
  fi
  batch_free=1
  for i in "${ins[@]}"; do [[ ${i#* } == fixed ]] && batch_free=0; done
  batches=${BATCHES:-1 8}
  ((batch_free)) || batches=own
  for b in $batches; do
    args=()
    for i in "${ins[@]}"; do
      spec=${i% *}
      dims=${spec#*=}
      if [[ $b != own && -n $dims ]]; then  # a scalar input (no dims) keeps its shape
        spec="${spec%%=*}=$b"
        [[ $dims == *,* ]] && spec+=",${dims#*,}"
      fi
      args+=(--shape "$spec")
    done
    for t in ${THREADS:-1 2}; do
      o_all="" c_all="" why=""
      for ((r = 0; r < ${ROUNDS:-3}; r++)); do
        o=$(locked "$ort" "$c/model.onnx" --threads "$t" --min-time "${MIN_TIME:-1}" "${args[@]}" 2>&1 || true)
        if [[ $(tail -n1 <<<"$o") != "ort model="* ]]; then why="ORT: $(tr '\n' ' ' <<<"$o" | cut -c1-200)"; break; fi
        x=$(locked "$bench" "$c/model.onnx" --threads "$t" --min-time "${MIN_TIME:-1}" "${args[@]}" \
          "${fixed[@]}" 2>&1 || true)
        if [[ $(tail -n1 <<<"$x") != "cuvil model="* ]]; then why="Cuvil: $(tr '\n' ' ' <<<"$x" | cut -c1-200)"; break; fi
        o=$(tail -n1 <<<"$o")
        x=$(tail -n1 <<<"$x")
        echo "$o" >&2
        echo "$x" >&2
        o_all+=" $(field median_ms "$o")"
        c_all+=" $(field median_ms "$x")"
        bb=$(field batch "$x")
      done
      if [[ -n $why ]]; then
        refused+=("$name (batch $b, $t threads): $why")
        continue 2
      fi
      rows+=("$name $bb $t $(median "$o_all") $(median "$c_all")")
    done
  done
done

printf '\n| case | batch | threads | ORT median ms | Cuvil median ms | ORT/Cuvil |\n'
printf '|---|---:|---:|---:|---:|---:|\n'
printf '%s\n' "${rows[@]}" | awk 'NF == 5 {
    r = $4 / $5; s[$3] += log(r); n[$3]++; if (!(($3) in lo) || r < lo[$3]) lo[$3] = r
    printf "| %s | %s | %s | %.3f | %.3f | %.2f |\n", $1, $2, $3, $4, $5, r }
  END { for (t in n) printf "\n%s thread(s): geometric mean ORT/Cuvil %.3f over %d cells, lowest %.2f", t, exp(s[t] / n[t]), n[t], lo[t]
        print "" }'
if [[ ${#refused[@]} -gt 0 ]]; then
  printf '\nnot timed:\n'
  printf '  %s\n' "${refused[@]}"
fi
