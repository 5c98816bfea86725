#!/usr/bin/env bash
# cuvil_probe_test: runs cuvil_probe_target (fires every `cuvil` USDT probe a known number of
# times once all its semaphores are enabled), attaches cuvil-probe --pid to it, scrapes /metrics
# and checks the exported counts and histograms exactly, lints the exposition with promtool, and
# checks the --print histogram. Exits 77 (CTest SKIP_RETURN_CODE) when BPF is not available.
#
#   cuvil_probe_test.sh PATH/TO/cuvil-probe PATH/TO/cuvil_probe_target
set -u
probe=$1
target=$2
count=100
long_model=a_model_name_longer_than_thirty_one_bytes
long_model_cut=a_model_name_longer_than_thirty  # CUVIL_PROBE_STR_LEN - 1 bytes

work=$(mktemp -d)
target_pid=
probe_pid=
cleanup() {
  [ -n "$target_pid" ] && kill "$target_pid" 2>/dev/null
  [ -n "$probe_pid" ] && kill "$probe_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

skip() { echo "SKIPPED: $*"; exit 77; }
dump() {
  for f in "$work"/*; do
    [ -f "$f" ] && { echo "---- ${f##*/}"; head -c 20000 "$f"; }
  done
}
fail() { echo "FAIL: $*"; dump; exit 1; }

[ "$(id -u)" = 0 ] || skip "cuvil-probe needs root (BPF + uprobes); running as uid $(id -u)"
[ -x "$probe" ] || fail "no cuvil-probe at $probe"
[ -x "$target" ] || fail "no cuvil_probe_target at $target"

"$target" --count "$count" --models "resnet18,mlp,$long_model" --wait-secs 30 \
  >"$work/target.out" 2>"$work/target.err" &
target_pid=$!
"$probe" --pid "$target_pid" --metrics-port 0 --metrics-host 127.0.0.1 --print --interval-secs 1 \
  >"$work/probe.out" 2>"$work/probe.err" &
probe_pid=$!

addr=
for _ in $(seq 300); do
  addr=$(sed -n 's/^listening metrics=//p' "$work/probe.out" | head -n 1)
  [ -n "$addr" ] && break
  if ! kill -0 "$probe_pid" 2>/dev/null; then
    wait "$probe_pid"
    rc=$?
    probe_pid=
    if [ "$rc" = 1 ] && grep -q -e 'cannot load BPF programs' -e 'cannot attach uprobes' \
        "$work/probe.err"; then
      skip "$(head -n 1 "$work/probe.err")"
    fi
    fail "cuvil-probe exited with $rc before listening"
  fi
  sleep 0.1
done
[ -n "$addr" ] || fail "cuvil-probe did not print 'listening metrics=' within 30 s"

wait "$target_pid"
rc=$?
target_pid=
[ "$rc" = 0 ] || fail "cuvil_probe_target exited with $rc"

curl -sf "http://$addr/metrics" >"$work/metrics.txt" || fail "cannot scrape http://$addr/metrics"

expect() {
  grep -qxF -- "$1" "$work/metrics.txt" || fail "/metrics has no line: $1"
}
for m in resnet18 mlp "$long_model_cut"; do
  l="model=\"$m\""
  total=$(awk -v l="{$l," 'index($0, "cuvil_probe_requests_total" l) == 1 { s += $2 } END { print s + 0 }' \
    "$work/metrics.txt")
  [ "$total" = "$count" ] || fail "cuvil_probe_requests_total{$l} sums to $total, want $count"
  expect "cuvil_probe_requests_total{$l,status=\"200\"} 80"
  expect "cuvil_probe_requests_total{$l,status=\"500\"} 20"
  # Latencies 1, 2, 3, 4 ms: buckets (2^19, 2^20], (2^20, 2^21], (2^21, 2^22] ns.
  expect "cuvil_probe_request_latency_seconds_bucket{$l,le=\"0.000524288\"} 0"
  expect "cuvil_probe_request_latency_seconds_bucket{$l,le=\"0.001048576\"} 25"
  expect "cuvil_probe_request_latency_seconds_bucket{$l,le=\"0.002097152\"} 50"
  expect "cuvil_probe_request_latency_seconds_bucket{$l,le=\"0.004194304\"} 100"
  expect "cuvil_probe_request_latency_seconds_bucket{$l,le=\"+Inf\"} 100"
  expect "cuvil_probe_request_latency_seconds_sum{$l} 0.25"
  expect "cuvil_probe_request_latency_seconds_count{$l} 100"
  # Batch sizes 1, 2, 4, 8.
  expect "cuvil_probe_batch_size_bucket{$l,le=\"1\"} 25"
  expect "cuvil_probe_batch_size_bucket{$l,le=\"2\"} 50"
  expect "cuvil_probe_batch_size_bucket{$l,le=\"4\"} 75"
  expect "cuvil_probe_batch_size_bucket{$l,le=\"8\"} 100"
  expect "cuvil_probe_batch_size_sum{$l} 375"
  expect "cuvil_probe_batch_size_count{$l} 100"
  expect "cuvil_probe_requests_started_total{$l} 100"
  expect "cuvil_probe_requests_in_flight{$l} 0"
  expect "cuvil_probe_batches_started_total{$l} 100"
  expect "cuvil_probe_batch_duration_seconds_total{$l} 0.000375"
  expect "cuvil_probe_jit_compiles_started_total{$l} 1"
  expect "cuvil_probe_jit_compiles_total{$l} 1"
  expect "cuvil_probe_jit_compile_seconds_total{$l} 0.005"
  expect "cuvil_probe_cache_hits_total{$l} 2"
  expect "cuvil_probe_cache_misses_total{$l} 1"
  expect "cuvil_probe_patches_applied_total{$l,function=\"matmul_0\"} 1"
  expect "cuvil_probe_patches_rolled_back_total{$l,function=\"matmul_0\"} 1"
  expect "cuvil_probe_model_loads_total{$l,version=\"1\"} 1"
  expect "cuvil_probe_model_unloads_total{$l,version=\"1\"} 1"
done
expect "cuvil_probe_probes_attached 12"
expect "cuvil_probe_map_update_failures_total 0"

if command -v promtool >/dev/null; then
  promtool check metrics <"$work/metrics.txt" >"$work/promtool.out" 2>&1 ||
    fail "promtool check metrics rejected the exposition"
else
  echo "note: promtool not found, exposition not linted"
fi

kill -INT "$probe_pid"
wait "$probe_pid"
rc=$?
probe_pid=
[ "$rc" = 0 ] || fail "cuvil-probe exited with $rc on SIGINT"
grep -qF "@latency_ns[resnet18]:" "$work/probe.out" || fail "--print shows no latency histogram"
grep -qE '^\(512K, 1M\] +25 \|@+ *\|$' "$work/probe.out" || fail "--print histogram is wrong"

# Phase 2: --binary (every process running the file), attached before the process starts.
"$probe" --binary "$target" --metrics-port 0 --metrics-host 127.0.0.1 \
  >"$work/probe2.out" 2>"$work/probe2.err" &
probe_pid=$!
addr=
for _ in $(seq 300); do
  addr=$(sed -n 's/^listening metrics=//p' "$work/probe2.out" | head -n 1)
  [ -n "$addr" ] && break
  kill -0 "$probe_pid" 2>/dev/null || fail "cuvil-probe --binary exited before listening"
  sleep 0.1
done
[ -n "$addr" ] || fail "cuvil-probe --binary did not listen within 30 s"
"$target" --count 40 --models bert --wait-secs 30 >"$work/target2.out" 2>"$work/target2.err" ||
  fail "cuvil_probe_target (started after cuvil-probe --binary) failed"
curl -sf "http://$addr/metrics" >"$work/metrics2.txt" || fail "cannot scrape http://$addr/metrics"
grep -qxF 'cuvil_probe_requests_total{model="bert",status="200"} 32' "$work/metrics2.txt" &&
  grep -qxF 'cuvil_probe_requests_total{model="bert",status="500"} 8' "$work/metrics2.txt" ||
  fail "--binary mode did not count the 40 requests of a process started after attach"
kill -TERM "$probe_pid"
wait "$probe_pid"
rc=$?
probe_pid=
[ "$rc" = 0 ] || fail "cuvil-probe --binary exited with $rc on SIGTERM"

echo "PASS: $count requests per model counted exactly (--pid), 40 (--binary);" \
  "promtool accepts /metrics"
echo "---- /metrics (resnet18 excerpt)"
grep -e 'model="resnet18"' "$work/metrics.txt" | grep -v -e 'le="[0-9.e-]*"} 0$' | head -n 30
echo "---- --print (last view)"
awk '/since attach/ { n = NR } { line[NR] = $0 } END { for (i = n; i <= NR; ++i) print line[i] }' \
  "$work/probe.out" | head -n 40
exit 0
