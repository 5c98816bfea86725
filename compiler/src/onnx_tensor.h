// Private: conversion between onnx::TensorProto and HostTensor.
#ifndef CUVIL_COMPILER_SRC_ONNX_TENSOR_H_
#define CUVIL_COMPILER_SRC_ONNX_TENSOR_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cuvil/runtime/host_tensor.h"
#include "onnx/onnx_pb.h"

namespace cuvil {

// Converts a TensorProto; `model_dir` resolves external data locations (empty: none allowed).
// `raw_data`, when its data() is not null, stands for the proto's raw_data field (which then
// holds a placeholder: see initializer_data.h) and is checked and copied the same way.
absl::StatusOr<HostTensor> TensorFromProto(const onnx::TensorProto& proto,
                                           const std::string& model_dir,
                                           std::string_view raw_data = {});

// Fills `proto` with `tensor` in raw_data form.
void TensorToProto(const HostTensor& tensor, onnx::TensorProto* proto);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_ONNX_TENSOR_H_
