// Private: what an op's code generator sees while it emits the body of one kernel function.
//
// Each IR node becomes one LLVM function `i32 kernel(ptr args, i64 batch)`; `args` holds the
// node's input pointers followed by its output pointers, then (slot inputs + outputs) a pointer to
// the execution's i64 symbol values (syms[id] is symbol id; syms[0] == batch, see
// EmitSymbolValues), then (slot inputs + outputs + 1) the execution's function table, and the
// result is 0 or one of the EntryError codes (compiled_model.h), which cuvil_entry returns at
// once. A kernel reads the symbols slot only when one of its dims mentions a symbol other than 0
// (symbol 0 is the `batch` argument), and the table slot only when it runs a subgraph, so kernels
// of batch-only models, and hand-written IR-patch kernels, never look past the outputs.
// KernelContext loads the pointers and offers the building blocks kernels share: typed
// loads/stores, loop nests over runtime extents, broadcast strides, ONNX cast semantics, and calls
// into the runtime library.
#ifndef CUVIL_COMPILER_SRC_CODEGEN_KERNEL_CONTEXT_H_
#define CUVIL_COMPILER_SRC_CODEGEN_KERNEL_CONTEXT_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuvil/compiler/ir.h"
#include "cuvil/runtime/abi.h"
#include "kernel_registry.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"
#include "op_table.h"

namespace cuvil {
struct BufferLocation;  // memory_plan.h
}  // namespace cuvil

namespace cuvil::codegen {

using Idx = std::vector<llvm::Value*>;

// Not thread-safe: one kernel is emitted at a time.
class KernelContext {
 public:
  KernelContext(llvm::Module& module, llvm::Function* fn, const ir::Node& node);
  // A context for a helper function outlined from `node`'s kernel (a parallel loop body): the
  // same building blocks, but no operands are loaded; the caller passes what it needs.
  struct Outlined {};
  KernelContext(llvm::Module& module, llvm::Function* fn, const ir::Node& node, Outlined);

  llvm::IRBuilder<>& b() { return builder_; }
  llvm::LLVMContext& llvm_context() { return module_.getContext(); }
  llvm::Module& module() { return module_; }
  llvm::Function* function() { return fn_; }
  const ir::Node& node() const { return node_; }
  llvm::Value* batch() { return batch_; }

  // Pointers to the node's input/output buffers (nullptr for omitted optional inputs).
  llvm::Value* in(size_t i) { return inputs_[i]; }
  llvm::Value* out(size_t i) { return outputs_[i]; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  bool has_output(size_t i) const { return i < outputs_.size() && outputs_[i] != nullptr; }
  const ir::TensorType& in_type(size_t i) const { return node_.inputs[i]->type; }
  const ir::TensorType& out_type(size_t i) const { return node_.outputs[i]->type; }
  DType in_dtype(size_t i) const { return in_type(i).dtype; }
  DType out_dtype(size_t i) const { return out_type(i).dtype; }
  const SymShape& in_shape(size_t i) const { return in_type(i).shape; }
  const SymShape& out_shape(size_t i) const { return out_type(i).shape; }
  // The constant behind input i, or nullptr (weights are also available at run time via in(i)).
  const HostTensor* in_constant(size_t i) const;

  // Types and constants.
  llvm::Type* ElemType(DType dtype);  // bool is i8 in memory
  llvm::Type* I64Ty() { return builder_.getInt64Ty(); }
  llvm::Type* F32Ty() { return builder_.getFloatTy(); }
  llvm::Value* I64(int64_t v) { return builder_.getInt64(static_cast<uint64_t>(v)); }
  llvm::Value* F32(float v);
  // A constant of `dtype` holding v (rounded/truncated as a cast would).
  llvm::Value* Const(DType dtype, double v);

  // The i64 value of symbol `id`: the `batch` argument for 0, else syms[id] loaded (once per
  // kernel, in the entry block so it dominates every use) through the args symbols slot. Null in
  // an outlined context, which has neither (capture the dims a ParallelFor body needs).
  llvm::Value* Symbol(int32_t id);
  // Writes the i64 `value` into syms[id]: how the kernel producing a data-dependent symbol
  // (ir::Graph::data_dependent) hands its value to the kernels after it and to the caller. The
  // kernel itself must not read Symbol(id).
  void StoreSymbol(int32_t id, llvm::Value* value);
  // The execution's symbol values array (the args symbols slot), loaded once in the entry block:
  // what a control-flow kernel hands its subgraphs. Null in an outlined context.
  llvm::Value* SymbolArray() { return batch_ == nullptr ? nullptr : LoadSymbolArray(); }
  // The execution's function table (the args table slot), loaded once in the entry block: what a
  // control-flow kernel hands its subgraphs so their kernels run from the same table. Null in an
  // outlined context.
  llvm::Value* FunctionTable();
  // The execution's StringHeap (a pointer; null at run time when the caller gave none), for
  // kernels that make strings; nullptr when this context has none (a subgraph's kernels, an
  // outlined body): the emitter then refuses the node.
  llvm::Value* StringHeap();
  // The syms entry holding the heap's address (ir::Graph::StringHeapSlot), or -1: none.
  void set_string_heap_slot(int32_t slot) { string_heap_slot_ = slot; }
  // Where a control-flow kernel registers its subgraphs' kernels (null: none, they are then
  // called directly and are not patchable), and this kernel's own slot in it.
  KernelRegistry* registry() const { return registry_; }
  int kernel_index() const { return kernel_index_; }
  void set_registry(KernelRegistry* registry, int kernel_index) {
    registry_ = registry;
    kernel_index_ = kernel_index;
  }

  // Runtime value of a dimension / of a shape's dims / of a shape's element count.
  llvm::Value* Dim(const SymDim& d);
  llvm::Value* Dim(const DimExpr& e);
  Idx Dims(const SymShape& shape);
  llvm::Value* NumElements(const SymShape& shape);
  // Row-major strides (in elements) of `shape`.
  Idx Strides(const SymShape& shape);
  // Strides of `in` viewed with numpy broadcasting inside `out` (0 on broadcast dims).
  Idx BroadcastStrides(const SymShape& in, const SymShape& out);
  // sum(idx[k] * strides[k]).
  llvm::Value* Offset(const Idx& idx, const Idx& strides);

  // Element access; `index` is an i64 element index.
  llvm::Value* ElemPtr(DType dtype, llvm::Value* base, llvm::Value* index);
  llvm::Value* Load(DType dtype, llvm::Value* base, llvm::Value* index);
  void Store(DType dtype, llvm::Value* base, llvm::Value* index, llvm::Value* value);
  // Copies `count` elements of `dtype`.
  void Memcpy(llvm::Value* dst, llvm::Value* src, llvm::Value* count, DType dtype);
  void Memset0(llvm::Value* dst, llvm::Value* count, DType dtype);

  // for (i = begin; i < end; ++i) body(i). The body may emit nested control flow.
  void For(llvm::Value* begin, llvm::Value* end, const std::function<void(llvm::Value*)>& body);
  // As For, but LLVM keeps the loop body as written (no unrolling or interleaving): for register
  // blocked bodies that already use the whole register file, where unrolling causes spills.
  void ForNoUnroll(llvm::Value* begin, llvm::Value* end,
                   const std::function<void(llvm::Value*)>& body);
  // Row-major loop nest over `extents` (innermost last); a rank-0 nest runs the body once.
  void ForNest(const Idx& extents, const std::function<void(const Idx&)>& body);
  // if (cond) then_body() [else else_body()].
  void If(llvm::Value* cond, const std::function<void()>& then_body,
          const std::function<void()>& else_body = nullptr);
  // Stack scratch holding `count` values of `type`, allocated in the entry block.
  llvm::Value* Scratch(llvm::Type* type, int64_t count = 1);
  // Heap scratch (freed with FreeHeap) for buffers whose size depends on the batch. `bound`:
  // dims that add up to at least `bytes` (an ahead-of-time library sizes its scratch region from
  // them), or nullopt when no shape bounds the size.
  llvm::Value* AllocHeap(llvm::Value* bytes, std::optional<std::vector<SymDim>> bound);
  // Records that a microkernel call of this kernel takes scratch: `kind` a cuvil_scratch_kind,
  // `words` what sizes it (cuvil/runtime/ukernel_scratch.h). Nothing without a registry.
  void NoteScratch(int32_t kind, std::vector<SymDim> words);
  void FreeHeap(llvm::Value* ptr);

  // Converts between element types with ONNX Cast semantics (float→int truncates, →bool is != 0).
  llvm::Value* Convert(llvm::Value* v, DType from, DType to);
  // Type-aware helpers for scalar values of `dtype`.
  llvm::Value* Add(DType d, llvm::Value* a, llvm::Value* b);
  llvm::Value* Sub(DType d, llvm::Value* a, llvm::Value* b);
  llvm::Value* Mul(DType d, llvm::Value* a, llvm::Value* b);
  // Integer division never traps: x / 0 = 0 and INT_MIN / -1 = INT_MIN (two's-complement wrap).
  llvm::Value* Div(DType d, llvm::Value* a, llvm::Value* b);
  // Integer remainder (C sign rule) that never traps: x % 0 = 0 and x % -1 = 0.
  llvm::Value* Rem(DType d, llvm::Value* a, llvm::Value* b);
  llvm::Value* Min(DType d, llvm::Value* a, llvm::Value* b);  // NaN-propagating for floats
  llvm::Value* Max(DType d, llvm::Value* a, llvm::Value* b);
  llvm::Value* Less(DType d, llvm::Value* a, llvm::Value* b);     // i1
  llvm::Value* Greater(DType d, llvm::Value* a, llvm::Value* b);  // i1
  llvm::Value* Equal(DType d, llvm::Value* a, llvm::Value* b);    // i1
  // Largest / smallest value of the dtype (±inf for floats).
  llvm::Value* Lowest(DType d);
  llvm::Value* Highest(DType d);
  // Unary float intrinsic (llvm.exp, llvm.sqrt, ...) on a float value.
  llvm::Value* Intrinsic(llvm::Intrinsic::ID id, llvm::Value* v);
  llvm::Value* Intrinsic2(llvm::Intrinsic::ID id, llvm::Value* a, llvm::Value* b);
  // Vectorisable approximations built from arithmetic, selects and bit operations only (no libm
  // calls), so loops using them vectorise. `x` is a float32 scalar or vector; other float types
  // fall back to the exact intrinsic / libm call. Errors (float32): exp < 2e-7 relative (denormal
  // results to 2e-45 absolute), erf < 3e-7 relative below |x| = 1 and < 1e-7 absolute above,
  // tanh < 3e-7 relative; NaN in gives NaN out and infinities give the exact limits.
  llvm::Value* FastExp(llvm::Value* x);
  llvm::Value* FastErf(llvm::Value* x);
  llvm::Value* FastTanh(llvm::Value* x);
  // 1 / (1 + exp(-x)).
  llvm::Value* FastSigmoid(llvm::Value* x);
  // x * 0.5 * (1 + erf(x / sqrt(2))), GELU as PyTorch exports it.
  llvm::Value* FastGelu(llvm::Value* x);

  // Runs body(begin, end) over [0, count) in parallel chunks (cuvil_rt_parallel_for), each item
  // costing about `cost_per_item` multiply-adds: the body is emitted into an outlined function
  // whose context sees `captures` (pointers or i64 values, in order; constants stay constants)
  // as `outlined_values`, and the node's inputs and outputs as in(i) and out(i). The outlined
  // context has no symbols, batch or status: capture the dims the body needs.
  void ParallelFor(llvm::Value* count, llvm::Value* cost_per_item,
                   const std::vector<llvm::Value*>& captures,
                   const std::function<void(KernelContext& outlined, const Idx& outlined_values,
                                            llvm::Value* begin, llvm::Value* end)>& body);
  // Calls a Cuvil runtime entry point with the callee type cuvil/runtime/abi.def declares for it:
  // arguments of other types or count make invalid IR, which the compile refuses (lower.cc
  // verifies the module), so a call never silently disagrees with the function it reaches.
  llvm::Value* CallAbi(abi::Fn fn, const std::vector<llvm::Value*>& args);
  // Calls a C library function (libm), declaring it from the arguments' types on first use. A
  // name abi.def declares is typed from abi.def instead (prefer CallAbi, checked by name at
  // compile time).
  llvm::Value* CallC(const std::string& name, llvm::Type* ret,
                     const std::vector<llvm::Value*>& args);

  // Records error `code` (an EntryError) when the i1 `cond` holds; branch-free, so it may sit in a
  // vectorised loop. The kernel then returns the code; its outputs are unspecified. Only in a
  // kernel's own context, not in a ParallelFor body.
  void FailIf(llvm::Value* cond, int32_t code);
  // The kernel's status so far (i32), what its `ret` returns.
  llvm::Value* Status();

  // InvalidArgument / Unimplemented naming the node.
  absl::Status Error(const std::string& message) const;
  absl::Status Unsupported(const std::string& what) const;

 private:
  void EmitFor(llvm::Value* begin, llvm::Value* end, const std::function<void(llvm::Value*)>& body,
               bool unroll);
  // b, or 1 where dividing by b would trap (0, and -1 for signed types).
  llvm::Value* SafeDivisor(DType d, llvm::Value* b);

  llvm::Module& module_;
  llvm::Function* fn_;
  const ir::Node& node_;
  llvm::IRBuilder<> builder_;
  llvm::BasicBlock* entry_block_;
  llvm::Value* batch_;
  llvm::Value* syms_ = nullptr;  // The symbols slot's pointer, loaded on first use.
  llvm::Value* LoadSymbolArray();
  std::map<int32_t, llvm::Value*> symbols_;  // Loaded syms[id], id > 0.
  llvm::Value* table_ = nullptr;             // The table slot's pointer, loaded on first use.
  KernelRegistry* registry_ = nullptr;
  int kernel_index_ = -1;
  int32_t string_heap_slot_ = -1;
  llvm::Value* status_ = nullptr;  // i32 alloca; null in outlined contexts.
  std::vector<llvm::Value*> inputs_;
  std::vector<llvm::Value*> outputs_;
};

// The i64 value of `d` (or `e`) at the insertion point of `b`, with `batch` standing for symbol 0
// and symbol id > 0 loaded from syms[id] (`syms`: the execution's i64 symbol values, see
// EmitSymbolValues); a static dim is an i64 constant.
llvm::Value* EmitDim(llvm::IRBuilder<>& b, const SymDim& d, llvm::Value* batch, llvm::Value* syms);
llvm::Value* EmitDim(llvm::IRBuilder<>& b, const DimExpr& e, llvm::Value* batch, llvm::Value* syms);

// In an entry function (cuvil_entry, a subgraph's), at the insertion point of `b`: the address of
// the buffer at `loc` — an input or output pointer from `inputs`/`outputs`, an offset into
// `weights`, or an arena offset (linear in `batch`, or an expression in the symbols `syms`).
llvm::Value* EmitBufferAddress(llvm::IRBuilder<>& b, const BufferLocation& loc, llvm::Value* inputs,
                               llvm::Value* outputs, llvm::Value* weights, llvm::Value* batch,
                               llvm::Value* arena, llvm::Value* syms);

// For an entry function (cuvil_entry, a subgraph's): the execution's symbol values array that
// every kernel's args symbols slot points to. A graph whose shapes mention only the batch gets a
// one-element array allocated at the insertion point of `b` (the entry block) holding `batch`, so
// the caller's array is never read; any other graph uses `caller_syms` (the entry's syms
// argument), Unimplemented when that is null.
absl::StatusOr<llvm::Value*> EmitSymbolValues(llvm::IRBuilder<>& b, const ir::Graph& g,
                                              llvm::Value* batch, llvm::Value* caller_syms);

// Loads element `i` of the integer index tensor at input `input`, as i64.
llvm::Value* LoadIndex(KernelContext& k, size_t input, llvm::Value* i);
// True (i1) when idx lies in [-len, len), the indices ONNX accepts along an axis of length len.
llvm::Value* IndexInRange(KernelContext& k, llvm::Value* idx, llvm::Value* len);

// The value a scatter stores where `old` is: `v` for reduction "none", else old combined with v
// ("add", "mul", "max", "min"; shape inference has checked the name).
llvm::Value* ScatterCombine(KernelContext& k, DType d, const std::string& reduction,
                            llvm::Value* old, llvm::Value* v);

// acc + x with reassociation allowed, so the vectoriser may split a float sum into lanes (ONNX
// Runtime's sums are vectorised too; the result differs only by rounding).
llvm::Value* ReassocAdd(KernelContext& k, llvm::Value* acc, llvm::Value* x);

// A mutable scalar in an entry-block stack slot (LLVM promotes it to a register), so loop bodies
// can update it. Thread-compatible, like the KernelContext it emits into.
class ScalarVar {
 public:
  ScalarVar(KernelContext& k, llvm::Value* init)
      : k_(k), type_(init->getType()), slot_(k.Scratch(type_)) {
    set(init);
  }
  // Emits a load of the current value.
  llvm::Value* get() { return k_.b().CreateLoad(type_, slot_); }
  // Emits a store of `v` (of the initial value's type).
  void set(llvm::Value* v) { k_.b().CreateStore(v, slot_); }

 private:
  KernelContext& k_;
  llvm::Type* type_;
  llvm::Value* slot_;
};

}  // namespace cuvil::codegen

#endif  // CUVIL_COMPILER_SRC_CODEGEN_KERNEL_CONTEXT_H_
