#!/usr/bin/env bash
# Cortex-M7 firmware end to end: for each model, `cuvilc compile --aot --target cortex-m7` writes
# libNAME.a + NAME.h; the board harness (startup.c, mps2_an500.ld, run_model.c) and every
# test_data_set_*'s inputs (linked in as data, test_data.S) become one firmware image built with
# arm-none-eabi-gcc; qemu-system-arm -M mps2-an500 runs it (semihosting output, -icount shift=0
# so that the CMSDK timer counts instructions); the host compares the printed outputs with the
# references (atol = rtol = 1e-4 unless ATOL / RTOL say otherwise) and checks that NAME_run made
# no heap call. Prints, per model, the bytes of code, weights and other read-only data the
# library puts in flash, its static RAM and the arena at each batch, and the instructions per
# NAME_run.
# usage: [ATOL=1e-4 RTOL=1e-4] [REFS=DIR (references in DIR/MODEL/test_data_set_*/output_*.pb
#         instead of the model's own)] [FLASH_BUDGET=bytes SRAM_BUDGET=bytes (fail when the
#         library's flash, or its static RAM plus the batch-1 arena, exceed them)]
#        [AOT_RUNTIME=libcuvil_aot_runtime-cortex-m7.a (another runtime archive than cuvilc's)]
#        cortex_m7_models.sh CUVILC SOURCE_DIR MODELS_DIR WORK_DIR MODEL...
# Exits 77 (CTest's skip code here) when arm-none-eabi-gcc or qemu-system-arm is missing.
set -uo pipefail
cuvilc=$1 src=$2 models=$3 work=$4
shift 4
arm_cc=${ARM_CC:-arm-none-eabi-gcc}
qemu=${QEMU:-qemu-system-arm}
for tool in "$arm_cc" "$qemu" "${HOST_CC:-cc}"; do
  if ! command -v "$tool" > /dev/null; then
    echo "SKIP: $tool not found (scripts/install-deps.sh installs gcc-arm-none-eabi," \
      "libnewlib-arm-none-eabi, libstdc++-arm-none-eabi-dev and qemu-system-arm)"
    exit 77
  fi
done
board=$src/tests/aot/cortex_m7
mkdir -p "$work"
host_tool=$work/host_tool
if ! "${HOST_CC:-cc}" -O2 -Wall -Werror -I"$src/examples/aot" "$board/host_tool.c" \
    "$src/examples/aot/tensor_proto.c" -lm -o "$host_tool"; then
  echo "FAIL: building host_tool.c"; exit 1
fi
cpu_flags=(-mcpu=cortex-m7 -mfpu=fpv5-sp-d16 -mfloat-abi=hard -mthumb)
passed=0 failed=0
for m in "$@"; do
  out=$work/$m
  rm -rf "$out" && mkdir -p "$out"
  if ! "$cuvilc" compile "$models/$m/model.onnx" --aot "$out" --name "$m" --target cortex-m7 \
      ${AOT_RUNTIME:+--aot-runtime "$AOT_RUNTIME"} > "$out/compile.log"; then
    echo "FAIL $m: cuvilc compile --aot --target cortex-m7"; failed=$((failed + 1)); continue
  fi
  # The inputs of every data set as read-only data: per set and input, address and byte count.
  sets=() refs=() table="" s=0 ok=1
  {
    echo '  .section .rodata.cuvil_test_data,"a"'
    for d in "$models/$m"/test_data_set_*; do
      sets+=("$d")
      refs+=("${REFS:+$REFS/$m/$(basename "$d")}")
      [[ -z ${REFS:-} ]] && refs[-1]=$d
      for in_pb in "$d"/input_*.pb; do
        i=${in_pb##*/input_}; i=${i%.pb}
        bin=$out/set${s}_input_$i.bin
        "$host_tool" raw "$in_pb" "$bin" || ok=0
        echo "  .balign 64"
        echo "set${s}_input_$i: .incbin \"$bin\""
        table+="  .word set${s}_input_$i, $(stat -c %s "$bin")"$'\n'
      done
      s=$((s + 1))
    done
    echo '  .balign 4'
    echo '  .global cuvil_test_num_sets'
    echo "cuvil_test_num_sets: .word $s"
    echo '  .global cuvil_test_inputs'
    echo 'cuvil_test_inputs:'
    echo -n "$table"
  } > "$out/test_data.S"
  ((ok)) || { echo "FAIL $m: reading the inputs"; failed=$((failed + 1)); continue; }
  fw=$out/firmware.elf
  if ! "$arm_cc" "${cpu_flags[@]}" -O2 -Wall -Wextra -Werror -ffunction-sections -fdata-sections \
      -I"$out" -I"$board" -DMODEL="$m" "$board/startup.c" "$board/run_model.c" "$out/test_data.S" \
      "$out/lib$m.a" -lm -nostartfiles --specs=nano.specs --specs=nosys.specs \
      -T "$board/mps2_an500.ld" -Wl,--gc-sections -Wl,-Map="$out/firmware.map" \
      -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=memalign \
      -Wl,--wrap=free -Wl,--no-warn-execstack -o "$fw"; then
    echo "FAIL $m: building the firmware"; failed=$((failed + 1)); continue
  fi
  # No double-precision arithmetic: the FPU is single-precision, so any would be soft-float.
  doubles=$(arm-none-eabi-nm "$fw" | grep -E ' T __aeabi_(d[a-z]+|f2d|d2f|[il]2d|ui2d|ul2d)$' |
    awk '{print $3}' | tr '\n' ' ')
  if [[ -n $doubles ]]; then
    echo "FAIL $m: double-precision helpers linked: $doubles"; failed=$((failed + 1)); continue
  fi
  # Bytes the library contributes, from the link map: code (.text*; the model's own objects
  # apart from the runtime's), read-only data (.rodata*, the weights among them) and static RAM
  # (.data*, .bss*), of the members of libNAME.a that the --gc-sections link keeps.
  read -r code rodata ram model_code < <(awk -v lib="lib$m.a(" '
    function hex(s,    v, i) {
      v = 0
      for (i = 3; i <= length(s); ++i) v = v * 16 + index("0123456789abcdef", tolower(substr(s, i, 1))) - 1
      return v
    }
    function add(sec, size, file) {
      if (index(file, lib) == 0) return
      if (sec ~ /^\.text/) { code += size; if (file ~ /_(model|glue)\.o\)$/) model += size }
      else if (sec ~ /^\.rodata/) rodata += size
      else if (sec ~ /^\.(data|bss)/) ram += size
    }
    /^ \.[A-Za-z]/ {
      if (NF >= 4 && $2 ~ /^0x/) { add($1, hex($3), $4); pending = "" } else if (NF == 1) pending = $1
      next
    }
    pending != "" && $1 ~ /^0x/ && NF >= 3 { add(pending, hex($2), $3); pending = ""; next }
    { pending = "" }
    END { printf "%d %d %d %d\n", code, rodata, ram, model }' "$out/firmware.map")
  weights=$(arm-none-eabi-nm -S "$fw" | awk -v w="${m}__cuvil_weights" '$4 == w {print $2}')
  weights=$((16#${weights:-0}))
  log=$out/qemu.log
  timeout "${QEMU_TIMEOUT:-120}" "$qemu" -M mps2-an500 -nographic -monitor none -serial none \
    -semihosting -icount shift=0 -kernel "$fw" > "$log" 2>&1
  rc=$?
  if ((rc != 0)); then
    tail -5 "$log"; echo "FAIL $m: the firmware exited with $rc"; failed=$((failed + 1)); continue
  fi
  if ! result=$("$host_tool" compare "$log" "${ATOL:-1e-4}" "${RTOL:-1e-4}" "${refs[@]}"); then
    echo "$result"; echo "FAIL $m"; failed=$((failed + 1)); continue
  fi
  echo "$result"
  arena1=$(awk '$1 == "set" && $4 == 1 {print $6; exit}' "$log")
  size_line="sizes $m: code $code (model $model_code, runtime $((code - model_code))), weights ${weights:-0}, other rodata $((rodata - ${weights:-0})),"
  size_line+=" static RAM $ram, arena at batch 1 ${arena1:-n/a} bytes (firmware: $(arm-none-eabi-size "$fw" | awk 'NR == 2 {print "text " $1 ", data " $2 ", bss " $3}'))"
  echo "$size_line"
  flash=$((code + rodata)) sram=$((ram + ${arena1:-0}))
  if [[ -n ${FLASH_BUDGET:-} ]] && ((flash > FLASH_BUDGET)); then
    echo "FAIL $m: $flash bytes of flash over the budget of $FLASH_BUDGET"; failed=$((failed + 1)); continue
  fi
  if [[ -n ${SRAM_BUDGET:-} ]] && ((sram > SRAM_BUDGET)); then
    echo "FAIL $m: $sram bytes of SRAM over the budget of $SRAM_BUDGET"; failed=$((failed + 1)); continue
  fi
  echo "PASS $m"; passed=$((passed + 1))
done
echo "$passed passed, $failed failed"
((failed == 0 && passed > 0))
