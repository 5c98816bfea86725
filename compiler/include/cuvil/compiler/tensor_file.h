// Reading and writing ONNX TensorProto files (the ONNX backend-test data format).
#ifndef CUVIL_COMPILER_TENSOR_FILE_H_
#define CUVIL_COMPILER_TENSOR_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/compiler/onnx_importer.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

struct NamedTensor {
  std::string name;  // May be empty: test data files often leave it unset.
  HostTensor tensor;
};

// Parses a serialized TensorProto file. InvalidArgument for garbage or unsupported types.
absl::StatusOr<NamedTensor> ReadTensorFile(const std::string& path);

// The contents of a backend-test data file: a tensor, a sequence of tensors or an optional.
struct DataValue {
  IoKind kind = IoKind::kTensor;
  bool present = true;  // Optionals: false when empty.
  // The tensor, the sequence's elements, or the optional's tensor or sequence elements.
  std::vector<HostTensor> tensors;
};

// Parses a serialized TensorProto, SequenceProto or OptionalProto file (whichever `kind`, the
// model's declared type, calls for). InvalidArgument for garbage, unsupported types or an
// element kind that does not match `kind`.
absl::StatusOr<DataValue> ReadDataFile(const std::string& path, IoKind kind);

// Writes `tensor` as a serialized TensorProto (raw_data form) named `name`.
absl::Status WriteTensorFile(const std::string& path, const std::string& name,
                             const HostTensor& tensor);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_TENSOR_FILE_H_
