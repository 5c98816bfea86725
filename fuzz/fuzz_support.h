// Shared set-up for the fuzz targets: paths into the checkout, quiet logs, and the example mlp
// model compiled or loaded once per process (fuzz inputs then run against it).
#ifndef CUVIL_FUZZ_FUZZ_SUPPORT_H_
#define CUVIL_FUZZ_FUZZ_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cuvil/format/compiled_model.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/server/model_manager.h"

namespace cuvil::fuzz {

// `relative` under the checkout ($CUVIL_SOURCE_DIR, else the one this was built from).
std::string SourcePath(std::string_view relative);

// Silences spdlog: load messages would otherwise dominate the fuzzer's output.
void QuietLogs();

// The process-wide JIT (created on first use; aborts if LLVM cannot start).
JitEngine& Jit();

// examples/model-repository/mlp/1/model.onnx, compiled once.
const CompiledModel& MlpModel();

// A model manager over examples/model-repository with "mlp" loaded and READY. Never destroyed:
// its loader and scheduler threads live as long as the fuzzer.
ModelManager& ExampleModels();

// Reads a little-endian integer from the front of the input and advances past it; 0 when the
// input is too short. Lets a target carve structured values out of the fuzz bytes.
uint32_t TakeU32(const uint8_t** data, size_t* size);

}  // namespace cuvil::fuzz

#endif  // CUVIL_FUZZ_FUZZ_SUPPORT_H_
