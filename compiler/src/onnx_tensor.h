// Private: conversion between onnx::TensorProto and HostTensor.
#ifndef CUVIL_COMPILER_SRC_ONNX_TENSOR_H_
#define CUVIL_COMPILER_SRC_ONNX_TENSOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cuvil/runtime/host_tensor.h"
#include "onnx/onnx_pb.h"

namespace cuvil {

// A raw_data field moved out of its proto (which then holds a placeholder: see
// initializer_data.h): its size, and how to copy its bytes to a destination of that size (false
// when they can no longer be read, e.g. from a model file truncated meanwhile).
// With `deferred` set (bytes left in a model file), the tensor is deferred instead: its bytes are
// read when first used (see HostTensor::Deferred), `read` is not called.
struct MovedRawData {
  uint64_t size = 0;
  std::function<bool(uint8_t* dst)> read;
  std::shared_ptr<const DeferredBytes> deferred;
};

// Converts a TensorProto; `model_dir` resolves external data locations (empty: none allowed).
// `moved`, when not null, stands for the proto's raw_data field and is checked the same way.
absl::StatusOr<HostTensor> TensorFromProto(const onnx::TensorProto& proto,
                                           const std::string& model_dir,
                                           const MovedRawData* moved = nullptr);

// Fills `proto` with `tensor` in raw_data form.
void TensorToProto(const HostTensor& tensor, onnx::TensorProto* proto);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_ONNX_TENSOR_H_
