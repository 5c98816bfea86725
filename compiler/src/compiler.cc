#include "cuvil/compiler/compiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "batch_separability.h"
#include "codegen/lower.h"
#include "cuvil/runtime/dim_expr_codec.h"
#include "fuse_conv.h"
#include "fuse_patterns.h"
#include "fuse_qdq.h"
#include "memory_plan.h"
#include "pass_pipeline.h"

namespace cuvil {
namespace {

std::atomic<uint64_t> compilations{0};

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TensorSignature SignatureOf(const ir::Value* v, const std::string& name) {
  return {name, v->type.dtype, v->type.shape};
}

// A pass or code generator that read a deferred initializer after its model file changed got
// zeros: DataLoss then, so such a compile never succeeds.
absl::Status CheckDeferredReads(const ir::Graph& graph) {
  for (const auto& v : graph.values()) {
    if (v->is_constant() && v->constant->read_failed()) {
      return absl::DataLossError(absl::StrCat("cannot read the initializer '", v->name,
                                              "' from the model file: it changed while the "
                                              "model was compiled"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct PreparedModel::Impl {
  std::unique_ptr<ir::Graph> owned;  // Null when the caller owns the graph (CompileGraph).
  ir::Graph* graph = nullptr;
  MemoryPlan plan;
  // Everything but the code: signatures, arena, the shared weights blob, preparation timings.
  CompiledModel base;
  std::string error_prefix;  // "path: " for a model read from a file.
  // The weights blob's fill, started on a helper thread when the plan is made so that it runs
  // while code is generated; Lower shares what is left of it, then waits for it. Declared last:
  // destroying the future joins the helper, which reads the graph's constants.
  std::shared_ptr<WeightsFill> fill;
  std::shared_future<absl::Status> weights_filled;
};

PreparedModel::PreparedModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PreparedModel::~PreparedModel() = default;

absl::StatusOr<CompiledModel> PreparedModel::Lower(const CompileOptions& options) const {
  const codegen::ScopedKernelShape shape(options.vector_bits, options.batch_invariant);
  CompiledModel model = impl_->base;
  codegen::LowerOptions lower;
  lower.opt_level = options.opt_level;
  lower.emit_llvm_path = options.emit_llvm_path;
  lower.target_triple = options.target_triple;
  lower.target_cpu = options.target_cpu;
  lower.target_features = options.target_features;
  absl::Status s = codegen::LowerToObject(*impl_->graph, impl_->plan, lower, &model);
  if (s.ok()) s = CheckDeferredReads(*impl_->graph);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(impl_->error_prefix, s.message()));
  // The code is ready; the weights it addresses must be too. Writing the items nobody has claimed
  // yet beats waiting for the helper to write them alone.
  const auto t0 = std::chrono::steady_clock::now();
  impl_->fill->Help();
  std::shared_future<absl::Status> filled = impl_->weights_filled;  // A copy per caller.
  if (s = filled.get(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(impl_->error_prefix, s.message()));
  }
  model.timings.push_back({"weights_wait", MsSince(t0)});
  compilations.fetch_add(1, std::memory_order_relaxed);
  return model;
}

namespace {

// Runs `fill` on a thread of its own (here when no thread can be started).
std::shared_future<absl::Status> FillInBackground(std::shared_ptr<WeightsFill> shared) {
  try {
    return std::async(std::launch::async, [shared] { return shared->Run(); }).share();
  } catch (const std::system_error&) {
    std::promise<absl::Status> done;
    done.set_value(shared->Run());
    return done.get_future().share();
  }
}

// The run-time checks of model->dim_constraints: every symbolic dim of an input or a node's
// output not provably >= 0 must be, and every equality shape inference assumed must hold
// (InvalidArgument for one that never can).
absl::Status CollectDimConstraints(const ir::Graph& graph, CompiledModel* model) {
  if (!graph.symbols.empty()) {
    std::vector<DimExpr> seen;
    auto note = [&](const ir::Value* v) -> absl::Status {
      for (size_t d = 0; v != nullptr && d < v->type.shape.size(); ++d) {
        const DimExpr& e = v->type.shape[d].expr();
        if (e.IsStatic() || e.IsProvablyNonNegative() ||
            std::find(seen.begin(), seen.end(), e) != seen.end()) {
          continue;
        }
        if (graph.IsDataDependent(e)) {
          // Checked before the run, when the data has not decided the value yet.
          return absl::UnimplementedError(absl::StrCat(
              "dim ", d, " of '", v->name, "' (", e.ToString(),
              ") depends on the data and may be negative; Cuvil cannot check it before the run"));
        }
        seen.push_back(e);
        model->dim_constraints.push_back({v->name, static_cast<int32_t>(d), EncodeDimExpr(e)});
      }
      return absl::OkStatus();
    };
    for (const ir::Value* in : graph.inputs) {
      if (auto s = note(in); !s.ok()) return s;
    }
    for (const auto& n : graph.nodes()) {
      for (const ir::Value* out : n->outputs) {
        if (auto s = note(out); !s.ok()) return s;
      }
    }
  }
  std::vector<DimExpr> assumed;
  for (const ir::Graph::DimAssumption& a : graph.assumptions) {
    auto diff = DimSub(a.lhs, a.rhs);
    if (!diff) return absl::InvalidArgumentError("an assumed dimension equality is too large");
    if (diff->IsStatic()) {
      if (*diff->AsConstant() == 0) continue;
      return absl::InvalidArgumentError(absl::StrCat("dim ", a.dim, " of '", a.value,
                                                     "': ", a.lhs.ToString(), " never equals ",
                                                     a.rhs.ToString()));
    }
    if (std::find(assumed.begin(), assumed.end(), *diff) != assumed.end()) continue;
    if (graph.IsDataDependent(*diff)) {
      return absl::UnimplementedError(absl::StrCat(
          "dim ", a.dim, " of '", a.value, "' needs ", a.lhs.ToString(), " == ", a.rhs.ToString(),
          ", which depends on the data; Cuvil cannot check it before the run"));
    }
    assumed.push_back(*diff);
    model->dim_constraints.push_back({a.value, a.dim, EncodeDimExpr(*diff), /*equal=*/true,
                                      absl::StrCat(a.lhs.ToString(), " == ", a.rhs.ToString())});
  }
  return absl::OkStatus();
}

// Runs the passes and the memory plan on `impl->graph`, filling the rest of `impl`.
absl::Status Prepare(const CompileOptions& options, PreparedModel::Impl* impl) {
  // Shape inference packs weights in panels of the target's vector width.
  const codegen::ScopedKernelShape shape(options.vector_bits, options.batch_invariant);
  ir::Graph& graph = *impl->graph;
  CompiledModel& model = impl->base;
  model.name = graph.name;
  model.symbol = graph.symbol;
  auto t0 = std::chrono::steady_clock::now();
  // The graph passes, in order (pass_pipeline.h: each named, timed and followed by VerifyGraph).
  BatchSeparability separability;
  ConstantImages images;  // Packed convolution weights go straight into the weights blob.
  std::vector<GraphPass> passes = {
      // Shape inference and folding, QDQ fusion, pass-through and dead-code removal.
      {"optimize",
       [&](ir::Graph& g) { return OptimizeGraph(g, options.needs_binding, options.integer_qdq); }},
      // An analysis, before fusion: it knows the ONNX ops, and fusion keeps their meaning.
      {"batch_separability",
       [&](ir::Graph& g) {
         separability = AnalyseBatchSeparability(g);
         return absl::OkStatus();
       }},
      {"fuse_patterns", [](ir::Graph& g) { return FusePatterns(g); }},  // LayerNorm, GELU, bias
      {"fuse_convolutions", [&](ir::Graph& g) { return FuseConvolutions(g, &images); }},
  };
  if (options.integer_qdq) {  // Needs the prepared depthwise Convs.
    passes.push_back({"fuse_qdq_depthwise", [](ir::Graph& g) {
                        FuseQdqDepthwiseConvs(g);
                        return absl::OkStatus();
                      }});
  }
  passes.push_back({"check_deferred_reads", [](ir::Graph& g) { return CheckDeferredReads(g); }});
  PassOptions pass_options;
  pass_options.print_after = options.print_after_pass;
  pass_options.print_to = &std::cerr;
  if (auto s = RunGraphPasses(graph, passes, pass_options, &model.timings); !s.ok()) return s;
  model.timings.push_back({"optimize_graph", MsSince(t0)});
  // Shape inference may add data-dependent symbols.
  model.symbols = graph.symbols;
  model.makes_strings = graph.MakesStrings();
  for (const auto& v : graph.values()) {
    // Weights are bytes copied into the object; string views would point into this process.
    if (v->constant.has_value() && v->type.dtype == DType::kString) {
      return absl::UnimplementedError(
          absl::StrCat("constant '", v->name, "' is a string tensor; string constants are not ",
                       "supported (string tensors must come from the inputs)"));
    }
  }
  for (const ir::Graph::DataDependentSymbol& d : graph.data_dependent) {
    model.data_dependent_dims.push_back({d.id, EncodeDimExpr(d.upper_bound), d.producer});
  }

  for (const ir::Value* in : graph.inputs) model.inputs.push_back(SignatureOf(in, in->name));
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    model.outputs.push_back(SignatureOf(graph.outputs[i], graph.output_names[i]));
  }

  if (auto s = CollectDimConstraints(graph, &model); !s.ok()) return s;
  t0 = std::chrono::steady_clock::now();
  std::unique_ptr<WeightsFill> fill;
  auto plan = PlanMemoryDeferringWeights(graph, &images, &fill);
  if (!plan.ok()) return plan.status();
  model.timings.push_back({"memory_plan", MsSince(t0)});
  impl->plan = *std::move(plan);
  model.arena = impl->plan.arena;
  const bool splittable = separability.separable && !model.arena.symbolic();
  model.arena.max_shards = splittable ? kMaxBatchShards : 1;
  model.batch_split_note = splittable               ? "separable"
                           : separability.separable ? "the arena plan is symbolic"
                                                    : separability.reason;
  model.weights = impl->plan.weights;
  // From here on the graph does not change: copying the weights may overlap code generation.
  impl->fill = std::move(fill);
  impl->weights_filled = FillInBackground(impl->fill);
  return absl::OkStatus();
}

// The import options, reporting binding requests where the compile's caller collects them.
ImportOptions WithBindingRequests(const CompileOptions& options) {
  ImportOptions import = options.import;
  if (import.needs_binding == nullptr) import.needs_binding = options.needs_binding;
  return import;
}

// Imports with `import` (timed as the "import" phase), then prepares the graph.
absl::StatusOr<std::shared_ptr<const PreparedModel>> PrepareImported(
    const std::function<absl::StatusOr<std::unique_ptr<ir::Graph>>()>& import,
    const CompileOptions& options, std::string error_prefix) {
  auto t0 = std::chrono::steady_clock::now();
  auto graph = import();
  if (!graph.ok()) return graph.status();
  auto impl = std::make_unique<PreparedModel::Impl>();
  impl->base.timings.push_back({"import", MsSince(t0)});
  impl->owned = *std::move(graph);
  impl->graph = impl->owned.get();
  impl->error_prefix = std::move(error_prefix);
  if (auto s = Prepare(options, impl.get()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(impl->error_prefix, s.message()));
  }
  return std::make_shared<const PreparedModel>(std::move(impl));
}

}  // namespace

absl::StatusOr<CompiledModel> CompileGraph(ir::Graph& graph, const CompileOptions& options) {
  auto impl = std::make_unique<PreparedModel::Impl>();
  impl->graph = &graph;
  if (auto s = Prepare(options, impl.get()); !s.ok()) return s;
  return PreparedModel(std::move(impl)).Lower(options);
}

absl::StatusOr<std::shared_ptr<const PreparedModel>> PrepareOnnxFile(
    const std::string& path, const CompileOptions& options) {
  return PrepareImported([&] { return ImportOnnxFile(path, WithBindingRequests(options)); },
                         options, absl::StrCat(path, ": "));
}

absl::StatusOr<std::shared_ptr<const PreparedModel>> PrepareOnnxBytes(
    const std::string& bytes, const CompileOptions& options) {
  return PrepareImported([&] { return ImportOnnxBytes(bytes, WithBindingRequests(options)); },
                         options, "");
}

uint64_t TotalCompilations() { return compilations.load(std::memory_order_relaxed); }

std::string CodegenTargetKey() { return absl::StrCat("vector_bits=", codegen::TargetVectorBits()); }

absl::StatusOr<CompiledModel> CompileOnnxFile(const std::string& path,
                                              const CompileOptions& options) {
  auto prepared = PrepareOnnxFile(path, options);
  if (!prepared.ok()) return prepared.status();
  return (*prepared)->Lower(options);
}

absl::StatusOr<CompiledModel> CompileOnnxBytes(const std::string& bytes,
                                               const CompileOptions& options) {
  auto prepared = PrepareOnnxBytes(bytes, options);
  if (!prepared.ok()) return prepared.status();
  return (*prepared)->Lower(options);
}

}  // namespace cuvil
