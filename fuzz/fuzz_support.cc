#include "fuzz_support.h"

#include <cstdio>
#include <cstdlib>

#include "cuvil/compiler/compiler.h"
#include "cuvil/server/model_repository.h"
#include "spdlog/spdlog.h"

namespace cuvil::fuzz {
namespace {

// Set-up failures are not findings: report and stop before fuzzing starts.
[[noreturn]] void Die(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "fuzz set-up: %s: %s\n", what.c_str(),
               std::string(status.message()).c_str());
  std::abort();
}

}  // namespace

std::string SourcePath(std::string_view relative) {
  const char* root = std::getenv("CUVIL_SOURCE_DIR");
  return std::string(root != nullptr ? root : CUVIL_SOURCE_DIR) + "/" + std::string(relative);
}

void QuietLogs() { spdlog::set_level(spdlog::level::off); }

JitEngine& Jit() {
  static JitEngine* engine = [] {
    absl::StatusOr<std::unique_ptr<JitEngine>> created = JitEngine::Create();
    if (!created.ok()) Die("JitEngine::Create", created.status());
    return created->release();
  }();
  return *engine;
}

const CompiledModel& MlpModel() {
  static const CompiledModel* model = [] {
    const std::string path = SourcePath("examples/model-repository/mlp/1/model.onnx");
    absl::StatusOr<CompiledModel> compiled = CompileOnnxFile(path);
    if (!compiled.ok()) Die(path, compiled.status());
    return new CompiledModel(*std::move(compiled));
  }();
  return *model;
}

ModelManager& ExampleModels() {
  static ModelManager* models = [] {
    QuietLogs();
    auto* repository = new ModelRepository({SourcePath("examples/model-repository")});
    auto* manager = new ModelManager(&Jit(), repository, ModelManagerOptions{});
    LoadRequest load;
    load.name = "mlp";
    if (absl::Status s = manager->Load(load); !s.ok()) Die("loading mlp", s);
    return manager;
  }();
  return *models;
}

uint32_t TakeU32(const uint8_t** data, size_t* size) {
  if (*size < 4) return 0;
  const uint8_t* p = *data;
  uint32_t v = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  *data += 4;
  *size -= 4;
  return v;
}

}  // namespace cuvil::fuzz
