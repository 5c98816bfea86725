# Sourced by the bench scripts: start_cuvil_server LOG SERVER ARGS... starts SERVER ARGS... in the
# background with its log in LOG, waits (up to 300 s) until /v2/health/ready answers 200, and sets
# SERVER_PID, GRPC and HTTP (host:port). Exits the script with the log when the server dies or
# never becomes ready.
start_cuvil_server() {
  local log=$1 server=$2
  shift 2
  "$server" "$@" 2>"$log" >&2 &
  SERVER_PID=$!
  GRPC="" HTTP=""
  local line
  for _ in $(seq 1 3000); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "cuvil-server exited:" >&2; cat "$log" >&2; exit 1
    fi
    line="$(grep -m1 -o 'listening grpc=[^ ]* http=[^ ]* metrics=[^ ]*' "$log" || true)"
    if [[ -n "$line" ]]; then
      GRPC="$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$line")"
      HTTP="$(sed -E 's/.*http=([^ ]+).*/\1/' <<<"$line")"
      if curl -sf -o /dev/null "http://$HTTP/v2/health/ready"; then return 0; fi
    fi
    sleep 0.1
  done
  echo "cuvil-server did not become ready in 300 s:" >&2; cat "$log" >&2; exit 1
}

# make_bench_workdir NAME: sets WORK to a fresh /tmp/cuvil-NAME.XXXXXX folder and SERVER_PID to
# "", and traps EXIT to stop the server start_cuvil_server started (if any) and remove WORK.
make_bench_workdir() {
  WORK="$(mktemp -d "/tmp/cuvil-$1.XXXXXX")"
  SERVER_PID=""
  trap stop_bench_server_and_clean EXIT
}

stop_bench_server_and_clean() {
  if [[ -n "$SERVER_PID" ]]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
