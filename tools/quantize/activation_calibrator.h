// Activation calibration: runs the float model (compiled by Cuvil) over the calibration inputs
// and turns what each activation tensor held into the range it is quantized over.
#ifndef CUVIL_TOOLS_QUANTIZE_ACTIVATION_CALIBRATOR_H_
#define CUVIL_TOOLS_QUANTIZE_ACTIVATION_CALIBRATOR_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "calibration.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/host_tensor.h"
#include "onnx/onnx_pb.h"
#include "quant_params.h"

namespace cuvil::quantize {

struct CalibrationOptions {
  CalibrationMethod method = CalibrationMethod::kMinMax;
  double percentile = 99.99;
  int histogram_bins = 2048;
};

struct ActivationStats {
  Range seen;        // Minimum and maximum over every calibration input.
  Range calibrated;  // The range the method chose.
  // Estimated SQNR (dB) of quantizing this tensor over `calibrated` with `type`, from its |x|
  // histogram (bin centres stand for their values); 0 when no histogram was built.
  double sqnr_estimate_db = 0;
};

// Runs `model` on every set of `input_sets` and calibrates each of `activations`: one pass for
// min/max, then a second building |x| histograms over [0, max |x|] (which percentile and entropy
// read, and which give every method its SQNR estimate). Tensors that are not float32 get no entry.
// Errors from compiling or running.
absl::StatusOr<std::map<std::string, ActivationStats>> CalibrateActivations(
    JitEngine& engine, const onnx::ModelProto& model, const std::vector<std::string>& activations,
    const std::vector<std::vector<HostTensor>>& input_sets, const CalibrationOptions& options,
    ActivationType type);

// The SQNR estimate of ActivationStats for histogram `h` quantized over `r` with `type`.
double HistogramSqnr(const AbsHistogram& h, Range r, ActivationType type);

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_ACTIVATION_CALIBRATOR_H_
