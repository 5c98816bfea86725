#!/usr/bin/env bash
# Ahead-of-time libraries end to end: for each named zoo model, `cuvilc compile --aot` writes
# libNAME.a + NAME.h once, examples/aot/run_model.c is built against them with the system C
# compiler (no Cuvil, LLVM or absl on the link line: only -lm), and every test_data_set_* is run
# and compared with its reference outputs (atol = rtol = 1e-3 unless ATOL / RTOL say otherwise).
# usage: [AOT_TARGET=aarch64 CC=aarch64-linux-gnu-gcc RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"]
#        [AOT_CPU=x86-64 (an LLVM CPU name: a portable library)]
#        [CROSS_CFLAGS="--target=wasm32-wasi ..."]
#        [EXPECT_BODY=x86-64-v3 (the body NAME_tier() must name on every run)]
#        [ATOL=1e-3 RTOL=1e-3 (the tolerance against the reference outputs)]
#        [RUN_ALLOCATES_NOTHING=1 (count heap allocations with tests/aot/alloc_count.c: programs
#         calling NAME_run 0, 1 and 4 times must allocate exactly as often)]
#        [NO_SIMD_OBJDUMP=llvm-objdump (a wasm program must disassemble without any v128 op)]
#        aot_models.sh CUVILC SOURCE_DIR MODELS_DIR WORK_DIR MODEL...
# (a cross target: the C compiler for it, its extra flags, and the emulator or runtime that runs
# its programs)
set -uo pipefail
cuvilc=$1 src=$2 models=$3 work=$4
shift 4
cc=${CC:-cc}
target_args=()
[[ -n ${AOT_TARGET:-} ]] && target_args=(--target "$AOT_TARGET")
[[ -n ${AOT_CPU:-} ]] && target_args+=(--cpu "$AOT_CPU")
read -r -a runner <<< "${RUNNER:-}"
read -r -a cross_cflags <<< "${CROSS_CFLAGS:-}"
count_src=()
[[ -n ${RUN_ALLOCATES_NOTHING:-} ]] && count_src=("$src/tests/aot/alloc_count.c")
passed=0 failed=0
for m in "$@"; do
  out=$work/$m
  rm -rf "$out" && mkdir -p "$out"
  if ! "$cuvilc" compile "$models/$m/model.onnx" --aot "$out" --name "$m" "${target_args[@]}"; then
    echo "FAIL $m: cuvilc compile --aot"; failed=$((failed + 1)); continue
  fi
  if ! "$cc" "${cross_cflags[@]}" -O2 -Wall -Wextra -Werror -I"$out" -DMODEL="$m" \
      "$src/examples/aot/run_model.c" "$src/examples/aot/tensor_proto.c" "${count_src[@]}" \
      "$out/lib$m.a" -lm \
      -o "$out/run_model"; then
    echo "FAIL $m: building run_model.c"; failed=$((failed + 1)); continue
  fi
  if [[ -n ${NO_SIMD_OBJDUMP:-} ]]; then
    simd=$("$NO_SIMD_OBJDUMP" -d "$out/run_model" | grep -c -E 'v128|[fi](8|16|32|64)x[0-9]+\.')
    if ((simd > 0)); then
      echo "FAIL $m: $simd SIMD instructions in a scalar build"; failed=$((failed + 1)); continue
    fi
  fi
  for d in "$models/$m"/test_data_set_*; do
    if result=$("${runner[@]}" "$out/run_model" "$d" --atol "${ATOL:-1e-3}" --rtol "${RTOL:-1e-3}") &&
        [[ -z ${EXPECT_BODY:-} || $result == *"body ${EXPECT_BODY})"* ]]; then
      echo "$result"
      if [[ -n ${RUN_ALLOCATES_NOTHING:-} ]]; then
        # The outputs of the run without a call are garbage: only the count is read.
        counts=()
        for calls in 0 1 4; do
          counts+=("$("${runner[@]}" "$out/run_model" "$d" --repeat "$calls" --atol 1 --rtol 1 2>&1 >/dev/null |
            grep -o 'allocations=.*')")
        done
        echo "no call: ${counts[0]}, one call: ${counts[1]}, four calls: ${counts[2]}"
        if [[ -z ${counts[0]} || ${counts[0]} != "${counts[1]}" || ${counts[0]} != "${counts[2]}" ]]; then
          echo "FAIL $m/$(basename "$d"): ${m}_run allocates"; failed=$((failed + 1))
          continue
        fi
      fi
      echo "PASS $m/$(basename "$d")"; passed=$((passed + 1))
    else
      echo "$result"; echo "FAIL $m/$(basename "$d")"; failed=$((failed + 1))
    fi
  done
done
echo "$passed passed, $failed failed"
((failed == 0 && passed > 0))
