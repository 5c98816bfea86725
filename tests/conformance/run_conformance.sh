#!/usr/bin/env bash
# Runs `cuvilc test` over a list of ONNX conformance cases (CONFORMANCE_DIR/core-cases.txt: the
# core 490, or another folder's list) and checks the result against the
# checked-in expected-failure list: a new failure fails the test, and so does an expected failure
# that now passes (the list may only shrink).
# usage: run_conformance.sh NODE_DATA_DIR CONFORMANCE_DIR   (CUVILC names the binary)
set -uo pipefail
data_dir=$1
conf_dir=$2
cuvilc=${CUVILC:-cuvilc}
jobs=${CUVIL_TEST_JOBS:-$(nproc)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

grep -v '^#' "$conf_dir/core-cases.txt" | sed '/^$/d' | sort > "$out/cases"
missing=0
while read -r c; do
  [[ -d "$data_dir/$c" ]] || { echo "missing case folder $data_dir/$c"; missing=1; }
done < "$out/cases"
((missing)) && exit 1

# Batches of cases per process, so one crash cannot hide the rest.
sed "s|^|$data_dir/|" "$out/cases" | xargs -P "$jobs" -n 25 "$cuvilc" test > "$out/log" 2>&1
grep -E '^(PASS|FAIL) ' "$out/log" | sort > "$out/results"
cut -d' ' -f2 "$out/results" | sed 's/:$//' | sort > "$out/reported"
comm -23 "$out/cases" "$out/reported" | sed 's/^/FAIL /; s/$/: no result (the process crashed)/' >> "$out/results"

grep '^FAIL ' "$out/results" | sed 's/^FAIL \([^:]*\):.*/\1/' | sort > "$out/failed"
grep -v '^#' "$conf_dir/expected-failures.txt" | cut -d' ' -f1 | sed '/^$/d' | sort > "$out/expected"
passed=$(grep -c '^PASS ' "$out/results")
failed=$(wc -l < "$out/failed")
echo "conformance: $passed passed, $failed failed of $(wc -l < "$out/cases") cases"

status=0
new=$(comm -23 "$out/failed" "$out/expected")
if [[ -n "$new" ]]; then
  echo "unexpected failures:"
  for c in $new; do grep "^FAIL $c:" "$out/results"; done
  status=1
fi
fixed=$(comm -13 "$out/failed" "$out/expected")
if [[ -n "$fixed" ]]; then
  echo "expected failures that now pass (remove them from expected-failures.txt):"
  echo "$fixed"
  status=1
fi
exit $status
