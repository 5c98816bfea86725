// What the scheduler runs: a compiled model version seen through a small interface, so the
// scheduler knows nothing of the JIT, protobuf or HTTP.
#ifndef CUVIL_SCHEDULER_EXECUTABLE_H_
#define CUVIL_SCHEDULER_EXECUTABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuvil/runtime/dtype.h"

namespace cuvil {

// One input or output. `dims` excludes the batch dimension when `batched` is true.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> dims;  // -1 for a dimension that varies per request.
  bool batched = true;

  // Bytes of one batch row (all of the tensor when not batched); -1 when dims vary.
  int64_t RowBytes() const;
};

// Thread-safe: Run may be called concurrently with distinct arenas.
class Executable {
 public:
  virtual ~Executable() = default;
  virtual const std::vector<TensorSpec>& inputs() const = 0;
  virtual const std::vector<TensorSpec>& outputs() const = 0;
  // Scratch one execution over `batch` rows needs.
  virtual int64_t ArenaBytes(int64_t batch) const = 0;
  // Scratch one execution over `batch` rows of inputs shaped `input_shapes` (as Run takes them)
  // needs, for executables whose scratch depends on more than the batch; 0 when those shapes
  // cannot run (Run then fails before touching the arena). The default is ArenaBytes(batch).
  virtual int64_t ArenaBytesForShapes(int64_t batch,
                                      absl::Span<const std::vector<int64_t>> input_shapes) const {
    (void)input_shapes;
    return ArenaBytes(batch);
  }
  // Runs over `batch` rows. inputs[i]/outputs[i] are contiguous row-major buffers holding
  // `batch` rows each, in inputs()/outputs() order; input_shapes[i] is input i's full shape (batch
  // dim included when batched). Implementations check the shapes against what their code reads
  // and fail with InvalidArgument rather than run on buffers of the wrong size.
  virtual absl::Status Run(const void* const* inputs,
                           absl::Span<const std::vector<int64_t>> input_shapes,
                           void* const* outputs, int64_t batch, void* arena) const = 0;
  // Dims of each output (batch dim excluded when batched) for inputs shaped `input_dims` (same
  // convention, inputs() order). Executables with -1 output dims must override it; the default
  // returns outputs()' dims and fails with Unimplemented on a -1.
  virtual absl::StatusOr<std::vector<std::vector<int64_t>>> OutputDims(
      const std::vector<std::vector<int64_t>>& input_dims) const;
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_EXECUTABLE_H_
