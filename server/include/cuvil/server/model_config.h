// Triton model configuration (config.pbtxt): parsing, completion from the model, validation.
#ifndef CUVIL_SERVER_MODEL_CONFIG_H_
#define CUVIL_SERVER_MODEL_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/scheduler/executable.h"
#include "cuvil/scheduler/scheduler.h"
#include "model_config.pb.h"

namespace cuvil {

// Parses config.pbtxt text. InvalidArgument with line/column and the field name for unknown
// fields or bad values.
absl::StatusOr<inference::ModelConfig> ParseModelConfigText(const std::string& text);

// Parses the JSON form of a config (Triton's "config" load parameter).
absl::StatusOr<inference::ModelConfig> ParseModelConfigJson(const std::string& json);

// Renders `config` as JSON (field names as in Triton's HTTP config endpoint).
std::string ModelConfigToJson(const inference::ModelConfig& config);

// Fills what `config` leaves out from the compiled model (inputs, outputs, max_batch_size when
// dim 0 is symbolic, name) and checks the two agree: names, data types, dims (-1 matches any),
// max_batch_size only when dim 0 is the batch. Also rejects unsupported platforms/backends and
// bad dynamic_batching / instance_group / version_policy values. InvalidArgument names the field.
absl::Status CompleteModelConfig(const CompiledModel& model, inference::ModelConfig* config);

// What the config asks of the compiler: parameters { key: "cuvil_dim_multiples" value: {
// string_value: "height=8,width=8" } } declares free dims that are multiples
// (ImportOptions::dim_multiples; requests whose dim is not are refused); "cuvil_batch_invariant"
// ("true" / "false"; default true with sequence_batching) asks for batch-invariant kernels
// (CompileOptions::batch_invariant). Inputs whose config dims fix a free model dim (dims: [3,
// 224, 224] over a model exported with free height and width, as Triton allows) become
// ImportOptions::input_shapes, so the code is compiled for that size (the batch stays free).
// InvalidArgument naming the parameter when its value is malformed. Read before the model is
// compiled.
absl::StatusOr<CompileOptions> CompileOptionsFromConfig(const inference::ModelConfig& config);

// Scheduler settings the (completed) config describes.
SchedulerOptions SchedulerOptionsFromConfig(const inference::ModelConfig& config);

// The tensors clients see: batch dimension dropped when max_batch_size > 0.
std::vector<TensorSpec> InputSpecs(const inference::ModelConfig& config);
std::vector<TensorSpec> OutputSpecs(const inference::ModelConfig& config);

// TYPE_FP32 <-> DType; kUndefined for unsupported types.
DType DTypeFromConfig(inference::DataType type);
inference::DataType ConfigFromDType(DType dtype);

}  // namespace cuvil

#endif  // CUVIL_SERVER_MODEL_CONFIG_H_
