// Private: conversion between onnx::TensorProto and HostTensor.
#ifndef CUVIL_COMPILER_SRC_ONNX_TENSOR_H_
#define CUVIL_COMPILER_SRC_ONNX_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cuvil/runtime/host_tensor.h"
#include "onnx/onnx_pb.h"

namespace cuvil {

// A raw_data field moved out of its proto (which then holds a placeholder: see
// initializer_data.h): its size and where its bytes are read from. With `defer` (bytes left in a
// model file) the tensor keeps `bytes` as its source and reads them when first used (see
// HostTensor::Deferred); otherwise they are copied into the tensor at once.
struct MovedRawData {
  uint64_t size = 0;
  std::shared_ptr<const DeferredBytes> bytes;
  bool defer = false;
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
