// Private: the one table of ops the compiler understands. A row is an op type with its shape
// function (ir::InferContext) and its code generator (codegen::KernelContext); only complete rows
// are found, so an op missing either half fails at the same early check ("unsupported op").
//
// Each op family fills its rows from two files, ops/shape_<family>.cc and
// codegen/kernels_<family>.cc, listed once in kFamilies (op_table.cc). The facts other passes need
// about an op (its domain, how it treats the batch, whether the host folds it, its FLOP estimate,
// whether it takes strings) are traits on its row, set where the shape function is registered
// (DefineShape returns an OpRow to set them on), so no pass keeps its own list of op types.
// op_traits_test checks every row declares the traits it must.
#ifndef CUVIL_COMPILER_SRC_OP_TABLE_H_
#define CUVIL_COMPILER_SRC_OP_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cuvil/runtime/symbolic_dim.h"

namespace cuvil {
namespace ir {
class InferContext;
class Node;
using InferFn = std::function<absl::Status(InferContext&)>;
}  // namespace ir
namespace codegen {
class KernelContext;
using EmitFn = std::function<absl::Status(KernelContext&)>;
}  // namespace codegen

// The ONNX domain a node of the op may name in a model (onnx_importer.cc). Every op also imports
// from the default domain (empty or "ai.onnx").
enum class OpDomain : uint8_t {
  kOnnx,       // ai.onnx (the default)
  kTraining,   // ai.onnx.preview.training: the optimizers (Adagrad, Adam, Momentum)
  kMicrosoft,  // com.microsoft: ONNX Runtime's contrib ops Cuvil runs
  kInternal,   // Cuvil's own, made by graph passes (CuvilQConv, ...); no model domain names it
};

// How an op treats the batch: the rule batch_separability.cc applies to a node with a batch
// input. kUnknown (the default) is a row that has not said; op_traits_test refuses it.
enum class BatchClass : uint8_t {
  kUnknown,
  kMixes,          // not known to keep batch items apart: the model runs unsplit
  kShapeOf,        // Shape, Size: the output is shape arithmetic on the batch, never data
  kUnary,          // input 0 is the data (any layout), the rest parameters; same shape out
  kBroadcast,      // numpy broadcasting over all inputs
  kBatchLeading,   // input 0 is NCHW-like data with the batch as N, the rest parameters
  kQConv,          // CuvilQConv: batch-leading, input 5 a residual laid out as the output
  kGemm,           // A's row dimension (transA) is the batch
  kMatMul,         // operands 0 and 1 (MatMul broadcasting), the rest parameters
  kQLinearMatMul,  // operands 0 and 3
  kRegroup,        // Reshape, Flatten, Squeeze, Unsqueeze: a new grouping of the same elements
  kTranspose,      // a permutation of the dims
  kReduce,         // over attribute "axes"
  kNormalize,      // over attribute "axis" to "axis_end" (LayerNormalization: to the last dim)
  kAlongAxis,      // works along attribute "axis" alone
  kConcat,         // joins along attribute "axis"
  kMovement,       // Slice, Pad, Tile, Expand, Trilu: per-axis attributes leave the batch alone
  kGather,         // Gather (data or indices batched), GatherElements (both, alike)
  kPerItem,        // input 0 the data, every item mapped alone to rows of the output (OneHot)
};

// Host evaluation of a small all-constant node during optimisation (constant_fold.cc): for
// the shape arithmetic ONNX function expansions put between a size and its use.
struct HostFold {
  int arity = 0;                               // 0: not folded; else the inputs it takes (1 or 2)
  double (*fn)(double a, double b) = nullptr;  // b is 0 for a unary op
  bool floats_only = false;  // integer results round differently across runtimes (Div)
  bool to_bool = false;      // may produce bool (Cast)
};

// Multiply-adds per element of output 0 at symbol values `syms` (0 for what the graph decides at
// run time); EstimateFlops counts 2 per multiply-add. Ops without one count 0 (elementwise work
// is not counted, as in most GFLOP/s figures).
using MacsFn = double (*)(const ir::Node& node, absl::Span<const int64_t> syms);

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

  // Traits (see the enums above).
  OpDomain domain = OpDomain::kOnnx;
  BatchClass batch = BatchClass::kUnknown;
  // Inputs from this index on are shape operands that may depend on the batch (Reshape's and
  // Expand's shape: 1; ConstantOfShape's: 0); -1: none.
  int batch_shape_operands_from = -1;
  // With only invariant data and a batch-dependent shape operand, makes a batch-shaped tensor
  // whose items are alike (ConstantOfShape, Expand of a parameter).
  bool batch_fill = false;
  HostFold fold;
  MacsFn macs = nullptr;
  // Attribute names VerifyGraph accepts on the op's nodes besides its ONNX schema's (any opset)
  // and Cuvil's internal ones (internal_attrs.h): for an op ONNX has no schema for (Cuvil's own,
  // com.microsoft's), the attributes it takes; for another, what its shape function leaves for
  // its emitter under an ONNX-like name (a constant input as an attribute: CumSum's "axis").
  std::vector<std::string> attributes;
};

// Sets the traits of one row; returned by OpTable::DefineShape and OpTable::Row.
class OpRow {
 public:
  explicit OpRow(OpDef& def) : def_(def) {}
  OpRow& Domain(OpDomain d) {
    def_.domain = d;
    return *this;
  }
  OpRow& Batch(BatchClass c) {
    def_.batch = c;
    return *this;
  }
  OpRow& BatchShapeOperandsFrom(int input) {
    def_.batch_shape_operands_from = input;
    return *this;
  }
  OpRow& BatchFill() {
    def_.batch_fill = true;
    return *this;
  }
  OpRow& Attributes(std::vector<std::string> names) {
    def_.attributes = std::move(names);
    return *this;
  }
  OpRow& Fold(HostFold f) {
    def_.fold = f;
    return *this;
  }
  OpRow& Macs(MacsFn fn) {
    def_.macs = fn;
    return *this;
  }
  OpRow& Strings() {
    def_.takes_strings = true;
    return *this;
  }

 private:
  OpDef& def_;
};

// Thread-safe after construction (read-only); built once by Get().
class OpTable {
 public:
  // The process-wide table holding every op of every family.
  static const OpTable& Get();

  // Sets op_type's shape function; returns the row to set its traits on. Used by the families
  // while the table is built.
  OpRow DefineShape(const std::string& op_type, ir::InferFn infer);
  // Sets op_type's code generator. Used by the families while the table is built.
  void DefineEmitter(const std::string& op_type, codegen::EmitFn emit);
  // Sets op_type's shape function, which rewrites the node into `target` (an op with its own
  // complete row) instead of op_type having an emitter.
  OpRow DefineRewrite(const std::string& op_type, ir::InferFn infer, const std::string& target);
  // op_type's row (made if new), to set traits on after its definition.
  OpRow Row(const std::string& op_type);
  // Marks op_type as accepting string tensors (OpDef::takes_strings).
  void AllowStrings(const std::string& op_type) { Row(op_type).Strings(); }

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
  // Every complete row missing a required trait, sorted: "<op>: <trait>" (empty in a correct
  // build; tested). Required: a batch class.
  std::vector<std::string> MissingTraits() const;

 private:
  std::map<std::string, OpDef> rows_;
};

// Helpers for MacsFn: a dim or a shape's element count at `syms` (0 when the graph decides it at
// run time).
double DimAt(const SymDim& d, absl::Span<const int64_t> syms);
double ElementsAt(const SymShape& s, absl::Span<const int64_t> syms);

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
