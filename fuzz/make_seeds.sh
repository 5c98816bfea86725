#!/usr/bin/env bash
# Builds the fuzzers' seed corpora in OUT_DIR/<fuzzer>/ from the ONNX conformance models
# (libonnx-testdata), the example model repository and hand-written requests.
# usage: fuzz/make_seeds.sh OUT_DIR     (needs protoc to encode the protobuf requests)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: make_seeds.sh OUT_DIR}
node_dir=${CUVIL_ONNX_NODE_DIR:-/usr/share/libonnx-testdata/data/node}
rm -rf "$out"
mkdir -p "$out"/{fuzz_onnx_compile,fuzz_model_config,fuzz_grpc_infer,fuzz_http_infer,fuzz_admin}

# ONNX: the first core conformance case of each op family (test_add, test_add_bcast -> add), so
# a short run covers every op without spending its time on the 490 cases' initial pass.
declare -A seen
while read -r case; do
  [[ -z $case || $case == \#* ]] && continue
  family=${case#test_}
  family=${family%%_*}
  [[ -n ${seen[$family]:-} ]] && continue
  [[ -f $node_dir/$case/model.onnx ]] || continue
  seen[$family]=1
  cp "$node_dir/$case/model.onnx" "$out/fuzz_onnx_compile/$case.onnx"
done < "$root/tests/conformance/core-cases.txt"

# Model configs: the example repository's, plus hand-written ones touching every section.
for cfg in "$root"/examples/model-repository/*/config.pbtxt; do
  cp "$cfg" "$out/fuzz_model_config/$(basename "$(dirname "$cfg")").pbtxt"
done
cat > "$out/fuzz_model_config/full.pbtxt" <<'PB'
name: "mlp" backend: "onnxruntime" max_batch_size: 8
version_policy { specific { versions: [1, 3] } }
input [ { name: "input" data_type: TYPE_FP32 format: FORMAT_NONE dims: [ 784 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ -1 ] label_filename: "labels.txt" } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 preserve_ordering: true
  priority_levels: 3 default_priority_level: 2
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000
                         allow_timeout_override: true max_queue_size: 16 }
  priority_queue_policy { key: 1 value { max_queue_size: 4 } }
}
instance_group [ { name: "cpu" count: 2 kind: KIND_CPU } ]
default_model_filename: "model.onnx"
parameters { key: "intra_op_threads" value { string_value: "1" } }
model_warmup [ { name: "w" batch_size: 2 count: 1
                 inputs { key: "input" value { data_type: TYPE_FP32 dims: [ 784 ] zero_data: true } } } ]
PB
cat > "$out/fuzz_model_config/minimal.pbtxt" <<'PB'
max_batch_size: 0
version_policy { latest { num_versions: 2 } }
PB
printf '%s' '{"name":"mlp","max_batch_size":4,"input":[{"name":"input","data_type":"TYPE_FP32","dims":["784"]}],"output":[{"name":"output","data_type":"TYPE_FP32","dims":["10"]}],"dynamic_batching":{"max_queue_delay_microseconds":"50"},"instance_group":[{"count":1,"kind":"KIND_CPU"}]}' \
  > "$out/fuzz_model_config/mlp.json"

# gRPC ModelInferRequest, encoded from text with protoc.
encode() {  # encode MESSAGE PROTO_FILE OUT [PREFIX_BYTE] < text
  local tmp
  tmp=$(mktemp)
  protoc --encode="$1" --proto_path="$root/proto" "$root/proto/$2" > "$tmp"
  { [[ -z ${4:-} ]] || printf "\\x$4"; cat "$tmp"; } > "$3"
  rm -f "$tmp"
}
zeros=$(printf '0,%.0s' $(seq 783))0
encode inference.ModelInferRequest grpc_service.proto "$out/fuzz_grpc_infer/typed" <<PB
model_name: "mlp" id: "typed"
inputs { name: "input" datatype: "FP32" shape: [1, 784] contents { fp32_contents: [$zeros] } }
outputs { name: "output" }
parameters { key: "priority" value { uint64_param: 1 } }
parameters { key: "timeout" value { int64_param: 100000 } }
PB
raw=$(head -c 3136 /dev/zero | od -An -v -tx1 | tr -d ' \n' | sed 's/../\\x&/g')
encode inference.ModelInferRequest grpc_service.proto "$out/fuzz_grpc_infer/raw" <<PB
model_name: "mlp" model_version: "1"
inputs { name: "input" datatype: "FP32" shape: [1, 784] }
raw_input_contents: "$raw"
PB
encode inference.ModelInferRequest grpc_service.proto "$out/fuzz_grpc_infer/int_contents" <<'PB'
model_name: "mlp"
inputs { name: "input" datatype: "INT8" shape: [1, 2] contents { int_contents: [1, -300] } }
inputs { name: "x" datatype: "BOOL" shape: [2] contents { bool_contents: [true, false] } }
outputs { name: "missing" }
PB

# HTTP bodies: JSON tensors, and Triton's binary extension ("#<header length>\n" first).
http=$out/fuzz_http_infer
printf '{"id":"a","inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[%s]}],"outputs":[{"name":"output","parameters":{"classification":3}}]}' \
  "$zeros" > "$http/json_flat"
printf '{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[[%s]]}],"parameters":{"binary_data_output":true,"priority":"1","timeout":5}}' \
  "$zeros" > "$http/json_nested"
printf '{"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","data":["a","bc"]},{"name":"b","shape":[1],"datatype":"BOOL","data":[true]},{"name":"u","shape":[1],"datatype":"UINT64","data":[18446744073709551615]}]}' \
  > "$http/json_types"
header='{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","parameters":{"binary_data_size":3136}}],"outputs":[{"name":"output","parameters":{"binary_data":true}}]}'
{ printf '#%d\n%s' "${#header}" "$header"; head -c 3136 /dev/zero; } > "$http/binary"
header='{"inputs":[{"name":"input","shape":[2,784],"datatype":"FP32","parameters":{"binary_data_size":8}}]}'
{ printf '#%d\n%s' "${#header}" "$header"; head -c 12 /dev/zero; } > "$http/binary_short"

# Admin: a mode byte (see fuzz_admin.cc) then the input.
adm=$out/fuzz_admin
printf '\x00mlp' > "$adm/name"
printf '\x00../etc' > "$adm/name_dots"
printf '\x03Bearer fuzz-token' > "$adm/auth"
encode inference.RepositoryModelLoadRequest grpc_service.proto "$adm/triton_load" 01 <<'PB'
model_name: "m"
parameters { key: "config" value { string_param: "{\"max_batch_size\":2,\"input\":[{\"name\":\"x\",\"data_type\":\"TYPE_FP32\",\"dims\":[4]}]}" } }
parameters { key: "file:1/model.onnx" value { bytes_param: "\010\007" } }
PB
encode inference.RepositoryModelLoadRequest grpc_service.proto "$adm/triton_load_base64" 01 <<'PB'
model_name: "m"
parameters { key: "file:2/model.onnx" value { string_param: "CAc=" } }
parameters { key: "file:3/model.onnx" value { bool_param: true } }
PB
# An inline admin load of a small real model (abs), so valid loads are in the corpus.
abs_onnx=$node_dir/test_abs/model.onnx
if [[ -f $abs_onnx ]]; then
  abs_escaped=$(od -An -v -tx1 "$abs_onnx" | tr -d ' \n' | sed 's/../\\x&/g')
  encode cuvil.admin.v1.LoadModelRequest admin.proto "$adm/admin_load" 02 <<PB
name: "abs" version: 2 onnx_model: "$abs_escaped"
config_pbtxt: "max_batch_size: 0"
PB
fi
echo "make_seeds: $(find "$out" -type f | wc -l) seeds in $out"
