#!/usr/bin/env bash
# Quantized zoo models through `cuvilc test`: cuvil-quantize writes per-channel INT8 QDQ models of
# ResNet-18 and MobileNet-V2 (calibrated on the zoo's first data set); cuvilc test runs each on all
# of the float model's data sets (integer convolution, depthwise and matrix-product kernels)
# against the float references, within quantisation error stated per model as an absolute
# tolerance: ResNet-18's logits span -15..17, atol 0.3 (measured max error 0.2-0.3);
# MobileNet-V2's outputs span -0.22..0.2, atol 0.01 (measured < 0.005).
# usage: cuvilc_test_qdq.sh CUVIL_QUANTIZE CUVILC MODELS_DIR WORK_DIR
set -euo pipefail
quantize=$1 cuvilc=$2 models=$(realpath "$3") work=$4
rm -rf "$work" && mkdir -p "$work"
status=0
for spec in resnet18:0.3 mobilenet_v2:0.01; do
  m=${spec%%:*} atol=${spec#*:}
  mkdir -p "$work/q$m"
  "$quantize" "$models/$m/model.onnx" "$work/q$m/model.onnx" \
    --calibration "$models/$m/test_data_set_0" --per-channel > "$work/q$m.quantize.log"
  for d in "$models/$m"/test_data_set_*; do ln -s "$d" "$work/q$m/$(basename "$d")"; done
  "$cuvilc" test --rtol 0 --atol "$atol" "$work/q$m" || status=1
done
exit $status
