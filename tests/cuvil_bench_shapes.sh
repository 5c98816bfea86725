#!/usr/bin/env bash
# cuvil-bench times a model with a free dim besides the batch once --shape names its inputs'
# shapes (issue 40), refuses it with the flag to use when it does not, and refuses a malformed or
# unknown --shape with a clear message.
# usage: cuvil_bench_shapes.sh CUVIL_BENCH SEQ_ENCODER_MODEL_DIR
set -uo pipefail
bench=$1
model=$2/model.onnx
fail=0
check() {  # check NAME EXPECTED_STATUS PATTERN -- command...
  local name=$1 want=$2 pattern=$3
  shift 4
  local out
  out=$("$@" 2>&1)
  local rc=$?
  if [[ $rc -ne $want ]] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL $name: exit status $rc (want $want), output:"
    echo "$out"
    fail=1
    return
  fi
  echo "PASS $name: $(tail -n1 <<<"$out" | cut -c1-160)"
}
# ids is [batch, seq]: batch 3 from --shape (over --batch), seq 7.
check timed 0 "^cuvil model=seq_encoder/model.onnx batch=3 threads=1 median_ms=" -- \
  "$bench" "$model" --batch 1 --shape ids=3,7 --min-time 0.05
check "other sizes, same compile" 0 "batch=2 threads=1 median_ms=" -- \
  "$bench" "$model" --shape ids=2,40 --min-time 0.05
check "free dim without --shape" 1 "input 'ids' has free dimensions besides the batch.*--shape ids=" -- \
  "$bench" "$model" --min-time 0.05
check "unknown input" 1 "--shape names 'nope', which is not an input of the model" -- \
  "$bench" "$model" --shape ids=1,4 --shape nope=1 --min-time 0.05
check "wrong rank" 1 "ids" -- "$bench" "$model" --shape ids=1,4,5 --min-time 0.05
check "malformed" 2 "--shape wants NAME=D0,D1" -- "$bench" "$model" --shape ids=1,,4
exit $fail
