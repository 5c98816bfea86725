// config.pbtxt (or, for input starting with '{', the JSON form Triton's "config" load parameter
// carries) parsed and completed against the compiled example mlp, then turned into what a load
// builds from it: scheduler options, tensor specs and the JIT executable's signature check.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cuvil/server/model_config.h"
#include "fuzz_support.h"
#include "jit_executable.h"

namespace {

const cuvil::LoadedModel& LoadedMlp() {
  static const cuvil::LoadedModel* loaded = [] {
    auto l = cuvil::fuzz::Jit().Load("fuzz/mlp", cuvil::fuzz::MlpModel());
    if (!l.ok()) __builtin_trap();
    return l->release();
  }();
  return *loaded;
}

void Exercise(inference::ModelConfig config) {
  if (!cuvil::CompleteModelConfig(cuvil::fuzz::MlpModel(), &config).ok()) return;
  (void)cuvil::SchedulerOptionsFromConfig(config);
  (void)cuvil::JitExecutable::Create(&LoadedMlp(), cuvil::InputSpecs(config),
                                     cuvil::OutputSpecs(config));
  // The completed config is served as JSON and must read back.
  const std::string json = cuvil::ModelConfigToJson(config);
  if (absl::Status s = cuvil::ParseModelConfigJson(json).status(); !s.ok()) {
    std::fprintf(stderr, "completed config does not read back: %s\n%s\n",
                 std::string(s.message()).c_str(), json.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cuvil::fuzz::QuietLogs();
  LoadedMlp();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<inference::ModelConfig> config = size > 0 && data[0] == '{'
                                                      ? cuvil::ParseModelConfigJson(text)
                                                      : cuvil::ParseModelConfigText(text);
  if (config.ok()) Exercise(*std::move(config));
  return 0;
}
