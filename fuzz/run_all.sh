#!/usr/bin/env bash
# Builds the fuzz targets (clang-19, libFuzzer + ASan + UBSan) and runs each for SECONDS on its
# seeds (fuzz/make_seeds.sh) after replaying fuzz/regressions/<fuzzer>/. Fails on any crash, leak,
# timeout or out-of-memory; prints executions per fuzzer. Takes no lock: callers that share the
# machine wrap it themselves (flock /tmp/cuvil-build.lock fuzz/run_all.sh 30).
# usage: fuzz/run_all.sh SECONDS [FUZZER...]        (env BUILD_DIR, default build-fuzz; a tree
# already configured with CUVIL_FUZZ=ON, such as build-asan, is reused as it is)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:?usage: run_all.sh SECONDS [FUZZER...]}
shift
fuzzers=("$@")
((${#fuzzers[@]})) || fuzzers=(fuzz_onnx_compile fuzz_model_config fuzz_grpc_infer fuzz_http_infer fuzz_admin
                              fuzz_patch_sandbox fuzz_sequence_log)
build=${BUILD_DIR:-$root/build-fuzz}

start=$SECONDS
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime
mkdir -p "$build"
if grep -qs '^CUVIL_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  # A tree already configured for fuzzing keeps its flags: build-fuzz from an earlier run, or
  # the asan preset's tree (BUILD_DIR=build-asan, as scripts/test.sh runs it in CI), whose
  # libraries carry edge counters but no comparison hooks.
  echo "run_all: reusing $build ($(sed -n 's/^CUVIL_FUZZ_COVERAGE:STRING=//p' "$build/CMakeCache.txt"))"
else
  # -O1 keeps instrumented code quick to build and still fast; NDEBUG as in the release build.
  flags="-O1 -gline-tables-only -DNDEBUG"
  CC=clang-19 CXX=clang++-19 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCUVIL_FUZZ=ON "-DCMAKE_C_FLAGS_RELEASE=$flags" "-DCMAKE_CXX_FLAGS_RELEASE=$flags" \
    > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target cuvil_fuzzers
echo "run_all: build took $((SECONDS - start)) s"

"$root/fuzz/make_seeds.sh" "$build/seeds"
export CUVIL_SOURCE_DIR=$root
failed=()
for f in "${fuzzers[@]}"; do
  bin=$build/bin/$f
  artifacts=$build/artifacts/$f
  corpus=$build/corpus/$f  # Grows across runs; the seeds are only read.
  mkdir -p "$artifacts" "$corpus"
  log=$build/logs/$f.log
  mkdir -p "$(dirname "$log")"
  # Known crashers first: each must now run clean.
  regressions=("$root"/fuzz/regressions/"$f"/*)
  if [[ -e ${regressions[0]} ]]; then
    if ! "$bin" -runs=1 "${regressions[@]}" > "$log.regressions" 2>&1; then
      tail -n 40 "$log.regressions"
      echo "run_all: $f: a regression input crashes again (log $log.regressions)"
      failed+=("$f")
      continue
    fi
  fi
  # A fixed seed (FUZZ_SEED, default 1) makes a CI run repeat the same mutations; long runs pick
  # their own with FUZZ_SEED=0.
  args=(-max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1
        -seed="${FUZZ_SEED:-1}"
        -artifact_prefix="$artifacts/")
  [[ -f $root/fuzz/$f.dict ]] && args+=(-dict="$root/fuzz/$f.dict")
  [[ $f == fuzz_onnx_compile ]] && args+=(-max_len=65536)
  if "$bin" "${args[@]}" "$corpus" "$build/seeds/$f" > "$log" 2>&1; then
    status=ok
  else
    status=CRASH
    failed+=("$f")
    tail -n 60 "$log"
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  echo "run_all: $f: $status, ${execs:-0} executions, ${rate:-0} exec/s, corpus $(ls "$corpus" | wc -l) (log $log)"
done
echo "run_all: total $((SECONDS - start)) s"
if ((${#failed[@]})); then
  echo "run_all: FAILED: ${failed[*]} (inputs under $build/artifacts/)"
  exit 1
fi
