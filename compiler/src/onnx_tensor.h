// Private: conversion between onnx::TensorProto and HostTensor.
#ifndef CUVIL_COMPILER_SRC_ONNX_TENSOR_H_
#define CUVIL_COMPILER_SRC_ONNX_TENSOR_H_

#include <string>

#include "absl/status/statusor.h"
#include "cuvil/runtime/host_tensor.h"
#include "onnx/onnx_pb.h"

namespace cuvil {

// Converts a TensorProto; `model_dir` resolves external data locations (empty: none allowed).
absl::StatusOr<HostTensor> TensorFromProto(const onnx::TensorProto& proto,
                                           const std::string& model_dir);

// Fills `proto` with `tensor` in raw_data form.
void TensorToProto(const HostTensor& tensor, onnx::TensorProto* proto);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_ONNX_TENSOR_H_
