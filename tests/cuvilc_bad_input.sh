#!/usr/bin/env bash
# cuvilc must answer broken input with exit status 1 and a one-line "error:" message.
# usage: cuvilc_bad_input.sh CUVILC MLP_MODEL_DIR
set -uo pipefail
cuvilc=$1
mlp=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

expect_error() {  # expect_error NAME PATTERN -- command...
  local name=$1 pattern=$2
  shift 3
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [[ $rc -ne 1 ]]; then echo "FAIL $name: exit status $rc, expected 1"; fail=1; return; fi
  if [[ $(wc -l < "$tmp/err") -ne 1 ]] || ! grep -q "^error: .*$pattern" "$tmp/err"; then
    echo "FAIL $name: stderr was:"; cat "$tmp/err"; fail=1; return
  fi
  echo "PASS $name: $(cat "$tmp/err")"
}

head -c 1000 "$mlp/model.onnx" > "$tmp/truncated.onnx"
head -c 4096 /dev/urandom > "$tmp/garbage.onnx"
: > "$tmp/empty.onnx"
expect_error truncated "not a valid ONNX model" -- "$cuvilc" compile "$tmp/truncated.onnx"
expect_error garbage "ONNX" -- "$cuvilc" compile "$tmp/garbage.onnx"
expect_error empty "graph" -- "$cuvilc" info "$tmp/empty.onnx"
expect_error missing "cannot open" -- "$cuvilc" run "$tmp/none.onnx"
# Wrong input: lenet's image fed to mlp.
expect_error wrong_shape "input 'input'" -- "$cuvilc" run "$mlp/model.onnx" --input "input=$mlp/../lenet/test_data_set_0/input_0.pb"
expect_error garbage_tensor "TensorProto" -- "$cuvilc" run "$mlp/model.onnx" --input "input=$tmp/garbage.onnx"
# A tolerance that is not a number is a usage error (status 2, the flag named), not an exception.
"$cuvilc" test "$mlp" --rtol abc > "$tmp/out" 2> "$tmp/err"
rc=$?
if [[ $rc -ne 2 ]] || ! head -1 "$tmp/err" | grep -q "^error: --rtol: a tolerance >= 0, not 'abc'"; then
  echo "FAIL bad_tolerance: exit status $rc, stderr:"; cat "$tmp/err"; fail=1
else
  echo "PASS bad_tolerance: $(head -1 "$tmp/err")"
fi
exit $fail
