#!/usr/bin/env bash
# The serving-cost benchmark of issue 12: mlp from examples/model-repository, batch-1 requests,
# cuvil-perf at concurrency 1 (round trip p50/p99) and 16 (throughput), gRPC then HTTP, with the
# server's own CPU time per request read from /proc/PID/stat around each run.
#
#   flock /tmp/cuvil-build.lock bench/run_serving.sh            # build/bin/{cuvil-server,cuvil-perf}
#   SERVER=/tmp/base/cuvil-server bench/run_serving.sh          # another server binary
#   REPO=/tmp/repo bench/run_serving.sh                         # another model repository
#
# Prints one line per run; bench/serving.md records the figures. Needs curl.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SERVER="${SERVER:-$ROOT/build/bin/cuvil-server}"
PERF="${PERF:-$ROOT/build/bin/cuvil-perf}"
REPO="${REPO:-$ROOT/examples/model-repository}"
MEASUREMENT_MS="${MEASUREMENT_MS:-5000}"
PROTOCOLS="${PROTOCOLS:-grpc http}"
CONCURRENCIES="${CONCURRENCIES:-1 16}"

# shellcheck source=bench/start_server.sh
source "$ROOT/bench/start_server.sh"
make_bench_workdir serving

start_cuvil_server "$WORK/server.log" "$SERVER" --model-repository "$REPO" \
  --grpc-port 0 --http-port 0 --metrics-port 0 --no-jit-cache "$@"
grep -i "thread" "$WORK/server.log" || true

# utime + stime of the server, in clock ticks (fields 14 and 15 of /proc/PID/stat).
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
hz=$(getconf CLK_TCK)

for proto in $PROTOCOLS; do
  url=$GRPC
  [[ $proto == http ]] && url=$HTTP
  for c in $CONCURRENCIES; do
    csv="$WORK/${proto}_c$c.csv"
    before=$(server_ticks)
    threads_peak=0
    "$PERF" -m mlp -u "$url" -i "$proto" --concurrency-range "$c" \
      --measurement-interval "$MEASUREMENT_MS" --warmup-requests 200 -f "$csv" >"$WORK/perf.out" &
    perf_pid=$!
    while kill -0 "$perf_pid" 2>/dev/null; do
      n=$(ls "/proc/$SERVER_PID/task" | wc -l)
      ((n > threads_peak)) && threads_peak=$n
      sleep 0.2
    done
    wait "$perf_pid"
    after=$(server_ticks)
    # Column 11 of cuvil-perf's CSV row is the window's request count; the 200 warm-up
    # requests are in the CPU time too, so they join the denominator.
    requests=$(awk -F, 'NR == 2 {print $11}' "$csv")
    cpu_ms=$(((after - before) * 1000 / hz))
    echo "== $proto concurrency $c: server threads (peak) $threads_peak, server CPU $cpu_ms ms" \
      "over the run, $((cpu_ms * 1000 / (requests + 200))) us per request (warm-up included)"
    cat "$WORK/perf.out"
  done
done
