// Code generation for If, Loop and Scan (canonical form: see ops/shape_control_flow.cc).
//
// Each subgraph is lowered into the same module as a function of its own,
//   i32 <kernel>_<attr>(ptr inputs, ptr outputs, i64 batch, ptr arena, ptr table),
// built like cuvil_entry: its own memory plan (formal inputs then captures are `inputs`, its
// outputs are `outputs`, intermediates in `arena`, constants in a private global), one kernel
// function per node, each in a slot of the module's function table (KernelRegistry, the slots
// after the control-flow kernel's own) and called through `table`, the execution's table that
// the control-flow kernel passes on: subgraph kernels are patchable like the graph's, and one
// execution runs one table throughout, nested calls included.
// The control-flow kernel allocates the subgraph's arena on the heap once per execution and
// calls the subgraph function per branch / iteration. Loop and Scan keep their loop-carried
// values in two heap buffers (the body reads one and writes the other, then they are copied), so
// a body never reads a buffer it writes; scan slices go through contiguous heap buffers.
#include <optional>
#include <string>

#include "codegen/kernel_context.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/runtime/dim_expr_codec.h"
#include "memory_plan.h"
#include "subgraph_import.h"

namespace cuvil::codegen {
namespace {

// Largest EntryError code a subgraph's status is forwarded as (the enum's codes are below).
constexpr int32_t kMaxForwardedCode = 63;

// A lowered subgraph: its entry function and arena size (per_batch * batch + fixed bytes).
struct LoweredSubgraph {
  llvm::Function* fn = nullptr;
  int64_t per_batch_bytes = 0;
  int64_t fixed_bytes = 0;
  size_t num_inputs = 0;
  size_t num_outputs = 0;
  // Set when the subgraph's memory plan is symbolic: its arena size, replacing the two above.
  std::optional<DimExpr> arena_bytes;
};

llvm::Value* ByteSize(llvm::IRBuilder<>& b, const ir::TensorType& t, llvm::Value* batch,
                      llvm::Value* syms) {
  return EmitDim(b, t.ByteSize(), batch, syms);
}

// Lowers `g` (already optimised by shape inference) into `k`'s module as described above.
absl::StatusOr<LoweredSubgraph> LowerSubgraph(KernelContext& k, const ir::Graph& g,
                                              const std::string& tag) {
  auto plan = PlanMemory(g);
  if (!plan.ok()) {
    return absl::Status(plan.status().code(), absl::StrCat(k.node().Describe(), ": subgraph '", tag,
                                                           "': ", plan.status().message()));
  }
  llvm::Module& module = k.module();
  llvm::LLVMContext& c = module.getContext();
  std::string prefix = absl::StrCat(k.function()->getName().str(), "_", tag);
  llvm::Type* ptr = llvm::PointerType::getUnqual(c);
  llvm::Type* i64 = llvm::Type::getInt64Ty(c);
  llvm::Type* i32 = llvm::Type::getInt32Ty(c);

  const WeightsBlob& w = plan->weights;
  auto* weights = new llvm::GlobalVariable(
      module, llvm::ArrayType::get(llvm::Type::getInt8Ty(c), w.size()), /*isConstant=*/true,
      llvm::GlobalValue::PrivateLinkage,
      llvm::ConstantDataArray::getRaw(
          llvm::StringRef(reinterpret_cast<const char*>(w.data()), w.size()), w.size(),
          llvm::Type::getInt8Ty(c)),
      prefix + "_weights");
  weights->setAlignment(llvm::Align(64));

  llvm::FunctionType* kernel_ty = k.function()->getFunctionType();
  std::vector<llvm::Function*> kernels;
  std::vector<int> slots;  // Function-table slot of each kernel (-1: no registry, call directly).
  int index = 0;
  for (const auto& node : g.nodes()) {
    const OpDef* op = OpTable::Get().Find(node->op_type);
    if (op == nullptr) {
      return absl::UnimplementedError(absl::StrCat("unsupported op ", node->Describe(), " (",
                                                   OpTable::Get().WhyMissing(node->op_type), ")"));
    }
    std::string name = absl::StrCat(prefix, "_k", index++, "_", node->op_type);
    llvm::Function* fn =
        llvm::Function::Create(kernel_ty, llvm::Function::InternalLinkage, name, module);
    fn->copyAttributesFrom(k.function());
    const int slot = k.registry() != nullptr ? k.registry()->Add(fn, *node, k.kernel_index()) : -1;
    KernelContext kc(module, fn, *node);
    kc.set_registry(k.registry(), slot);
    if (auto s = op->emit(kc); !s.ok()) return s;
    kc.b().CreateRet(kc.Status());
    kernels.push_back(fn);
    slots.push_back(slot);
  }

  auto* entry_ty = llvm::FunctionType::get(i32, {ptr, ptr, i64, ptr, ptr, ptr}, false);
  llvm::Function* entry =
      llvm::Function::Create(entry_ty, llvm::Function::InternalLinkage, prefix, module);
  entry->copyAttributesFrom(k.function());
  llvm::Value* inputs = entry->getArg(0);
  llvm::Value* outputs = entry->getArg(1);
  llvm::Value* batch = entry->getArg(2);
  llvm::Value* arena = entry->getArg(3);
  llvm::Value* table = entry->getArg(4);
  llvm::Value* caller_syms = entry->getArg(5);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(c, "entry", entry));
  // Each kernel's args: its inputs, its outputs, then the symbols and table slots
  // (kernel_context.h). The subgraph's symbol values are its own array (only the batch so far,
  // see EmitSymbolValues).
  size_t max_args = 2;
  for (const auto& n : g.nodes())
    max_args = std::max(max_args, n->inputs.size() + n->outputs.size() + 2);
  llvm::Value* args = b.CreateAlloca(ptr, b.getInt64(max_args), "args");
  auto syms = EmitSymbolValues(b, g, batch, caller_syms);
  if (!syms.ok()) return syms.status();
  auto address = [&](const ir::Value* v) {
    return EmitBufferAddress(b, plan->locations.at(v), inputs, outputs, weights, batch, arena,
                             *syms);
  };
  llvm::Value* null = llvm::ConstantPointerNull::get(llvm::PointerType::getUnqual(c));
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& n = *g.nodes()[i];
    size_t slot = 0;
    for (const ir::Value* v : n.inputs) {
      b.CreateStore(v ? address(v) : null, b.CreateConstGEP1_64(ptr, args, slot++));
    }
    for (const ir::Value* v : n.outputs) {
      b.CreateStore(v && plan->locations.count(v) ? address(v) : null,
                    b.CreateConstGEP1_64(ptr, args, slot++));
    }
    b.CreateStore(*syms, b.CreateConstGEP1_64(ptr, args, slot));
    b.CreateStore(table, b.CreateConstGEP1_64(ptr, args, slot + 1));
    llvm::Value* callee = kernels[i];
    if (slots[i] >= 0) {
      // As cuvil_entry does: acquire pairs with a tool's release store redirecting the slot.
      llvm::LoadInst* fn = b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, table, slots[i]));
      fn->setAtomic(llvm::AtomicOrdering::Acquire);
      fn->setAlignment(llvm::Align(8));
      callee = fn;
    }
    llvm::Value* rc = b.CreateCall(kernel_ty, callee, {args, batch});
    llvm::BasicBlock* fail = llvm::BasicBlock::Create(c, "fail", entry);
    llvm::BasicBlock* next = llvm::BasicBlock::Create(c, "next", entry);
    b.CreateCondBr(b.CreateICmpNE(rc, b.getInt32(0)), fail, next);
    b.SetInsertPoint(fail);
    b.CreateRet(rc);
    b.SetInsertPoint(next);
  }
  // Outputs no node writes (inputs, captures, constants, repeated values) are copied.
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const ir::Value* v = g.outputs[i];
    const BufferLocation& loc = plan->locations.at(v);
    if (loc.kind == BufferLocation::Kind::kOutput && loc.index == static_cast<int>(i)) continue;
    llvm::Value* dst = b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, outputs, i));
    // memmove: a loop body may return a value it was given in a buffer the caller reuses.
    b.CreateMemMove(dst, llvm::MaybeAlign(1), address(v), llvm::MaybeAlign(1),
                    ByteSize(b, v->type, batch, *syms));
  }
  b.CreateRet(b.getInt32(0));
  LoweredSubgraph lowered{entry, plan->arena.per_batch_bytes, plan->arena.fixed_bytes,
                          g.inputs.size(), g.outputs.size()};
  if (plan->arena.symbolic()) {
    auto bytes = DecodeDimExpr(plan->arena.bytes_program, g.symbols);
    if (!bytes.ok()) return bytes.status();
    lowered.arena_bytes = *std::move(bytes);
  }
  return lowered;
}

absl::StatusOr<const ir::Graph*> GraphAttr(KernelContext& k, const char* key) {
  auto it = k.node().attrs.find(key);
  if (it != k.node().attrs.end()) {
    if (auto* g = std::get_if<std::shared_ptr<ir::Graph>>(&it->second); g != nullptr && *g) {
      return g->get();
    }
  }
  return k.Error(absl::StrCat("missing graph attribute '", key, "'"));
}

size_t ExplicitInputs(KernelContext& k) {
  return static_cast<size_t>(
      k.node().attr_int(kExplicitInputsAttr, static_cast<int64_t>(k.num_inputs())));
}

// Heap arena of a subgraph for this execution (at least one cache line, never null).
llvm::Value* AllocArena(KernelContext& k, const LoweredSubgraph& s) {
  auto& b = k.b();
  llvm::Value* bytes = s.arena_bytes ? k.Dim(*s.arena_bytes)
                                     : b.CreateAdd(b.CreateMul(k.batch(), k.I64(s.per_batch_bytes)),
                                                   k.I64(s.fixed_bytes));
  return k.AllocHeap(b.CreateAdd(bytes, k.I64(64)), std::nullopt);  // per iteration, unbounded
}

// A tensor's byte size inside a kernel (symbols through the kernel's args).
llvm::Value* KernelByteSize(KernelContext& k, const ir::TensorType& t) {
  return k.Dim(t.ByteSize());
}

llvm::Value* Heap(KernelContext& k, const ir::TensorType& t) {
  return k.AllocHeap(k.b().CreateAdd(KernelByteSize(k, t), k.I64(64)), std::nullopt);
}

// Calls `s` and forwards a failure code into the kernel's status; returns the i1 "it failed".
llvm::Value* CallSubgraph(KernelContext& k, const LoweredSubgraph& s, llvm::Value* inputs,
                          llvm::Value* outputs, llvm::Value* arena) {
  auto& b = k.b();
  llvm::Value* table = k.FunctionTable();
  if (table == nullptr) table = llvm::ConstantPointerNull::get(b.getPtrTy());
  llvm::Value* syms = k.SymbolArray();
  if (syms == nullptr) syms = llvm::ConstantPointerNull::get(b.getPtrTy());
  llvm::Value* rc = b.CreateCall(s.fn, {inputs, outputs, k.batch(), arena, table, syms});
  for (int32_t code = 1; code <= kMaxForwardedCode; ++code) {
    k.FailIf(b.CreateICmpEQ(rc, b.getInt32(code)), code);
  }
  return b.CreateICmpNE(rc, b.getInt32(0));
}

// Pointer array of `count` slots filled with `values` from slot `first` on.
void StorePtrs(KernelContext& k, llvm::Value* array, size_t first,
               const std::vector<llvm::Value*>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    k.b().CreateStore(values[i], k.b().CreateConstGEP1_64(k.b().getPtrTy(), array, first + i));
  }
}

std::vector<llvm::Value*> Captures(KernelContext& k) {
  std::vector<llvm::Value*> out;
  for (size_t i = ExplicitInputs(k); i < k.num_inputs(); ++i) out.push_back(k.in(i));
  return out;
}

absl::Status EmitIf(KernelContext& k) {
  auto then_g = GraphAttr(k, "then_branch");
  if (!then_g.ok()) return then_g.status();
  auto else_g = GraphAttr(k, "else_branch");
  if (!else_g.ok()) return else_g.status();
  auto then_s = LowerSubgraph(k, **then_g, "then");
  if (!then_s.ok()) return then_s.status();
  auto else_s = LowerSubgraph(k, **else_g, "else");
  if (!else_s.ok()) return else_s.status();
  auto& b = k.b();
  std::vector<llvm::Value*> captures = Captures(k);
  llvm::Value* inputs = k.Scratch(b.getPtrTy(), std::max<size_t>(captures.size(), 1));
  StorePtrs(k, inputs, 0, captures);
  size_t n_out = (*then_g)->outputs.size();
  llvm::Value* outputs = k.Scratch(b.getPtrTy(), std::max<size_t>(n_out, 1));
  // Outputs the node drops still need a buffer for the branch to write: the larger branch's, its
  // sizes the data decides at their upper bounds.
  std::vector<llvm::Value*> temps;
  for (size_t i = 0; i < n_out; ++i) {
    llvm::Value* p = k.has_output(i) ? k.out(i) : nullptr;
    if (p == nullptr) {
      auto then_bytes = (*then_g)->UpperBound((*then_g)->outputs[i]->type.ByteSize());
      auto else_bytes = (*else_g)->UpperBound((*else_g)->outputs[i]->type.ByteSize());
      if (!then_bytes || !else_bytes) return k.Error("an output's upper bound is too large");
      llvm::Value* bytes =
          b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, k.Dim(*then_bytes), k.Dim(*else_bytes));
      p = k.AllocHeap(b.CreateAdd(bytes, k.I64(64)), std::nullopt);
      temps.push_back(p);
    }
    StorePtrs(k, outputs, i, {p});
  }
  // (output, dim, symbol) triples: sizes the branch that ran decides (shape_control_flow.cc).
  const std::vector<int64_t> decided = k.node().attr_ints(kIfDataDependentDims);
  llvm::Value* cond = b.CreateICmpNE(k.Load(k.in_dtype(0), k.in(0), k.I64(0)),
                                     llvm::Constant::getNullValue(k.ElemType(k.in_dtype(0))));
  auto run = [&](const LoweredSubgraph& s, const ir::Graph& g) {
    llvm::Value* arena = AllocArena(k, s);
    CallSubgraph(k, s, inputs, outputs, arena);
    k.FreeHeap(arena);
    for (size_t t = 0; t + 2 < decided.size(); t += 3) {
      const SymDim& dim = g.outputs[static_cast<size_t>(decided[t])]
                              ->type.shape[static_cast<size_t>(decided[t + 1])];
      k.StoreSymbol(static_cast<int32_t>(decided[t + 2]), k.Dim(dim));
    }
  };
  k.If(cond, [&] { run(*then_s, **then_g); }, [&] { run(*else_s, **else_g); });
  for (llvm::Value* t : temps) k.FreeHeap(t);
  return absl::OkStatus();
}

// Loop-carried state: the body reads `cur` and writes `next`, which is then copied into `cur`.
struct Carried {
  std::vector<llvm::Value*> cur, next;
  std::vector<llvm::Value*> bytes;
};

Carried AllocCarried(KernelContext& k, const std::vector<ir::TensorType>& types,
                     const std::vector<llvm::Value*>& initial) {
  Carried c;
  for (size_t j = 0; j < types.size(); ++j) {
    c.bytes.push_back(KernelByteSize(k, types[j]));
    c.cur.push_back(Heap(k, types[j]));
    c.next.push_back(Heap(k, types[j]));
    k.b().CreateMemCpy(c.cur[j], llvm::MaybeAlign(1), initial[j], llvm::MaybeAlign(1), c.bytes[j]);
  }
  return c;
}

void Advance(KernelContext& k, const Carried& c) {
  for (size_t j = 0; j < c.cur.size(); ++j) {
    k.b().CreateMemCpy(c.cur[j], llvm::MaybeAlign(1), c.next[j], llvm::MaybeAlign(1), c.bytes[j]);
  }
}

// Copies the final state to the node's outputs 0..n-1 and frees the state buffers.
void Finish(KernelContext& k, const Carried& c) {
  for (size_t j = 0; j < c.cur.size(); ++j) {
    if (k.has_output(j)) {
      k.b().CreateMemCpy(k.out(j), llvm::MaybeAlign(1), c.cur[j], llvm::MaybeAlign(1), c.bytes[j]);
    }
    k.FreeHeap(c.cur[j]);
    k.FreeHeap(c.next[j]);
  }
}

absl::Status EmitLoop(KernelContext& k) {
  auto body_g = GraphAttr(k, "body");
  if (!body_g.ok()) return body_g.status();
  const ir::Graph& g = **body_g;
  auto body = LowerSubgraph(k, g, "body");
  if (!body.ok()) return body.status();
  auto& b = k.b();
  llvm::LLVMContext& c = k.llvm_context();
  size_t n = ExplicitInputs(k) - 2;
  size_t scans = g.outputs.size() - 1 - n;
  std::vector<ir::TensorType> types;
  std::vector<llvm::Value*> initial;
  for (size_t j = 0; j < n; ++j) {
    types.push_back(k.in_type(2 + j));
    initial.push_back(k.in(2 + j));
  }
  Carried state = AllocCarried(k, types, initial);
  std::vector<llvm::Value*> slices, slice_bytes;
  for (size_t s = 0; s < scans; ++s) {
    const ir::TensorType& t = g.outputs[1 + n + s]->type;
    slices.push_back(Heap(k, t));
    slice_bytes.push_back(KernelByteSize(k, t));
  }
  llvm::Value* iter = k.Scratch(b.getInt64Ty());
  llvm::Value* cond_in = k.Scratch(b.getInt8Ty());
  llvm::Value* cond_out = k.Scratch(b.getInt8Ty());
  std::vector<llvm::Value*> captures = Captures(k);
  llvm::Value* inputs = k.Scratch(b.getPtrTy(), 2 + n + captures.size());
  StorePtrs(k, inputs, 0, {iter, cond_in});
  StorePtrs(k, inputs, 2, state.cur);
  StorePtrs(k, inputs, 2 + n, captures);
  llvm::Value* outputs = k.Scratch(b.getPtrTy(), 1 + n + scans);
  StorePtrs(k, outputs, 0, {cond_out});
  StorePtrs(k, outputs, 1, state.next);
  StorePtrs(k, outputs, 1 + n, slices);
  llvm::Value* trips = k.has_input(0) ? k.Convert(k.Load(k.in_dtype(0), k.in(0), k.I64(0)),
                                                  k.in_dtype(0), DType::kInt64)
                                      : k.I64(std::numeric_limits<int64_t>::max());
  llvm::Value* go = k.has_input(1)
                        ? b.CreateICmpNE(k.Load(k.in_dtype(1), k.in(1), k.I64(0)),
                                         llvm::Constant::getNullValue(k.ElemType(k.in_dtype(1))))
                        : b.getTrue();
  llvm::Value* arena = AllocArena(k, *body);

  // while (i < M && cond && no failure) { run the body; i++ }
  llvm::Function* fn = k.function();
  llvm::BasicBlock* pre = b.GetInsertBlock();
  llvm::BasicBlock* header = llvm::BasicBlock::Create(c, "loop", fn);
  llvm::BasicBlock* body_bb = llvm::BasicBlock::Create(c, "iteration", fn);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(c, "loop_exit", fn);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2, "iter");
  llvm::PHINode* cont = b.CreatePHI(b.getInt1Ty(), 2, "cont");
  i->addIncoming(k.I64(0), pre);
  cont->addIncoming(go, pre);
  b.CreateCondBr(b.CreateAnd(cont, b.CreateICmpSLT(i, trips)), body_bb, exit);
  b.SetInsertPoint(body_bb);
  b.CreateStore(i, iter);
  b.CreateStore(b.getInt8(1), cond_in);  // Only reached while the condition holds.
  llvm::Value* failed = CallSubgraph(k, *body, inputs, outputs, arena);
  Advance(k, state);
  for (size_t s = 0; s < scans; ++s) {
    if (!k.has_output(n + s)) continue;
    llvm::Value* dst =
        b.CreateInBoundsGEP(b.getInt8Ty(), k.out(n + s), b.CreateMul(i, slice_bytes[s]));
    b.CreateMemCpy(dst, llvm::MaybeAlign(1), slices[s], llvm::MaybeAlign(1), slice_bytes[s]);
  }
  llvm::Value* again = b.CreateAnd(
      b.CreateNot(failed), b.CreateICmpNE(b.CreateLoad(b.getInt8Ty(), cond_out), b.getInt8(0)));
  i->addIncoming(b.CreateAdd(i, k.I64(1)), b.GetInsertBlock());
  cont->addIncoming(again, b.GetInsertBlock());
  b.CreateBr(header);
  b.SetInsertPoint(exit);

  k.FreeHeap(arena);
  for (llvm::Value* p : slices) k.FreeHeap(p);
  Finish(k, state);
  return absl::OkStatus();
}

// Copies slice `t` along `axis` between a tensor of `shape` (`full`) and a contiguous slice
// buffer: to the slice when `gather`, else back into the tensor.
void CopySlice(KernelContext& k, const ir::TensorType& type, int axis, llvm::Value* full,
               llvm::Value* slice, llvm::Value* t, bool gather) {
  auto& b = k.b();
  SymShape before(type.shape.begin(), type.shape.begin() + axis);
  SymShape after(type.shape.begin() + axis + 1, type.shape.end());
  llvm::Value* outer = k.NumElements(before);
  llvm::Value* len = k.Dim(type.shape[axis]);
  llvm::Value* inner = k.NumElements(after);
  DType d = type.dtype;
  k.For(k.I64(0), outer, [&](llvm::Value* o) {
    llvm::Value* src_row = b.CreateMul(b.CreateAdd(b.CreateMul(o, len), t), inner);
    llvm::Value* slice_row = b.CreateMul(o, inner);
    llvm::Value* a = k.ElemPtr(d, full, src_row);
    llvm::Value* s = k.ElemPtr(d, slice, slice_row);
    if (gather) {
      k.Memcpy(s, a, inner, d);
    } else {
      k.Memcpy(a, s, inner, d);
    }
  });
}

absl::Status EmitScan(KernelContext& k) {
  auto body_g = GraphAttr(k, "body");
  if (!body_g.ok()) return body_g.status();
  const ir::Graph& g = **body_g;
  auto body = LowerSubgraph(k, g, "body");
  if (!body.ok()) return body.status();
  auto& b = k.b();
  // An opset-8 Scan runs the opset-9 scan once per batch item (dim 0 of every input and output).
  bool batched = k.node().attr_int(kScanBatchedAttr, 0) != 0;
  size_t first = batched ? 1 : 0;  // Skips sequence_lens.
  size_t m = static_cast<size_t>(k.node().attr_int("num_scan_inputs", 1));
  size_t n = ExplicitInputs(k) - first - m;
  size_t scans = g.outputs.size() - n;
  std::vector<int64_t> in_axes = k.node().attr_ints("scan_input_axes");
  std::vector<int64_t> in_dirs = k.node().attr_ints("scan_input_directions");
  std::vector<int64_t> out_axes = k.node().attr_ints("scan_output_axes");
  std::vector<int64_t> out_dirs = k.node().attr_ints("scan_output_directions");
  auto item = [&](ir::TensorType t) {
    if (batched) t.shape.erase(t.shape.begin());
    return t;
  };
  std::vector<ir::TensorType> state_t, in_t, out_t;
  for (size_t j = 0; j < n; ++j) state_t.push_back(item(k.in_type(first + j)));
  for (size_t s = 0; s < m; ++s) in_t.push_back(item(k.in_type(first + n + s)));
  for (size_t s = 0; s < scans; ++s) {
    out_t.push_back(k.has_output(n + s) ? item(k.out_type(n + s)) : g.outputs[n + s]->type);
  }
  Carried state;
  for (const ir::TensorType& t : state_t) {
    state.bytes.push_back(KernelByteSize(k, t));
    state.cur.push_back(Heap(k, t));
    state.next.push_back(Heap(k, t));
  }
  std::vector<llvm::Value*> in_slices, out_slices;
  for (size_t s = 0; s < m; ++s) in_slices.push_back(Heap(k, g.inputs[n + s]->type));
  for (size_t s = 0; s < scans; ++s) out_slices.push_back(Heap(k, g.outputs[n + s]->type));
  std::vector<llvm::Value*> captures = Captures(k);
  llvm::Value* inputs = k.Scratch(b.getPtrTy(), std::max<size_t>(n + m + captures.size(), 1));
  StorePtrs(k, inputs, 0, state.cur);
  StorePtrs(k, inputs, n, in_slices);
  StorePtrs(k, inputs, n + m, captures);
  llvm::Value* outputs = k.Scratch(b.getPtrTy(), std::max<size_t>(n + scans, 1));
  StorePtrs(k, outputs, 0, state.next);
  StorePtrs(k, outputs, n, out_slices);
  llvm::Value* len = k.Dim(in_t[0].shape[in_axes[0]]);
  llvm::Value* items = batched ? k.Dim(k.in_shape(first)[0]) : k.I64(1);
  llvm::Value* arena = AllocArena(k, *body);
  llvm::Value* ok = k.Scratch(b.getInt1Ty());
  b.CreateStore(b.getTrue(), ok);
  auto step = [&](llvm::Value* t, int64_t reverse) {
    return reverse ? b.CreateSub(b.CreateSub(len, k.I64(1)), t) : t;
  };
  // Byte offset of batch item `bi` in a tensor whose item is `t`.
  auto at = [&](llvm::Value* base, const ir::TensorType& t, llvm::Value* bi) {
    return b.CreateInBoundsGEP(b.getInt8Ty(), base, b.CreateMul(bi, KernelByteSize(k, t)));
  };
  k.For(k.I64(0), items, [&](llvm::Value* bi) {
    for (size_t j = 0; j < n; ++j) {
      b.CreateMemCpy(state.cur[j], llvm::MaybeAlign(1), at(k.in(first + j), state_t[j], bi),
                     llvm::MaybeAlign(1), state.bytes[j]);
    }
    k.For(k.I64(0), len, [&](llvm::Value* t) {
      k.If(b.CreateLoad(b.getInt1Ty(), ok), [&] {
        for (size_t s = 0; s < m; ++s) {
          CopySlice(k, in_t[s], static_cast<int>(in_axes[s]), at(k.in(first + n + s), in_t[s], bi),
                    in_slices[s], step(t, in_dirs[s]), /*gather=*/true);
        }
        llvm::Value* failed = CallSubgraph(k, *body, inputs, outputs, arena);
        b.CreateStore(b.CreateNot(failed), ok);
        Advance(k, state);
        for (size_t s = 0; s < scans; ++s) {
          if (!k.has_output(n + s)) continue;
          CopySlice(k, out_t[s], static_cast<int>(out_axes[s]), at(k.out(n + s), out_t[s], bi),
                    out_slices[s], step(t, out_dirs[s]), /*gather=*/false);
        }
      });
    });
    for (size_t j = 0; j < n; ++j) {
      if (!k.has_output(j)) continue;
      b.CreateMemCpy(at(k.out(j), state_t[j], bi), llvm::MaybeAlign(1), state.cur[j],
                     llvm::MaybeAlign(1), state.bytes[j]);
    }
  });
  k.FreeHeap(arena);
  for (llvm::Value* p : in_slices) k.FreeHeap(p);
  for (llvm::Value* p : out_slices) k.FreeHeap(p);
  for (size_t j = 0; j < n; ++j) {
    k.FreeHeap(state.cur[j]);
    k.FreeHeap(state.next[j]);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterControlFlowKernels(OpTable& r) {
  r.DefineEmitter("If", EmitIf);
  r.DefineEmitter("Loop", EmitLoop);
  r.DefineEmitter("Scan", EmitScan);
}

}  // namespace cuvil::codegen
