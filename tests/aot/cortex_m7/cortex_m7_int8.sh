#!/usr/bin/env bash
# INT8 models on the emulated Cortex-M7: cuvil-quantize writes a per-channel QDQ copy of each
# model (calibrated on its test_data_set_0), whose convolutions and matrix products run on the
# integer microkernels; the host runs the same quantized model (`cuvilc run`, the JIT) on every
# data set for the references; cortex_m7_models.sh builds and runs the firmware and requires
# every output within one quantisation step of the host's (the scale of the model's last
# QuantizeLinear). The error against the float model's references is printed as well, and must
# stay within 0.05 as tests/aot/aot_qdq.sh requires on the host.
# usage: cortex_m7_int8.sh CUVIL_QUANTIZE CUVILC SOURCE_DIR MODELS_DIR WORK_DIR MODEL...
set -uo pipefail
quantize=$1 cuvilc=$2 src=$3 models=$4 work=$5
shift 5
board=$src/tests/aot/cortex_m7
python=${PYTHON:-/usr/bin/python3}
rm -rf "$work" && mkdir -p "$work/models" "$work/refs"
failed=0 qmodels=()
for m in "$@"; do
  q=q$m
  mkdir -p "$work/models/$q"
  if ! "$quantize" "$models/$m/model.onnx" "$work/models/$q/model.onnx" \
      --calibration "$models/$m/test_data_set_0" --per-channel > "$work/$q.quantize.log"; then
    echo "FAIL $m: cuvil-quantize"; failed=1; continue
  fi
  facts=$("$python" "$board/model_facts.py" "$work/models/$q/model.onnx") || {
    echo "FAIL $m: reading the quantized model"; failed=1; continue
  }
  mapfile -t names < <(awk '$1 == "input" {print $2}' <<< "$facts")
  step=$(awk '$1 == "step" {print $2}' <<< "$facts")
  [[ -n $step ]] || { echo "FAIL $m: the quantized model has no QuantizeLinear"; failed=1; continue; }
  for d in "$models/$m"/test_data_set_*; do
    set_name=$(basename "$d")
    ln -s "$d" "$work/models/$q/$set_name"
    args=()
    for i in "${!names[@]}"; do args+=(--input "${names[$i]}=$d/input_$i.pb"); done
    if ! "$cuvilc" run "$work/models/$q/model.onnx" "${args[@]}" \
        --output-dir "$work/refs/$q/$set_name" > "$work/$q.$set_name.run.log"; then
      echo "FAIL $m: cuvilc run on the host ($set_name)"; failed=1; continue 2
    fi
  done
  echo "$q: one quantisation step = $step"
  if ! ATOL=$step RTOL=0 REFS=$work/refs "$board/cortex_m7_models.sh" "$cuvilc" "$src" \
      "$work/models" "$work/firmware" "$q"; then
    rc=$?
    ((rc == 77)) && exit 77
    failed=1; continue
  fi
  sets=("$models/$m"/test_data_set_*)
  echo "$q against the float model's references (atol 0.05):"
  if ! "$work/firmware/host_tool" compare "$work/firmware/$q/qemu.log" 0.05 0 "${sets[@]}"; then
    echo "FAIL $m: int8 outputs too far from the float references"; failed=1; continue
  fi
  qmodels+=("$q")
done
echo "int8 models that passed: ${qmodels[*]:-none}"
((failed == 0))
