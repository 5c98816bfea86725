// Runs ONNX backend-test-style case folders: model.onnx plus test_data_set_N/{input,output}_K.pb.
#ifndef CUVIL_TOOLS_CUVILC_CASE_RUNNER_H_
#define CUVIL_TOOLS_CUVILC_CASE_RUNNER_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

struct Tolerance {
  double rtol = 1e-3;
  double atol = 1e-5;
  // Compare each output as a multiset of its rows along dim 0 (both sorted lexicographically
  // first): for detection outputs, whose order among near-equal scores the model leaves open.
  bool unordered_rows = false;
  // An element also matches when |got - want| <= scale_rtol * max|want| over the tensor: errors
  // judged against the output's scale (a deep float32 network's small outputs carry the rounding
  // of its large intermediates, in ONNX Runtime's results as in ours). 0: off.
  double scale_rtol = 0;
};

// OK when `got` matches `want` in dtype, shape and values within tolerance; otherwise a message
// naming the first mismatching element (with `tol.unordered_rows`, the first mismatching row of
// the sorted rows).
absl::Status CompareTensors(const HostTensor& got, const HostTensor& want, const Tolerance& tol);

// Compiles the case's model once (or once per data set when shape operands must be bound, or
// when it has sequence or optional inputs or outputs, whose structure the data fixes), runs every
// data set and compares every output. Thread-compatible.
// `dim_multiples` goes to ImportOptions::dim_multiples.
absl::Status RunCase(JitEngine& engine, const std::string& case_dir, const Tolerance& tol,
                     const std::map<std::string, int64_t>& dim_multiples = {});

}  // namespace cuvil

#endif  // CUVIL_TOOLS_CUVILC_CASE_RUNNER_H_
