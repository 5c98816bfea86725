#!/usr/bin/env bash
# The keyword-spotting DS-CNN on the emulated Cortex-M7: make_dscnn.py writes the model and three
# data sets (PyTorch, random weights with a fixed seed), then the float model runs through
# cortex_m7_models.sh (within 1e-4 of PyTorch) and its per-channel INT8 copy through
# cortex_m7_int8.sh (within one quantisation step of the host's run of that copy). Both print
# the library's flash and SRAM bytes and the instructions per inference; then
# cortex_m7_reference.sh runs a plain C build of the INT8 model's loops on the same board and
# prints both instruction counts. The INT8 library must fit 64 KiB of flash and 32 KiB of SRAM.
# usage: cortex_m7_dscnn.sh CUVIL_QUANTIZE CUVILC SOURCE_DIR WORK_DIR
# Exits 77 (skip) when /usr/bin/python3 cannot import torch and onnx, or the ARM tools are missing.
set -uo pipefail
quantize=$1 cuvilc=$2 src=$3 work=$4
board=$src/tests/aot/cortex_m7
python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import torch, onnx' 2> /dev/null; then
  echo "SKIP: $python cannot import torch and onnx (python3-torch, python3-onnx)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work/models"
"$python" "$board/make_dscnn.py" "$work/models/dscnn" || { echo "FAIL: make_dscnn.py"; exit 1; }
"$board/cortex_m7_models.sh" "$cuvilc" "$src" "$work/models" "$work/float" dscnn
rc=$?
((rc == 0)) || exit $rc
# Issue 44's budget for the INT8 keyword spotter: 64 KiB of flash (code and weights) and 32 KiB of
# SRAM (static RAM and the batch-1 arena).
FLASH_BUDGET=65536 SRAM_BUDGET=32768 \
  "$board/cortex_m7_int8.sh" "$quantize" "$cuvilc" "$src" "$work/models" "$work/int8" dscnn
rc=$?
((rc == 0)) || exit $rc
qmodel=$work/int8/models/qdscnn/model.onnx
step=$("$python" "$board/model_facts.py" "$qmodel" | awk '$1 == "step" {print $2}')
"$board/cortex_m7_reference.sh" "$src" "$qmodel" "$work/int8/refs/qdscnn" \
  "$work/int8/firmware/qdscnn" "$work/reference" "$step"
