#!/usr/bin/env bash
# The yardstick for the microcontroller kernels: make_reference.py writes the quantized model's
# loops as plain C (refMODEL.c, the C API run_model.c uses), arm-none-eabi-gcc -O2 builds it into
# the same board harness, qemu runs it with the same data sets and counting, and its outputs must
# match the host's references within one quantisation step like Cuvil's. Prints both
# instruction counts per inference and their ratio (a figure, not a pass condition).
# usage: cortex_m7_reference.sh SOURCE_DIR QMODEL_ONNX REFS_DIR CUVIL_FIRMWARE_DIR WORK_DIR STEP
#   CUVIL_FIRMWARE_DIR: cortex_m7_models.sh's output for the model (test_data.S, qemu.log), and
#   its host_tool one level up.
set -uo pipefail
src=$1 model=$2 refs=$3 fw=$4 work=$5 step=$6
board=$src/tests/aot/cortex_m7
python=${PYTHON:-/usr/bin/python3}
name=ref$(basename "$fw")
rm -rf "$work" && mkdir -p "$work"
"$python" "$board/make_reference.py" "$model" "$work" "$name" || { echo "FAIL: make_reference.py"; exit 1; }
if ! arm-none-eabi-gcc -mcpu=cortex-m7 -mfpu=fpv5-sp-d16 -mfloat-abi=hard -mthumb -O2 -Wall -Wextra \
    -Werror -ffunction-sections -fdata-sections -I"$work" -I"$board" -DMODEL="$name" \
    "$board/startup.c" "$board/run_model.c" "$fw/test_data.S" "$work/$name.c" -lm -nostartfiles \
    --specs=nano.specs --specs=nosys.specs -T "$board/mps2_an500.ld" -Wl,--gc-sections \
    -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=memalign \
    -Wl,--wrap=free -Wl,--no-warn-execstack -o "$work/firmware.elf"; then
  echo "FAIL: building the reference firmware"; exit 1
fi
timeout "${QEMU_TIMEOUT:-120}" qemu-system-arm -M mps2-an500 -nographic -monitor none \
  -serial none -semihosting -icount shift=0 -kernel "$work/firmware.elf" > "$work/qemu.log" 2>&1 ||
  { tail -5 "$work/qemu.log"; echo "FAIL: the reference firmware failed"; exit 1; }
sets=()
for d in "$refs"/test_data_set_*; do sets+=("$d"); done
echo "plain C reference ($name.c, arm-none-eabi-gcc -O2):"
"$fw/../host_tool" compare "$work/qemu.log" "$step" 0 "${sets[@]}" ||
  { echo "FAIL: the reference's outputs differ from the host's by more than one step"; exit 1; }
ticks() { awk '$1 == "set" && $2 == 0 {print $NF}' "$1"; }
ref=$(ticks "$work/qemu.log") cuvil=$(ticks "$fw/qemu.log")
[[ -n $ref && -n $cuvil && $cuvil -gt 0 ]] || { echo "FAIL: no instruction counts"; exit 1; }
awk -v r="$ref" -v c="$cuvil" 'BEGIN {
  printf "instructions per inference (set 0): Cuvil %d, plain C reference %d: %.2fx fewer\n",
    c * 40, r * 40, r / c }'
