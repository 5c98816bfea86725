#!/usr/bin/env bash
# Checks the USDT notes of a binary that uses every CUVIL_PROBE_* macro (observability_test):
# provider cuvil, each probe present with a non-zero semaphore address and the documented
# arguments (8@ = pointer/const char*, -8@ = int64). Usage: check_probes.sh BINARY
set -euo pipefail
bin=$1
notes=$(readelf -n "$bin")
declare -A expected=(
  [request__start]="s s i" [request__done]="s s i i i" [batch__start]="s i"
  [batch__done]="s i i" [jit__compile__start]="s" [jit__compile__done]="s i" [cache__hit]="s"
  [cache__miss]="s" [patch__applied]="s s" [patch__rolled__back]="s s" [model__load]="s s"
  [model__unload]="s s"
)
fail=0
for probe in "${!expected[@]}"; do
  block=$(grep -A3 -E "^\s+Name: ${probe}$" <<<"$notes" | head -4 || true)
  if ! grep -q "Provider: cuvil" <<<"$(grep -B1 -E "^\s+Name: ${probe}$" <<<"$notes")"; then
    echo "FAIL $probe: no cuvil probe note"; fail=1; continue
  fi
  sem=$(grep -oE 'Semaphore: 0x[0-9a-f]+' <<<"$block" | head -1 | awk '{print $2}')
  if [[ -z "$sem" || "$sem" =~ ^0x0+$ ]]; then
    echo "FAIL $probe: no semaphore"; fail=1; continue
  fi
  args=$(grep -E '^\s+Arguments:' <<<"$block" | head -1 | sed 's/^ *Arguments: *//')
  got=""
  for a in $args; do
    case "$a" in
      8@*) got+="s " ;;
      -8@*) got+="i " ;;
      *) got+="? " ;;
    esac
  done
  if [[ "${got% }" != "${expected[$probe]}" ]]; then
    echo "FAIL $probe: arguments '$args' (want ${expected[$probe]})"; fail=1; continue
  fi
  echo "ok $probe ($args)"
done
exit $fail
