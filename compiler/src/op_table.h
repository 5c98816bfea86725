// Private: the one table of ops the compiler understands. A row is an op type with its shape
// function (ir::InferContext) and its code generator (codegen::KernelContext); only complete rows
// are found, so an op missing either half fails at the same early check ("unsupported op").
//
// Each op family fills its rows from two files, ops/shape_<family>.cc and
// codegen/kernels_<family>.cc, listed once in kFamilies (op_table.cc).
#ifndef CUVIL_COMPILER_SRC_OP_TABLE_H_
#define CUVIL_COMPILER_SRC_OP_TABLE_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace cuvil {
namespace ir {
class InferContext;
using InferFn = std::function<absl::Status(InferContext&)>;
}  // namespace ir
namespace codegen {
class KernelContext;
using EmitFn = std::function<absl::Status(KernelContext&)>;
}  // namespace codegen

// One row of the table.
struct OpDef {
  std::string op_type;
  ir::InferFn infer;     // canonicalises the node and types its outputs
  codegen::EmitFn emit;  // emits the node's kernel body
  // Instead of an emitter: the op type the shape function rewrites the node into (CastLike →
  // Cast), whose row supplies the code generator.
  std::string rewrites_to;
  // The op accepts string tensors (DType::kString); every other op's shape inference refuses them
  // before its shape function runs.
  bool takes_strings = false;
};

// Thread-safe after construction (read-only); built once by Get().
class OpTable {
 public:
  // The process-wide table holding every op of every family.
  static const OpTable& Get();

  // Sets op_type's shape function. Used by the families while the table is built.
  void DefineShape(const std::string& op_type, ir::InferFn infer);
  // Sets op_type's code generator. Used by the families while the table is built.
  void DefineEmitter(const std::string& op_type, codegen::EmitFn emit);
  // Sets op_type's shape function, which rewrites the node into `target` (an op with its own
  // complete row) instead of op_type having an emitter.
  void DefineRewrite(const std::string& op_type, ir::InferFn infer, const std::string& target);
  // Marks op_type as accepting string tensors (OpDef::takes_strings).
  void AllowStrings(const std::string& op_type);

  // op_type's row when it has a shape function and a code generator (its own or, for a rewrite,
  // its target's), else nullptr.
  const OpDef* Find(const std::string& op_type) const;
  // Why op_type cannot be compiled ("no shape function", "no code generator" or "unknown op"),
  // or empty when Find would succeed.
  std::string WhyMissing(const std::string& op_type) const;
  // Every complete row's op type, sorted.
  std::vector<std::string> OpTypes() const;
  // Every row missing a half, sorted: "<op>: <why>" (empty in a correct build; tested).
  std::vector<std::string> IncompleteRows() const;

 private:
  std::map<std::string, OpDef> rows_;
};

// One pair of fill functions per op family.
namespace ir {
void RegisterElementwiseShapes(OpTable& t);
void RegisterTensorShapes(OpTable& t);
void RegisterReductionShapes(OpTable& t);
void RegisterNnShapes(OpTable& t);
void RegisterMovementShapes(OpTable& t);
void RegisterQuantShapes(OpTable& t);
void RegisterLinalgShapes(OpTable& t);
void RegisterRecurrentShapes(OpTable& t);
void RegisterControlFlowShapes(OpTable& t);
void RegisterLossShapes(OpTable& t);
void RegisterIndexingShapes(OpTable& t);
void RegisterSignalShapes(OpTable& t);
void RegisterEinsumShapes(OpTable& t);
void RegisterSamplingShapes(OpTable& t);
void RegisterTextShapes(OpTable& t);
void RegisterTrainingShapes(OpTable& t);
void RegisterSelectionShapes(OpTable& t);
void RegisterStringShapes(OpTable& t);
}  // namespace ir
namespace codegen {
void RegisterElementwiseKernels(OpTable& t);
void RegisterTensorKernels(OpTable& t);
void RegisterReductionKernels(OpTable& t);
void RegisterNnKernels(OpTable& t);
void RegisterMovementKernels(OpTable& t);
void RegisterQuantKernels(OpTable& t);
void RegisterLinalgKernels(OpTable& t);
void RegisterRecurrentKernels(OpTable& t);
void RegisterControlFlowKernels(OpTable& t);
void RegisterLossKernels(OpTable& t);
void RegisterIndexingKernels(OpTable& t);
void RegisterSignalKernels(OpTable& t);
void RegisterEinsumKernels(OpTable& t);
void RegisterSamplingKernels(OpTable& t);
void RegisterTextKernels(OpTable& t);
void RegisterTrainingKernels(OpTable& t);
void RegisterSelectionKernels(OpTable& t);
void RegisterStringKernels(OpTable& t);
}  // namespace codegen

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_OP_TABLE_H_
