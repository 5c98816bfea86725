// Reading and writing ONNX TensorProto files (the ONNX backend-test data format).
#ifndef CUVIL_COMPILER_TENSOR_FILE_H_
#define CUVIL_COMPILER_TENSOR_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

struct NamedTensor {
  std::string name;  // May be empty: test data files often leave it unset.
  HostTensor tensor;
};

// Parses a serialized TensorProto file. InvalidArgument for garbage or unsupported types.
absl::StatusOr<NamedTensor> ReadTensorFile(const std::string& path);

// Writes `tensor` as a serialized TensorProto (raw_data form) named `name`.
absl::Status WriteTensorFile(const std::string& path, const std::string& name,
                             const HostTensor& tensor);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_TENSOR_FILE_H_
