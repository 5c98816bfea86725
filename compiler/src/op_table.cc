#include "op_table.h"

#include <utility>

#include "cuvil/compiler/flops.h"
#include "cuvil/compiler/ir.h"

namespace cuvil {
namespace {

// Each family's two halves, side by side.
struct OpFamily {
  void (*shapes)(OpTable&);
  void (*kernels)(OpTable&);
};

constexpr OpFamily kFamilies[] = {
    {ir::RegisterElementwiseShapes, codegen::RegisterElementwiseKernels},
    {ir::RegisterTensorShapes, codegen::RegisterTensorKernels},
    {ir::RegisterReductionShapes, codegen::RegisterReductionKernels},
    {ir::RegisterNnShapes, codegen::RegisterNnKernels},
    {ir::RegisterMovementShapes, codegen::RegisterMovementKernels},
    {ir::RegisterQuantShapes, codegen::RegisterQuantKernels},
    {ir::RegisterLinalgShapes, codegen::RegisterLinalgKernels},
    {ir::RegisterRecurrentShapes, codegen::RegisterRecurrentKernels},
    {ir::RegisterControlFlowShapes, codegen::RegisterControlFlowKernels},
    {ir::RegisterLossShapes, codegen::RegisterLossKernels},
    {ir::RegisterIndexingShapes, codegen::RegisterIndexingKernels},
    {ir::RegisterSignalShapes, codegen::RegisterSignalKernels},
    {ir::RegisterEinsumShapes, codegen::RegisterEinsumKernels},
    {ir::RegisterSamplingShapes, codegen::RegisterSamplingKernels},
    {ir::RegisterTextShapes, codegen::RegisterTextKernels},
    {ir::RegisterTrainingShapes, codegen::RegisterTrainingKernels},
    {ir::RegisterSelectionShapes, codegen::RegisterSelectionKernels},
    {ir::RegisterStringShapes, codegen::RegisterStringKernels},
};

}  // namespace

const OpTable& OpTable::Get() {
  static const OpTable* table = [] {
    auto* t = new OpTable();
    for (const OpFamily& f : kFamilies) {
      f.shapes(*t);
      f.kernels(*t);
    }
    return t;
  }();
  return *table;
}

OpRow OpTable::DefineShape(const std::string& op_type, ir::InferFn infer) {
  OpDef& row = rows_[op_type];
  row.op_type = op_type;
  row.infer = std::move(infer);
  return OpRow(row);
}

void OpTable::DefineEmitter(const std::string& op_type, codegen::EmitFn emit) {
  OpDef& row = rows_[op_type];
  row.op_type = op_type;
  row.emit = std::move(emit);
}

OpRow OpTable::DefineRewrite(const std::string& op_type, ir::InferFn infer,
                             const std::string& target) {
  DefineShape(op_type, std::move(infer));
  rows_[op_type].rewrites_to = target;
  return OpRow(rows_[op_type]);
}

OpRow OpTable::Row(const std::string& op_type) {
  OpDef& row = rows_[op_type];
  row.op_type = op_type;
  return OpRow(row);
}

const OpDef* OpTable::Find(const std::string& op_type) const {
  auto it = rows_.find(op_type);
  if (it == rows_.end() || !WhyMissing(op_type).empty()) return nullptr;
  return &it->second;
}

std::string OpTable::WhyMissing(const std::string& op_type) const {
  auto it = rows_.find(op_type);
  if (it == rows_.end()) return "unknown op";
  const OpDef& row = it->second;
  if (!row.infer) return "no shape function";
  if (row.emit) return "";
  if (row.rewrites_to.empty()) return "no code generator";
  // A rewrite's target must be complete in its own right (no chains of rewrites).
  auto target = rows_.find(row.rewrites_to);
  if (target == rows_.end() || !target->second.infer || !target->second.emit) {
    return "rewritten into " + row.rewrites_to + ", which has no complete row";
  }
  return "";
}

std::vector<std::string> OpTable::OpTypes() const {
  std::vector<std::string> out;
  for (const auto& [name, row] : rows_) {
    if (WhyMissing(name).empty()) out.push_back(name);
  }
  return out;
}

std::vector<std::string> OpTable::IncompleteRows() const {
  std::vector<std::string> out;
  for (const auto& [name, row] : rows_) {
    std::string why = WhyMissing(name);
    if (!why.empty()) out.push_back(name + ": " + why);
  }
  return out;
}

std::vector<std::string> OpTable::MissingTraits() const {
  std::vector<std::string> out;
  for (const auto& [name, row] : rows_) {
    if (!WhyMissing(name).empty()) continue;
    if (row.batch == BatchClass::kUnknown) out.push_back(name + ": batch class");
  }
  return out;
}

double DimAt(const SymDim& d, absl::Span<const int64_t> syms) {
  auto v = EvalShape(SymShape{d}, syms);
  return v.has_value() ? static_cast<double>((*v)[0]) : 0.0;
}

double ElementsAt(const SymShape& s, absl::Span<const int64_t> syms) {
  auto dims = EvalShape(s, syms);
  if (!dims.has_value()) return 0.0;  // a dim the graph decides at run time: not counted
  double n = 1;
  for (int64_t d : *dims) n *= static_cast<double>(d);
  return n;
}

double EstimateFlops(const ir::Graph& graph, absl::Span<const int64_t> syms) {
  const OpTable& table = OpTable::Get();
  double flops = 0;
  for (const auto& node : graph.nodes()) {
    if (node->outputs.empty() || node->outputs[0] == nullptr || !node->has_input(0)) continue;
    const OpDef* def = table.Find(node->op_type);
    if (def == nullptr || def->macs == nullptr) continue;
    flops += 2 * def->macs(*node, syms) * ElementsAt(node->outputs[0]->type.shape, syms);
  }
  return flops;
}

}  // namespace cuvil
