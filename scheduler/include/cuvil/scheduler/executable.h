// What the scheduler runs: a compiled model version seen through a small interface, so the
// scheduler knows nothing of the JIT, protobuf or HTTP.
#ifndef CUVIL_SCHEDULER_EXECUTABLE_H_
#define CUVIL_SCHEDULER_EXECUTABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
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
  // Gives Run its scratch: called once with the bytes the execution needs, it returns a buffer
  // of at least that many bytes that stays valid until Run returns. The caller fills inputs[] and
  // outputs[] in this call (it stages rows of several requests there only once Run has checked
  // the shapes and reserved memory for them), so Run must call it exactly once, with 0 bytes if
  // it needs no scratch, before it reads an input or writes an output.
  using ArenaReserve = absl::FunctionRef<void*(size_t bytes)>;
  // Runs over `batch` rows. inputs[i]/outputs[i] are contiguous row-major buffers holding
  // `batch` rows each, in inputs()/outputs() order (filled in by `arena`'s call, above);
  // input_shapes[i] is input i's full shape (batch dim included when batched). Implementations
  // check the shapes against what their code reads and fail with InvalidArgument rather than run
  // on buffers of the wrong size; the scratch they then reserve may depend on the shapes (free
  // dimensions beyond the batch). `staged_bytes` is what the caller allocates in `arena`'s call
  // beyond the requests' own buffers (several requests' rows gathered into one buffer, batched
  // outputs before they are split up): an implementation that budgets memory reserves it with
  // its scratch, before calling `arena`. When outputs_sized_by_run(), `written_dims` (same
  // convention as OutputDims) receives the dims each output was written with: a prefix of the
  // buffer OutputDims sized.
  virtual absl::Status Run(const void* const* inputs,
                           absl::Span<const std::vector<int64_t>> input_shapes,
                           void* const* outputs, int64_t batch, uint64_t staged_bytes,
                           ArenaReserve arena,
                           std::vector<std::vector<int64_t>>* written_dims) const = 0;
  // True when the data decides some output sizes (NonZero, Unique, ...): OutputDims then gives
  // upper bounds, Run reports what it wrote, and requests never share an execution (their rows
  // of such an output could not be told apart).
  virtual bool outputs_sized_by_run() const { return false; }
  // Dims of each output (batch dim excluded when batched) for inputs shaped `input_dims` (same
  // convention, inputs() order). Executables with -1 output dims must override it; the default
  // returns outputs()' dims and fails with Unimplemented on a -1.
  virtual absl::StatusOr<std::vector<std::vector<int64_t>>> OutputDims(
      const std::vector<std::vector<int64_t>>& input_dims) const;
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_EXECUTABLE_H_
