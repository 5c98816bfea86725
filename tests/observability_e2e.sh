#!/usr/bin/env bash
# Observability end to end against the real cuvil-server binary:
#  1. readelf -n shows the cuvil USDT probes (with semaphores);
#  2. a real Prometheus server scrapes cuvil-server and answers histogram_quantile(0.99, ...);
#  3. cuvil-probe (root + BPF) attached to the server counts exactly N requests.
# usage: observability_e2e.sh SERVER CUVIL_PROBE REPO
set -uo pipefail
server_bin=$1
probe_bin=$2
repo=$3
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. Probes in the binary.
notes=$(readelf -n "$server_bin")
for p in request__start request__done batch__start batch__done model__load jit__compile__done; do
  grep -q "Name: $p" <<<"$notes" || fail "probe $p missing from readelf -n"
done
grep -A4 "Name: request__done" <<<"$notes" | grep -q "Semaphore: 0x0*[1-9a-f]" || fail "request__done has no semaphore"
echo "PASS readelf: cuvil probes with semaphores present"

# Server on ephemeral ports.
"$server_bin" --model-repository "$repo" --grpc-port 0 --http-port 0 --metrics-port 0 2> "$tmp/server.log" &
server_pid=$!
pids+=("$server_pid")
for _ in $(seq 1 600); do grep -q "server ready" "$tmp/server.log" && break; sleep 0.1; done
grep -q "server ready" "$tmp/server.log" || fail "server did not start: $(cat "$tmp/server.log")"
http=$(grep -o "http=[^ ]*" "$tmp/server.log" | head -1 | cut -d= -f2)
metrics=$(grep -o "metrics=[^ ]*" "$tmp/server.log" | head -1 | cut -d= -f2)
body=$(/usr/bin/python3 -c 'import json; print(json.dumps({"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[0.5]*784}]}))')
infer() { curl -sf -o /dev/null -X POST "http://$http/v2/models/mlp/infer" -H 'Content-Type: application/json' -d "$body"; }

# 3. cuvil-probe first, so it sees a known number of requests.
probe_status="skipped"
if [[ $(id -u) -eq 0 && -x "$probe_bin" ]]; then
  "$probe_bin" --pid "$server_pid" --metrics-port 0 > "$tmp/probe.log" 2>&1 &
  probe_pid=$!
  pids+=("$probe_pid")
  for _ in $(seq 1 100); do grep -q "listening metrics=" "$tmp/probe.log" && break; sleep 0.1; done
  if grep -q "listening metrics=" "$tmp/probe.log"; then
    probe_addr=$(grep -o "listening metrics=[^ ]*" "$tmp/probe.log" | cut -d= -f2)
    sleep 0.5
    n=37
    for _ in $(seq 1 $n); do infer || fail "infer failed"; done
    sleep 0.5
    got=$(curl -sf "http://$probe_addr/metrics" | awk '/^cuvil_probe_requests_total\{model="mlp"/ {s+=$2} END {print s+0}')
    [[ "$got" == "$n" ]] || fail "cuvil-probe counted $got requests, expected $n"
    curl -sf "http://$probe_addr/metrics" | promtool check metrics || fail "cuvil-probe exposition rejected by promtool"
    probe_status="counted exactly $n requests"
  else
    probe_status="skipped ($(head -1 "$tmp/probe.log"))"
  fi
fi
echo "cuvil-probe: $probe_status"

# 2. A real Prometheus scraping the server.
for _ in $(seq 1 20); do infer; done
cat > "$tmp/prometheus.yml" <<YML
global: { scrape_interval: 1s, evaluation_interval: 1s }
scrape_configs:
  - job_name: cuvil
    static_configs: [ { targets: ["$metrics"] } ]
YML
prom_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
  --web.listen-address="127.0.0.1:$prom_port" > "$tmp/prom.log" 2>&1 &
pids+=("$!")
query='histogram_quantile(0.99, sum by (le) (rate(cuvil_request_duration_seconds_bucket{model="mlp"}[1m])))'
value=""
for _ in $(seq 1 60); do
  infer
  sleep 0.5
  value=$(curl -sfG "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$query" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null)
  [[ -n "$value" && "$value" != "NaN" ]] && break
done
[[ -n "$value" && "$value" != "NaN" ]] || fail "Prometheus returned no p99 (log: $(tail -3 "$tmp/prom.log"))"
/usr/bin/python3 -c "import sys; v=float('$value'); sys.exit(0 if 0 < v < 10 else 1)" || fail "p99 $value out of range"
echo "PASS prometheus: p99 of mlp request duration = ${value}s"
