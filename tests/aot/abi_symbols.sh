#!/usr/bin/env bash
# Every entry point runtime/include/cuvil/runtime/abi.def marks as provided to AOT libraries
# (in_aot true) is defined, as a global function, in every AOT runtime archive given: the host's
# and each cross target's. A kernel added to the ABI but left out of one target's runtime fails
# here instead of at a user's link.
# usage: abi_symbols.sh LLVM_NM ABI_DEF ARCHIVE...
set -uo pipefail
nm=$1 def=$2
shift 2
mapfile -t names < <(sed -n 's/^CUVIL_ABI(\([a-z0-9_]*\), *true,.*/\1/p' "$def")
if ((${#names[@]} < 5)); then
  echo "FAIL: read only ${#names[@]} in_aot entry points from $def"; exit 1
fi
failed=0
for archive in "$@"; do
  if [[ ! -f $archive ]]; then
    echo "FAIL: $archive does not exist"; failed=1; continue
  fi
  defined=$("$nm" --defined-only --extern-only --format=just-symbols "$archive" 2> /dev/null | sort -u)
  missing=()
  for n in "${names[@]}"; do
    grep -qx "$n" <<< "$defined" || missing+=("$n")
  done
  if ((${#missing[@]} > 0)); then
    echo "FAIL $(basename "$archive"): not defined: ${missing[*]}"; failed=1
  else
    echo "ok $(basename "$archive"): all ${#names[@]} entry points"
  fi
done
((failed == 0))
