#!/usr/bin/env bash
# Installs dependencies, checks formatting, builds Cuvil and runs every test: the Release build's full CTest suite
# (unit, integration, ONNX conformance, model zoo), then the same suite under AddressSanitizer +
# UndefinedBehaviorSanitizer, then the multithreaded unit tests under ThreadSanitizer, then every
# fuzzer for a bounded time.
# Exits non-zero if anything fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/check-format.sh"
start=$(date +%s)
phases=()
# Prints every phase's time and each tree's slowest tests last, where a CI log's tail shows them.
summary() {
  local rc=$? tree
  set +eo pipefail
  echo "== test.sh summary (exit $rc) =="
  for p in "${phases[@]}"; do echo "  $p"; done
  for tree in build build-asan; do
    [[ -f "$root/$tree/Testing/Temporary/CTestCostData.txt" ]] || continue
    echo "  slowest tests in $tree (s):"
    awk 'NF == 3 { printf "    %7.1f %s\n", $3, $1 }' \
      "$root/$tree/Testing/Temporary/CTestCostData.txt" | sort -rn | head -8
  done
  exit "$rc"
}
trap summary EXIT
# CUVIL_REQUIRE_ALL_TESTS: a test whose tool is missing stops the build naming its package
# instead of being left out (install-deps.sh above installs them all).
"$root/scripts/build.sh" release -DCUVIL_REQUIRE_ALL_TESTS=ON
phases+=("release build: $(( $(date +%s) - start )) s")
# The realmodels corpus (tests/realmodels/corpus_test.py, ~10 min with its export) is run by hand:
# `cd build && ctest -L realmodels`; so is the container image's run test (`ctest -L image`, after
# deploy/container/build-image.sh: CI builds no image).
(cd "$root/build" && ctest --output-on-failure -j "$(nproc)" -LE "realmodels|image")
phases+=("release build + tests: $(( $(date +%s) - start )) s")
echo "${phases[-1]}"
start=$(date +%s)
# Sanitizer builds (CMakePresets.json) use -O1: a third of -O3's compile time, still fast enough.
# The asan tree is clang's and also builds the fuzzers (libraries with libFuzzer's edge counters),
# so the fuzz step below reuses it instead of building every library a fourth time.
# Tests labelled release_only (cross-target AOT programs run by qemu or Node, which ASan does not
# instrument, and a 200-inference accuracy statistic) are left out here: about 6 of 31 minutes.
"$root/scripts/build.sh" asan -DCUVIL_REQUIRE_ALL_TESTS=ON
phases+=("asan build: $(( $(date +%s) - start )) s")
(cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --output-on-failure -j "$(nproc)" -LE 'release_only|realmodels|image')
phases+=("asan build + tests: $(( $(date +%s) - start )) s")
echo "${phases[-1]}"
start=$(date +%s)
# TSan covers the code whose locking we own; Debian's gRPC and abseil are not instrumented, so the
# server integration tests stay with ASan. The JIT cache and hot-patching tests cover concurrent
# compile-once lookups and executions racing patch commits and rollbacks (LLVM is not instrumented
# either, so races inside it would go unseen; ours in jitcache/ are checked).
tsan_tests="runtime_test compiler_test scheduler_test observability_test object_cache_test tiered_start_test patch_test patch_trust_test batch_split_test sequence_batcher_test"
TARGETS="$tsan_tests ukernels_test" "$root/scripts/build.sh" tsan
for t in $tsan_tests; do
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$root/build-tsan/bin/$t" --gtest_brief=1
done
# The conv drivers' work sharing (TaskRanges); the rest of ukernels_test shares nothing.
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$root/build-tsan/bin/ukernels_test" \
  --gtest_brief=1 --gtest_filter='TaskRanges*:ParallelTasks*'

phases+=("tsan build + tests: $(( $(date +%s) - start )) s")
echo "${phases[-1]}"
start=$(date +%s)
# Fuzzers (clang-19, libFuzzer + ASan + UBSan, built above in the asan tree): replay every
# recorded crash, then fuzz each target for a bounded time from the seeds (fuzz/README.md has the
# long-run command, whose build-fuzz tree adds comparison hooks).
BUILD_DIR="$root/build-asan" "$root/fuzz/run_all.sh" "${CUVIL_FUZZ_SECONDS:-20}"
phases+=("fuzz runs: $(( $(date +%s) - start )) s")
echo "${phases[-1]}"
