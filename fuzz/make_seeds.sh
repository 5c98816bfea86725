#!/usr/bin/env bash
# Builds the fuzzers' seed corpora in OUT_DIR/<fuzzer>/ from the ONNX conformance models
# (libonnx-testdata), the example model repository and hand-written requests.
# usage: fuzz/make_seeds.sh OUT_DIR     (needs protoc to encode the protobuf requests)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: make_seeds.sh OUT_DIR}
node_dir=${CUVIL_ONNX_NODE_DIR:-/usr/share/libonnx-testdata/data/node}
rm -rf "$out"
mkdir -p "$out"/{fuzz_onnx_compile,fuzz_model_config,fuzz_grpc_infer,fuzz_http_infer,fuzz_admin,fuzz_patch_sandbox,fuzz_sequence_log}

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
# Patch sandbox: a mode byte (see fuzz_patch_sandbox.cc) then a reply or a job.
sbx=$out/fuzz_patch_sandbox
le() {  # le BYTES VALUE: VALUE as BYTES little-endian bytes, as printf escapes
  local i
  for ((i = 0; i < $1; i++)); do printf '\\x%02x' $((($2 >> (8 * i)) & 255)); done
}
reply() {  # reply OUT MODE_BYTE OK PAYLOAD [COUNT...]: a reply (jitcache/src/patch_sandbox.h)
  local file=$1 mode=$2 ok=$3 payload=$4
  shift 4
  {
    printf "\\x$mode$(le 4 0x53565543)$(le 4 "$ok")$(le 4 0)$(le 4 $#)$(le 8 ${#payload})"
    printf '%s' "$payload"
    for c in "$@"; do printf "$(le 8 "$c")"; done
  } > "$file"
}
reply "$sbx/reply_ok" 04 1 $'\x7f''ELF patch object code' 3 0  # Two probed kernels: mode 2 << 1.
reply "$sbx/reply_ok_unprobed" 00 1 $'\x7f''ELF patch object code'
reply "$sbx/reply_refusal" 00 0 "does not parse: patch:1:1: error: expected top-level entity"
job() {  # job OUT MODE_BYTE < text: a serialized cuvil.jitcache.v1.SandboxJob after the mode byte
  local tmp
  tmp=$(mktemp)
  protoc --encode=cuvil.jitcache.v1.SandboxJob --proto_path="$root/jitcache/proto" \
    --proto_path="$root/format/proto" \
    "$root/jitcache/proto/patch_sandbox.proto" > "$tmp"
  { printf "\\x$2"; cat "$tmp"; } > "$1"
  rm -f "$tmp"
}
floats=$(head -c 32 /dev/zero | od -An -v -tx1 | tr -d ' \n' | sed 's/../\\x&/g')
job "$sbx/job" 01 <<PB
model {
  name: "two_adds" symbol: "two_adds"
  inputs { name: "x" dtype: 1 shape { coef: 1 power: 1 } shape { coef: 8 } }
  outputs { name: "y" dtype: 1 shape { coef: 1 power: 1 } shape { coef: 8 } }
  kernels { index: 0 symbol: "two_adds_k0" op_type: "Add" }
  kernels { index: 1 symbol: "two_adds_k1" op_type: "Add" }
  arena_per_batch_bytes: 64
}
object_code: "\x7f\x45LF base object code"
weights_bytes: 64
layers { kind: OBJECT code: "\x7f\x45LF layer" slots { slot: 0 symbol: "two_adds_k0.patch1" } }
layers { kind: RECOMPILE code: "\x7f\x45LF recompiled" functions: "two_adds_k0" }
layers { kind: IR code: "define i32 @two_adds_k0(ptr %a, i64 %b) {\n  ret i32 0\n}\n" }
patch_ir: "define i32 @two_adds_k1.patch2(ptr %args, i64 %batch) {\n  ret i32 0\n}\n"
patch_slots { slot: 1 symbol: "two_adds_k1.patch2" }
probe_sets { tensors { dtype: 1 shape: [1, 8] data: "$floats" } }
probe_sets { tensors { dtype: 8 shape: [2] strings: ["a", "bc"] } tensors { dtype: 7 data: "\x01\x00\x00\x00\x00\x00\x00\x00" } }
PB
job "$sbx/job_weights_off" 03 < <(printf 'object_code: "x" weights_bytes: 1\n')
echo "make_seeds: $(find "$out" -type f | wc -l) seeds in $out"

# Sequence checkpoint log: mode 1 (framed payloads, see fuzz_sequence_log.cc), one record of a
# float32[1,4] state after 3 steps of sequence "n7", then its tombstone.
seq=$out/fuzz_sequence_log
state_payload="$(le 1 0)$(le 4 2)n7$(le 8 3)$(le 4 1)$(le 4 1)$(le 4 2)$(le 8 1)$(le 8 4)$(le 8 16)$(le 8 0)$(le 8 0)"
end_payload="$(le 1 1)$(le 4 2)n7$(le 8 3)$(le 4 0)"
printf "\\x01$(le 2 67)${state_payload}$(le 2 19)${end_payload}" > "$seq/state_then_end"
printf "\\x00SEQ1$(le 4 8)garbage!" > "$seq/torn"
