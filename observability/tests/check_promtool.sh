#!/usr/bin/env bash
# Lints Cuvil's exposition with promtool. Usage: check_promtool.sh DUMP_BINARY PROMTOOL OUT_DIR
# 1. default output: promtool must report nothing at all;
# 2. --triton output: the only findings allowed are those about Triton's own names (nv_*), which
#    Triton dictates (counters without _total, "_us" unit abbreviations).
set -euo pipefail
dump=$1 promtool=$2 out=$3
mkdir -p "$out"

"$dump" > "$out/metrics.prom"
if ! "$promtool" check metrics < "$out/metrics.prom" > "$out/promtool.txt" 2>&1 ||
   [[ -s "$out/promtool.txt" ]]; then
  echo "promtool findings on default output:"; cat "$out/promtool.txt"; exit 1
fi
grep -q '^cuvil_inference_requests_total{' "$out/metrics.prom"
grep -q '^process_open_fds ' "$out/metrics.prom"

"$dump" --triton > "$out/metrics-triton.prom"
grep -q '^nv_inference_request_success{' "$out/metrics-triton.prom"
"$promtool" check metrics < "$out/metrics-triton.prom" > "$out/promtool-triton.txt" 2>&1 || true
if grep -v '^nv_inference_' "$out/promtool-triton.txt" | grep -q .; then
  echo "promtool findings on non-Triton names in --triton output:"; cat "$out/promtool-triton.txt"
  exit 1
fi
echo "promtool: default output clean; triton-compat findings limited to nv_* names:"
cat "$out/promtool-triton.txt"
