#!/bin/sh
# static_llvm_link READELF PROGRAM...: each PROGRAM (built with CUVIL_STATIC_LLVM) must have LLVM
# linked in and not need libLLVM.so as well (two copies of LLVM abort the process at start), and
# must be a PIE whose relative relocations are packed (DT_RELR: address randomisation kept, and the
# loader applies the archives' relocations in one tight loop).
readelf=$1
shift
status=0
for program in "$@"; do
  before=$status
  dynamic=$("$readelf" -d "$program") || exit 1
  if echo "$dynamic" | grep -q 'Shared library: \[libLLVM'; then
    echo "FAIL $program needs libLLVM.so beside the static LLVM archives"
    status=1
  fi
  if ! "$readelf" -h "$program" | grep -q 'Type: *DYN'; then
    echo "FAIL $program is not a position-independent executable"
    status=1
  fi
  if ! echo "$dynamic" | grep -q '(RELR)'; then
    echo "FAIL $program has no packed relative relocations (DT_RELR)"
    status=1
  fi
  if ! "$readelf" -sW "$program" | grep -v ' UND ' | grep -q ' LLVMInitializeX86Target$'; then
    echo "FAIL $program has no LLVM linked in"
    status=1
  fi
  [ $status -eq "$before" ] && echo "ok $program: LLVM linked in, no libLLVM.so, PIE with DT_RELR"
done
exit $status
