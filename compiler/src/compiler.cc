#include "cuvil/compiler/compiler.h"

#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "codegen/lower.h"
#include "fuse_conv.h"
#include "fuse_patterns.h"
#include "memory_plan.h"

namespace cuvil {
namespace {

std::atomic<uint64_t> compilations{0};

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TensorSignature SignatureOf(const ir::Value* v, const std::string& name) {
  return {name, v->type.dtype, v->type.shape};
}

}  // namespace

absl::StatusOr<CompiledModel> CompileGraph(ir::Graph& graph, const CompileOptions& options) {
  CompiledModel model;
  model.name = graph.name;
  model.symbol = graph.symbol;
  auto t0 = std::chrono::steady_clock::now();
  if (auto s = OptimizeGraph(graph, options.needs_binding); !s.ok()) return s;
  if (auto s = FusePatterns(graph); !s.ok()) return s;  // LayerNorm, GELU, bias epilogues
  if (auto s = FuseConvolutions(graph); !s.ok()) return s;
  model.timings.push_back({"optimize_graph", MsSince(t0)});

  for (const ir::Value* in : graph.inputs) model.inputs.push_back(SignatureOf(in, in->name));
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    model.outputs.push_back(SignatureOf(graph.outputs[i], graph.output_names[i]));
  }

  t0 = std::chrono::steady_clock::now();
  auto plan = PlanMemory(graph);
  if (!plan.ok()) return plan.status();
  model.timings.push_back({"memory_plan", MsSince(t0)});
  model.arena = plan->arena;

  codegen::LowerOptions lower;
  lower.opt_level = options.opt_level;
  lower.emit_llvm_path = options.emit_llvm_path;
  if (auto s = codegen::LowerToObject(graph, *plan, lower, &model); !s.ok()) return s;
  model.weights = std::move(plan->weights);
  compilations.fetch_add(1, std::memory_order_relaxed);
  return model;
}

absl::Status EntryStatus(int32_t rc) {
  switch (rc) {
    case kEntryOk:
      return absl::OkStatus();
    case kEntryIndexOutOfBounds:
      return absl::InvalidArgumentError("indices element out of data bounds");
    case kEntrySliceOutOfBounds:
      return absl::InvalidArgumentError(
          "a slice whose bounds depend on the batch size reaches past its input at this batch "
          "size");
    case kEntryTopKTooLarge:
      return absl::InvalidArgumentError("TopK's K is larger than its axis at this batch size");
    default:
      return absl::InternalError(absl::StrCat("compiled model returned error code ", rc));
  }
}

uint64_t TotalCompilations() { return compilations.load(std::memory_order_relaxed); }

std::string CodegenTargetKey() { return absl::StrCat("vector_bits=", codegen::TargetVectorBits()); }

absl::StatusOr<CompiledModel> CompileOnnxFile(const std::string& path,
                                              const CompileOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  auto graph = ImportOnnxFile(path, options.import);
  if (!graph.ok()) return graph.status();
  double import_ms = MsSince(t0);
  auto model = CompileGraph(**graph, options);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
  }
  model->timings.insert(model->timings.begin(), {"import", import_ms});
  return model;
}

absl::StatusOr<CompiledModel> CompileOnnxBytes(const std::string& bytes,
                                               const CompileOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  auto graph = ImportOnnxBytes(bytes, options.import);
  if (!graph.ok()) return graph.status();
  double import_ms = MsSince(t0);
  auto model = CompileGraph(**graph, options);
  if (!model.ok()) return model.status();
  model->timings.insert(model->timings.begin(), {"import", import_ms});
  return model;
}

}  // namespace cuvil
