#!/usr/bin/env bash
# An ahead-of-time library of a QDQ model: cuvil-quantize writes per-channel INT8 MobileNet-V2,
# whose convolutions and classifier run on the integer microkernels (cuvil_uk_qconv2d,
# cuvil_uk_qdepthwise2d, cuvil_uk_qmatmul); aot_models.sh builds and runs it on the float model's
# test data against the float references, within quantisation error (atol = rtol = 0.05).
# usage: aot_qdq.sh CUVIL_QUANTIZE CUVILC SOURCE_DIR MODELS_DIR WORK_DIR
set -euo pipefail
quantize=$1 cuvilc=$2 src=$3 models=$4 work=$5
rm -rf "$work" && mkdir -p "$work/models/qmobilenet_v2"
"$quantize" "$models/mobilenet_v2/model.onnx" "$work/models/qmobilenet_v2/model.onnx" \
  --calibration "$models/mobilenet_v2/test_data_set_0" --per-channel > "$work/quantize.log"
for d in "$models/mobilenet_v2"/test_data_set_*; do
  ln -s "$d" "$work/models/qmobilenet_v2/$(basename "$d")"
done
ATOL=0.05 RTOL=0.05 "$src/tests/aot/aot_models.sh" "$cuvilc" "$src" "$work/models" "$work/aot" \
  qmobilenet_v2
