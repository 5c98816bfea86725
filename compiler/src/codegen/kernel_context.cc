#include "codegen/kernel_context.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "codegen/dim_expr_emit.h"
#include "cuvil/runtime/ukernel_scratch.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Function.h"
#include "memory_plan.h"

namespace cuvil::codegen {

KernelContext::KernelContext(llvm::Module& module, llvm::Function* fn, const ir::Node& node)
    : module_(module), fn_(fn), node_(node), builder_(module.getContext()) {
  entry_block_ = llvm::BasicBlock::Create(module.getContext(), "entry", fn);
  builder_.SetInsertPoint(entry_block_);
  llvm::FastMathFlags fmf;
  fmf.setAllowContract(true);
  builder_.setFastMathFlags(fmf);
  status_ = builder_.CreateAlloca(builder_.getInt32Ty(), nullptr, "status");
  builder_.CreateStore(builder_.getInt32(0), status_);
  llvm::Value* args = fn->getArg(0);
  batch_ = fn->getArg(1);
  llvm::Type* ptr_ty = builder_.getPtrTy();
  size_t slot = 0;
  for (const ir::Value* v : node.inputs) {
    llvm::Value* p = nullptr;
    if (v != nullptr) {
      p = builder_.CreateLoad(ptr_ty, builder_.CreateConstGEP1_64(ptr_ty, args, slot),
                              absl::StrCat("in", slot));
    }
    inputs_.push_back(p);
    ++slot;
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    llvm::Value* p = nullptr;
    if (node.outputs[i] != nullptr) {
      p = builder_.CreateLoad(ptr_ty, builder_.CreateConstGEP1_64(ptr_ty, args, slot),
                              absl::StrCat("out", i));
    }
    outputs_.push_back(p);
    ++slot;
  }
}

KernelContext::KernelContext(llvm::Module& module, llvm::Function* fn, const ir::Node& node,
                             Outlined)
    : module_(module), fn_(fn), node_(node), builder_(module.getContext()), batch_(nullptr) {
  entry_block_ = llvm::BasicBlock::Create(module.getContext(), "entry", fn);
  builder_.SetInsertPoint(entry_block_);
  llvm::FastMathFlags fmf;
  fmf.setAllowContract(true);
  builder_.setFastMathFlags(fmf);
}

void KernelContext::ParallelFor(
    llvm::Value* count, llvm::Value* cost_per_item, const std::vector<llvm::Value*>& captures,
    const std::function<void(KernelContext&, const Idx&, llvm::Value*, llvm::Value*)>& body) {
  llvm::LLVMContext& c = llvm_context();
  llvm::Type* ptr = builder_.getPtrTy();
  // The context struct holds the non-constant captures, then the node's input and output
  // pointers (so in(i) and out(i) work in the body). Constants are used as they are: they belong
  // to no function, and a loaded copy would hide them from the optimiser (a unit stride would no
  // longer be known to be one, and the loop would not vectorise).
  std::vector<llvm::Value*> stored;
  for (llvm::Value* v : captures) {
    if (!llvm::isa<llvm::Constant>(v)) stored.push_back(v);
  }
  const size_t own = stored.size();
  for (llvm::Value* v : inputs_) {
    if (v != nullptr) stored.push_back(v);
  }
  for (llvm::Value* v : outputs_) {
    if (v != nullptr) stored.push_back(v);
  }
  std::vector<llvm::Type*> fields;
  for (llvm::Value* v : stored) fields.push_back(v->getType());
  llvm::StructType* ctx_ty = llvm::StructType::get(c, fields);
  // The outlined body: void body(ptr ctx, i64 begin, i64 end).
  auto* body_ty = llvm::FunctionType::get(builder_.getVoidTy(), {ptr, I64Ty(), I64Ty()}, false);
  llvm::Function* outlined = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage,
                                                    fn_->getName() + ".parallel", &module_);
  outlined->copyAttributesFrom(fn_);
  {
    KernelContext inner(module_, outlined, node_, Outlined{});
    inner.set_registry(registry_, kernel_index_);  // its scratch is the kernel's
    llvm::Value* ctx = outlined->getArg(0);
    std::vector<llvm::Value*> loaded;
    for (size_t i = 0; i < stored.size(); ++i) {
      loaded.push_back(inner.b().CreateLoad(fields[i], inner.b().CreateStructGEP(ctx_ty, ctx, i)));
    }
    size_t next = own;
    for (llvm::Value* v : inputs_) inner.inputs_.push_back(v == nullptr ? nullptr : loaded[next++]);
    for (llvm::Value* v : outputs_) {
      inner.outputs_.push_back(v == nullptr ? nullptr : loaded[next++]);
    }
    Idx values;
    size_t at = 0;
    for (llvm::Value* v : captures)
      values.push_back(llvm::isa<llvm::Constant>(v) ? v : loaded[at++]);
    body(inner, values, outlined->getArg(1), outlined->getArg(2));
    inner.b().CreateRetVoid();
  }
  llvm::Value* ctx = Scratch(ctx_ty);
  for (size_t i = 0; i < stored.size(); ++i) {
    builder_.CreateStore(stored[i], builder_.CreateStructGEP(ctx_ty, ctx, i));
  }
  CallAbi(abi::Fn::cuvil_rt_parallel_for, {count, cost_per_item, outlined, ctx});
}

const HostTensor* KernelContext::in_constant(size_t i) const {
  if (i >= node_.inputs.size() || node_.inputs[i] == nullptr) return nullptr;
  const auto& c = node_.inputs[i]->constant;
  return c.has_value() ? &*c : nullptr;
}

llvm::Type* KernelContext::ElemType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return builder_.getFloatTy();
    case DType::kFloat64:
      return builder_.getDoubleTy();
    case DType::kFloat16:
      return builder_.getHalfTy();
    case DType::kBFloat16:
      return builder_.getBFloatTy();
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
      return builder_.getInt8Ty();
    case DType::kInt16:
    case DType::kUInt16:
      return builder_.getInt16Ty();
    case DType::kInt32:
    case DType::kUInt32:
      return builder_.getInt32Ty();
    case DType::kInt64:
    case DType::kUInt64:
      return builder_.getInt64Ty();
    case DType::kString:  // A CuvilString view: moved, never computed on.
      return builder_.getInt128Ty();
    case DType::kUndefined:
      break;
  }
  return builder_.getInt8Ty();
}

llvm::Value* KernelContext::F32(float v) { return llvm::ConstantFP::get(builder_.getFloatTy(), v); }

llvm::Value* KernelContext::Const(DType dtype, double v) {
  llvm::Type* t = ElemType(dtype);
  if (IsFloat(dtype)) return llvm::ConstantFP::get(t, v);
  if (dtype == DType::kBool) return llvm::ConstantInt::get(t, v != 0 ? 1 : 0);
  if (IsSigned(dtype)) return llvm::ConstantInt::getSigned(t, static_cast<int64_t>(v));
  return llvm::ConstantInt::get(t, static_cast<uint64_t>(v));
}

llvm::Value* EmitDim(llvm::IRBuilder<>& b, const SymDim& d, llvm::Value* batch, llvm::Value* syms) {
  return EmitDim(b, d.expr(), batch, syms);
}

llvm::Value* EmitDim(llvm::IRBuilder<>& b, const DimExpr& e, llvm::Value* batch,
                     llvm::Value* syms) {
  if (auto c = e.AsConstant()) return b.getInt64(static_cast<uint64_t>(*c));
  // A fresh emitter per dim: nothing it emits is reused at another insertion point, so every
  // value dominates its use wherever kernels call this.
  DimExprEmitter emit(b, [&b, batch, syms](int32_t id) -> llvm::Value* {
    if (id == 0) return batch;
    return b.CreateLoad(b.getInt64Ty(), b.CreateConstGEP1_64(b.getInt64Ty(), syms, id),
                        absl::StrCat("sym", id));
  });
  return emit.Emit(e);
}

llvm::Value* KernelContext::Symbol(int32_t id) {
  if (id == 0) return batch_;
  if (batch_ == nullptr) return nullptr;  // Outlined: no args array.
  if (auto it = symbols_.find(id); it != symbols_.end()) return it->second;
  // At the end of the entry block (before its branch once it has one): the loads then dominate
  // every later use, whichever block the kernel is emitting into.
  llvm::Instruction* term = entry_block_->getTerminator();
  llvm::IRBuilder<> entry(entry_block_, term ? term->getIterator() : entry_block_->end());
  llvm::Value* syms = LoadSymbolArray();
  llvm::Value* v = entry.CreateLoad(I64Ty(), entry.CreateConstGEP1_64(I64Ty(), syms, id),
                                    absl::StrCat("sym", id));
  symbols_[id] = v;
  return v;
}

void KernelContext::StoreSymbol(int32_t id, llvm::Value* value) {
  builder_.CreateStore(value, builder_.CreateConstGEP1_64(I64Ty(), LoadSymbolArray(), id));
}

llvm::Value* KernelContext::StringHeap() {
  if (string_heap_slot_ < 0 || batch_ == nullptr) return nullptr;
  return builder_.CreateIntToPtr(Symbol(string_heap_slot_), builder_.getPtrTy(), "string_heap");
}

llvm::Value* KernelContext::LoadSymbolArray() {
  if (syms_ != nullptr) return syms_;
  llvm::Instruction* term = entry_block_->getTerminator();
  llvm::IRBuilder<> entry(entry_block_, term ? term->getIterator() : entry_block_->end());
  llvm::Type* ptr_ty = entry.getPtrTy();
  const size_t slot = node_.inputs.size() + node_.outputs.size();
  syms_ = entry.CreateLoad(ptr_ty, entry.CreateConstGEP1_64(ptr_ty, fn_->getArg(0), slot), "syms");
  return syms_;
}

llvm::Value* KernelContext::FunctionTable() {
  if (table_ != nullptr || batch_ == nullptr) return table_;
  llvm::Instruction* term = entry_block_->getTerminator();
  llvm::IRBuilder<> entry(entry_block_, term ? term->getIterator() : entry_block_->end());
  llvm::Type* ptr_ty = entry.getPtrTy();
  const size_t slot = node_.inputs.size() + node_.outputs.size() + 1;
  table_ =
      entry.CreateLoad(ptr_ty, entry.CreateConstGEP1_64(ptr_ty, fn_->getArg(0), slot), "fn_table");
  return table_;
}

llvm::Value* KernelContext::Dim(const SymDim& d) { return Dim(d.expr()); }

llvm::Value* KernelContext::Dim(const DimExpr& e) {
  if (auto c = e.AsConstant()) return I64(*c);
  // A fresh emitter per dim, as in EmitDim; the symbol values themselves are shared.
  DimExprEmitter emit(builder_, [this](int32_t id) { return Symbol(id); });
  return emit.Emit(e);
}

llvm::Value* EmitBufferAddress(llvm::IRBuilder<>& b, const BufferLocation& loc, llvm::Value* inputs,
                               llvm::Value* outputs, llvm::Value* weights, llvm::Value* batch,
                               llvm::Value* arena, llvm::Value* syms) {
  llvm::Type* ptr = b.getPtrTy();
  switch (loc.kind) {
    case BufferLocation::Kind::kInput:
      return b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, inputs, loc.index));
    case BufferLocation::Kind::kOutput:
      return b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, outputs, loc.index));
    case BufferLocation::Kind::kWeight:
      return b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), weights, loc.offset);
    case BufferLocation::Kind::kArena: {
      llvm::Value* off =
          loc.offset_expr
              ? EmitDim(b, *loc.offset_expr, batch, syms)
              : b.CreateAdd(b.CreateMul(batch, b.getInt64(loc.per_batch)), b.getInt64(loc.offset));
      return b.CreateInBoundsGEP(b.getInt8Ty(), arena, off);
    }
  }
  return nullptr;
}

absl::StatusOr<llvm::Value*> EmitSymbolValues(llvm::IRBuilder<>& b, const ir::Graph& g,
                                              llvm::Value* batch, llvm::Value* caller_syms) {
  int32_t count = 1;
  for (const auto& v : g.values()) {
    for (const SymDim& d : v->type.shape) count = std::max(count, d.expr().SymbolCount());
  }
  if (count > 1) {
    if (caller_syms != nullptr) return caller_syms;
    return absl::UnimplementedError(absl::StrCat(
        "graph '", g.name, "' has ", count, " symbols but its entry receives no symbol values"));
  }
  // A model that makes strings also reads its heap's address from the caller's array (BuildEntry
  // checked that there is one).
  const int32_t slots = g.MakesStrings() ? g.StringHeapSlot() + 1 : count;
  llvm::Value* syms = b.CreateAlloca(b.getInt64Ty(), b.getInt64(slots), "syms");
  b.CreateStore(batch, syms);
  if (slots > count) {
    const int32_t heap = g.StringHeapSlot();
    b.CreateStore(
        b.CreateLoad(b.getInt64Ty(), b.CreateConstGEP1_64(b.getInt64Ty(), caller_syms, heap)),
        b.CreateConstGEP1_64(b.getInt64Ty(), syms, heap));
  }
  return syms;
}

Idx KernelContext::Dims(const SymShape& shape) {
  Idx out;
  for (const SymDim& d : shape) out.push_back(Dim(d));
  return out;
}

llvm::Value* KernelContext::NumElements(const SymShape& shape) {
  return Dim(SymNumElements(shape));
}

Idx KernelContext::Strides(const SymShape& shape) {
  Idx out(shape.size());
  SymDim stride = SymDim::Const(1);
  for (size_t i = shape.size(); i-- > 0;) {
    out[i] = Dim(stride);
    stride = SymMul(stride, shape[i]);
  }
  return out;
}

Idx KernelContext::BroadcastStrides(const SymShape& in, const SymShape& out) {
  Idx strides = Strides(in);
  Idx result(out.size(), I64(0));
  size_t offset = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    if (!(in[i] == SymDim::Const(1))) result[offset + i] = strides[i];
  }
  return result;
}

llvm::Value* KernelContext::Offset(const Idx& idx, const Idx& strides) {
  llvm::Value* off = I64(0);
  for (size_t i = 0; i < idx.size(); ++i) {
    if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(strides[i]); c && c->isZero()) continue;
    off = builder_.CreateAdd(off, builder_.CreateMul(idx[i], strides[i]));
  }
  return off;
}

llvm::Value* KernelContext::ElemPtr(DType dtype, llvm::Value* base, llvm::Value* index) {
  return builder_.CreateInBoundsGEP(ElemType(dtype), base, index);
}

llvm::Value* KernelContext::Load(DType dtype, llvm::Value* base, llvm::Value* index) {
  return builder_.CreateLoad(ElemType(dtype), ElemPtr(dtype, base, index));
}

void KernelContext::Store(DType dtype, llvm::Value* base, llvm::Value* index, llvm::Value* value) {
  builder_.CreateStore(value, ElemPtr(dtype, base, index));
}

void KernelContext::Memcpy(llvm::Value* dst, llvm::Value* src, llvm::Value* count, DType dtype) {
  llvm::Value* bytes = builder_.CreateMul(count, I64(DTypeSize(dtype)));
  builder_.CreateMemCpy(dst, llvm::MaybeAlign(1), src, llvm::MaybeAlign(1), bytes);
}

void KernelContext::Memset0(llvm::Value* dst, llvm::Value* count, DType dtype) {
  llvm::Value* bytes = builder_.CreateMul(count, I64(DTypeSize(dtype)));
  builder_.CreateMemSet(dst, builder_.getInt8(0), bytes, llvm::MaybeAlign(1));
}

void KernelContext::For(llvm::Value* begin, llvm::Value* end,
                        const std::function<void(llvm::Value*)>& body) {
  EmitFor(begin, end, body, /*unroll=*/true);
}

void KernelContext::ForNoUnroll(llvm::Value* begin, llvm::Value* end,
                                const std::function<void(llvm::Value*)>& body) {
  EmitFor(begin, end, body, /*unroll=*/false);
}

void KernelContext::EmitFor(llvm::Value* begin, llvm::Value* end,
                            const std::function<void(llvm::Value*)>& body, bool unroll) {
  llvm::LLVMContext& c = llvm_context();
  llvm::BasicBlock* pre = builder_.GetInsertBlock();
  llvm::BasicBlock* header = llvm::BasicBlock::Create(c, "loop", fn_);
  llvm::BasicBlock* body_bb = llvm::BasicBlock::Create(c, "body", fn_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(c, "exit", fn_);
  builder_.CreateBr(header);
  builder_.SetInsertPoint(header);
  llvm::PHINode* i = builder_.CreatePHI(I64Ty(), 2, "i");
  i->addIncoming(begin, pre);
  builder_.CreateCondBr(builder_.CreateICmpSLT(i, end), body_bb, exit);
  builder_.SetInsertPoint(body_bb);
  body(i);
  llvm::Value* next = builder_.CreateAdd(i, I64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, builder_.GetInsertBlock());
  llvm::BranchInst* latch = builder_.CreateBr(header);
  if (!unroll) {
    auto hint = [&](const char* name, llvm::Metadata* v = nullptr) -> llvm::Metadata* {
      std::vector<llvm::Metadata*> ops = {llvm::MDString::get(c, name)};
      if (v != nullptr) ops.push_back(v);
      return llvm::MDNode::get(c, ops);
    };
    auto* one = llvm::ConstantAsMetadata::get(builder_.getInt32(1));
    llvm::TempMDTuple self = llvm::MDNode::getTemporary(c, {});
    llvm::MDNode* loop = llvm::MDNode::getDistinct(
        c, {self.get(), hint("llvm.loop.unroll.disable"), hint("llvm.loop.vectorize.width", one),
            hint("llvm.loop.interleave.count", one)});
    loop->replaceOperandWith(0, loop);
    latch->setMetadata(llvm::LLVMContext::MD_loop, loop);
  }
  builder_.SetInsertPoint(exit);
}

void KernelContext::ForNest(const Idx& extents, const std::function<void(const Idx&)>& body) {
  Idx idx;
  std::function<void(size_t)> rec = [&](size_t depth) {
    if (depth == extents.size()) {
      body(idx);
      return;
    }
    For(I64(0), extents[depth], [&](llvm::Value* i) {
      idx.push_back(i);
      rec(depth + 1);
      idx.pop_back();
    });
  };
  rec(0);
}

void KernelContext::If(llvm::Value* cond, const std::function<void()>& then_body,
                       const std::function<void()>& else_body) {
  llvm::LLVMContext& c = llvm_context();
  llvm::BasicBlock* then_bb = llvm::BasicBlock::Create(c, "then", fn_);
  llvm::BasicBlock* else_bb = else_body ? llvm::BasicBlock::Create(c, "else", fn_) : nullptr;
  llvm::BasicBlock* merge = llvm::BasicBlock::Create(c, "endif", fn_);
  builder_.CreateCondBr(cond, then_bb, else_bb ? else_bb : merge);
  builder_.SetInsertPoint(then_bb);
  then_body();
  builder_.CreateBr(merge);
  if (else_bb) {
    builder_.SetInsertPoint(else_bb);
    else_body();
    builder_.CreateBr(merge);
  }
  builder_.SetInsertPoint(merge);
}

llvm::Value* KernelContext::Scratch(llvm::Type* type, int64_t count) {
  llvm::IRBuilder<> entry(entry_block_, entry_block_->begin());
  return entry.CreateAlloca(type, I64(count));
}

llvm::Value* KernelContext::AllocHeap(llvm::Value* bytes,
                                      std::optional<std::vector<SymDim>> bound) {
  if (registry_ != nullptr)
    registry_->NoteScratch(kernel_index_, CUVIL_SCRATCH_HEAP, std::move(bound));
  return CallAbi(abi::Fn::cuvil_rt_alloc, {bytes});
}

void KernelContext::NoteScratch(int32_t kind, std::vector<SymDim> words) {
  if (registry_ != nullptr) registry_->NoteScratch(kernel_index_, kind, std::move(words));
}

void KernelContext::FreeHeap(llvm::Value* ptr) { CallAbi(abi::Fn::cuvil_rt_free, {ptr}); }

llvm::Value* KernelContext::Convert(llvm::Value* v, DType from, DType to) {
  if (from == to) return v;
  // The 16-bit float types go through float32: widening is exact, and the narrowing below rounds
  // to nearest even without a libcall (LLVM lowers float -> bfloat to __truncsfbf2).
  if (IsHalf(from)) return Convert(builder_.CreateFPExt(v, F32Ty()), DType::kFloat32, to);
  if (to == DType::kFloat16 && from != DType::kFloat32) {
    return Convert(Convert(v, from, DType::kFloat32), DType::kFloat32, to);
  }
  if (to == DType::kFloat16) return builder_.CreateFPTrunc(v, ElemType(to));
  if (to == DType::kBFloat16) {
    llvm::Value* f = Convert(v, from, DType::kFloat32);
    llvm::Type* i32 = builder_.getInt32Ty();
    llvm::Value* u = builder_.CreateBitCast(f, i32);
    llvm::Value* lsb = builder_.CreateAnd(builder_.CreateLShr(u, 16), 1);
    llvm::Value* rounded = builder_.CreateLShr(
        builder_.CreateAdd(u, builder_.CreateAdd(lsb, builder_.getInt32(0x7fff))), 16);
    llvm::Value* quiet = builder_.CreateOr(builder_.CreateLShr(u, 16), 0x40);
    llvm::Value* nan = builder_.CreateFCmpUNO(f, f);
    llvm::Value* bits = builder_.CreateSelect(nan, quiet, rounded);
    return builder_.CreateBitCast(builder_.CreateTrunc(bits, builder_.getInt16Ty()), ElemType(to));
  }
  llvm::Type* t = ElemType(to);
  if (to == DType::kBool) {
    llvm::Value* nz = IsFloat(from)
                          ? builder_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0))
                          : builder_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    return builder_.CreateZExt(nz, t);
  }
  if (IsFloat(from) && IsFloat(to)) return builder_.CreateFPCast(v, t);
  if (IsFloat(from)) {
    // Saturating conversion: out-of-range and NaN inputs stay defined.
    auto id = IsSigned(to) ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
    return builder_.CreateIntrinsic(id, {t, v->getType()}, {v});
  }
  bool from_signed = IsSigned(from);
  if (IsFloat(to)) return from_signed ? builder_.CreateSIToFP(v, t) : builder_.CreateUIToFP(v, t);
  return builder_.CreateIntCast(v, t, from_signed);
}

llvm::Value* KernelContext::Add(DType d, llvm::Value* a, llvm::Value* b) {
  return IsFloat(d) ? builder_.CreateFAdd(a, b) : builder_.CreateAdd(a, b);
}
llvm::Value* KernelContext::Sub(DType d, llvm::Value* a, llvm::Value* b) {
  return IsFloat(d) ? builder_.CreateFSub(a, b) : builder_.CreateSub(a, b);
}
llvm::Value* KernelContext::Mul(DType d, llvm::Value* a, llvm::Value* b) {
  return IsFloat(d) ? builder_.CreateFMul(a, b) : builder_.CreateMul(a, b);
}
llvm::Value* KernelContext::SafeDivisor(DType d, llvm::Value* b) {
  llvm::Type* t = b->getType();
  llvm::Value* bad = builder_.CreateICmpEQ(b, llvm::ConstantInt::get(t, 0));
  if (IsSigned(d)) {
    bad = builder_.CreateOr(bad, builder_.CreateICmpEQ(b, llvm::ConstantInt::getSigned(t, -1)));
  }
  return builder_.CreateSelect(bad, llvm::ConstantInt::get(t, 1), b);
}

llvm::Value* KernelContext::Div(DType d, llvm::Value* a, llvm::Value* b) {
  if (IsFloat(d)) return builder_.CreateFDiv(a, b);
  // x / 0 and INT_MIN / -1 trap (SIGFPE) on x86 and are UB in LLVM. Divide by a selected safe
  // divisor (no branch, so loops still vectorise), then select the defined results: x / 0 = 0,
  // x / -1 = -x wrapping (INT_MIN / -1 = INT_MIN, as numpy).
  llvm::Type* t = b->getType();
  llvm::Value* zero = llvm::ConstantInt::get(t, 0);
  llvm::Value* safe_b = SafeDivisor(d, b);
  llvm::Value* q = IsSigned(d) ? builder_.CreateSDiv(a, safe_b) : builder_.CreateUDiv(a, safe_b);
  if (IsSigned(d)) {
    llvm::Value* minus_one = builder_.CreateICmpEQ(b, llvm::ConstantInt::getSigned(t, -1));
    q = builder_.CreateSelect(minus_one, builder_.CreateSub(zero, a), q);
  }
  return builder_.CreateSelect(builder_.CreateICmpEQ(b, zero), zero, q);
}

llvm::Value* KernelContext::Rem(DType d, llvm::Value* a, llvm::Value* b) {
  // Remainders by 0 and -1 are 0 (for -1 mathematically, for 0 by Cuvil's definition); the safe
  // divisor 1 yields exactly that without trapping on INT_MIN % -1.
  llvm::Value* safe_b = SafeDivisor(d, b);
  return IsSigned(d) ? builder_.CreateSRem(a, safe_b) : builder_.CreateURem(a, safe_b);
}

void KernelContext::FailIf(llvm::Value* cond, int32_t code) {
  llvm::Value* prev = builder_.CreateLoad(builder_.getInt32Ty(), status_);
  builder_.CreateStore(builder_.CreateSelect(cond, builder_.getInt32(code), prev), status_);
}

llvm::Value* KernelContext::Status() { return builder_.CreateLoad(builder_.getInt32Ty(), status_); }
llvm::Value* KernelContext::Min(DType d, llvm::Value* a, llvm::Value* b) {
  if (IsFloat(d)) return builder_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a, b);
  return builder_.CreateSelect(Less(d, a, b), a, b);
}
llvm::Value* KernelContext::Max(DType d, llvm::Value* a, llvm::Value* b) {
  if (IsFloat(d)) return builder_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, b);
  return builder_.CreateSelect(Greater(d, a, b), a, b);
}
llvm::Value* KernelContext::Less(DType d, llvm::Value* a, llvm::Value* b) {
  if (IsFloat(d)) return builder_.CreateFCmpOLT(a, b);
  return IsSigned(d) ? builder_.CreateICmpSLT(a, b) : builder_.CreateICmpULT(a, b);
}
llvm::Value* KernelContext::Greater(DType d, llvm::Value* a, llvm::Value* b) {
  if (IsFloat(d)) return builder_.CreateFCmpOGT(a, b);
  return IsSigned(d) ? builder_.CreateICmpSGT(a, b) : builder_.CreateICmpUGT(a, b);
}
llvm::Value* KernelContext::Equal(DType d, llvm::Value* a, llvm::Value* b) {
  if (IsFloat(d)) return builder_.CreateFCmpOEQ(a, b);
  return builder_.CreateICmpEQ(a, b);
}

llvm::Value* KernelContext::Lowest(DType d) {
  switch (d) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
      return llvm::ConstantFP::getInfinity(ElemType(d), /*Negative=*/true);
    case DType::kInt8:
      return Const(d, -128);
    case DType::kInt16:
      return Const(d, -32768);
    case DType::kInt32:
      return Const(d, std::numeric_limits<int32_t>::min());
    case DType::kInt64:
      return llvm::ConstantInt::get(ElemType(d),
                                    static_cast<uint64_t>(std::numeric_limits<int64_t>::min()));
    default:
      return Const(d, 0);
  }
}

llvm::Value* KernelContext::Highest(DType d) {
  switch (d) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
      return llvm::ConstantFP::getInfinity(ElemType(d), /*Negative=*/false);
    case DType::kInt8:
      return Const(d, 127);
    case DType::kUInt8:
      return Const(d, 255);
    case DType::kBool:
      return Const(d, 1);
    case DType::kInt16:
      return Const(d, 32767);
    case DType::kUInt16:
      return Const(d, 65535);
    case DType::kInt32:
      return Const(d, std::numeric_limits<int32_t>::max());
    case DType::kUInt32:
      return Const(d, std::numeric_limits<uint32_t>::max());
    case DType::kInt64:
      return llvm::ConstantInt::get(ElemType(d),
                                    static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
    case DType::kUInt64:
      return llvm::ConstantInt::get(ElemType(d), ~uint64_t{0});
    default:
      return Const(d, 0);
  }
}

llvm::Value* KernelContext::Intrinsic(llvm::Intrinsic::ID id, llvm::Value* v) {
  return builder_.CreateUnaryIntrinsic(id, v);
}

llvm::Value* KernelContext::Intrinsic2(llvm::Intrinsic::ID id, llvm::Value* a, llvm::Value* b) {
  return builder_.CreateBinaryIntrinsic(id, a, b);
}

namespace {

llvm::Type* AbiLlvmType(llvm::LLVMContext& c, abi::Type t) {
  switch (t) {
    case abi::P:
      return llvm::PointerType::getUnqual(c);
    case abi::I32:
      return llvm::Type::getInt32Ty(c);
    case abi::I64:
      return llvm::Type::getInt64Ty(c);
    case abi::F32:
      return llvm::Type::getFloatTy(c);
    case abi::V:
    default:
      return llvm::Type::getVoidTy(c);
  }
}

// The LLVM type of abi.def's `f`.
llvm::FunctionType* AbiFunctionType(llvm::LLVMContext& c, const abi::Function& f) {
  std::vector<llvm::Type*> params;
  for (int i = 0; i < f.num_params; ++i) params.push_back(AbiLlvmType(c, f.params[i]));
  return llvm::FunctionType::get(AbiLlvmType(c, f.ret), params, false);
}

}  // namespace

llvm::Value* KernelContext::CallAbi(abi::Fn fn, const std::vector<llvm::Value*>& args) {
  const abi::Function& f = abi::Describe(fn);
  llvm::FunctionCallee callee =
      module_.getOrInsertFunction(f.name, AbiFunctionType(module_.getContext(), f));
  return builder_.CreateCall(callee, args);
}

llvm::Value* KernelContext::CallC(const std::string& name, llvm::Type* ret,
                                  const std::vector<llvm::Value*>& args) {
  if (const abi::Function* f = abi::Find(name); f != nullptr) {
    llvm::FunctionCallee callee =
        module_.getOrInsertFunction(name, AbiFunctionType(module_.getContext(), *f));
    return builder_.CreateCall(callee, args);
  }
  std::vector<llvm::Type*> types;
  for (llvm::Value* a : args) types.push_back(a->getType());
  llvm::FunctionCallee callee =
      module_.getOrInsertFunction(name, llvm::FunctionType::get(ret, types, false));
  return builder_.CreateCall(callee, args);
}

namespace {

// Polynomial coefficients (lowest order first), least-squares fits on Chebyshev nodes weighted for
// relative error, checked in float32 over the ranges in the comments.
// exp(r) = 1 + r + r^2 * Q(r) on [-ln2/2, ln2/2].
constexpr double kExpQ[] = {0.49999999419651386, 0.1666657745140545, 0.041666942649176295,
                            0.008363125764993245, 0.0013893834410732414};
// erf(x) = x * P(x^2) on [0, 1].
constexpr double kErfSmall[] = {1.1283791471038258,    -0.3761239067600986,  0.11280578875737657,
                                -0.026720893598353432, 0.004927419853115664, -0.00056679951868642};
// erfc(x) = exp(-x^2) * R(1/x) on [1, 4]; erf(4) rounds to 1 in float32.
constexpr double kErfcLarge[] = {0.0003356043016051326, 0.5579383316273666,  0.04987014846955143,
                                 -0.502415283043721,    0.5694930334272061,  -0.34758890382814955,
                                 0.11689748742265005,   -0.01694679625534127};
// tanh(x) = x * T(x^2) on [0, 0.625].
constexpr double kTanhSmall[] = {0.9999999982362152,   -0.3333327534854804,  0.1333136558908073,
                                 -0.05373586514081258, 0.020630307011961203, -0.005697522357003217};

bool IsF32(llvm::Value* x) { return x->getType()->getScalarType()->isFloatTy(); }

llvm::Value* Splat(llvm::Value* like, double v) {
  return llvm::ConstantFP::get(like->getType(), v);
}

template <size_t N>
llvm::Value* Horner(llvm::IRBuilder<>& b, llvm::Value* v, const double (&c)[N]) {
  llvm::Value* p = Splat(v, c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) {
    p = b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {v->getType()}, {p, v, Splat(v, c[i])});
  }
  return p;
}

}  // namespace

llvm::Value* KernelContext::FastExp(llvm::Value* x) {
  if (!IsF32(x)) return Intrinsic(llvm::Intrinsic::exp, x);
  auto& b = builder_;
  llvm::Type* t = x->getType();
  llvm::Type* it = t->getWithNewType(b.getInt32Ty());
  auto fma = [&](llvm::Value* p, llvm::Value* q, llvm::Value* r) {
    return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {t}, {p, q, r});
  };
  // Below -104 the result is 0 and above 89 infinity either way; clamping keeps n in int range.
  // maxnum/minnum turn NaN into a bound, so NaN is restored at the end.
  llvm::Value* xc =
      Intrinsic2(llvm::Intrinsic::minnum, Intrinsic2(llvm::Intrinsic::maxnum, x, Splat(x, -104.0)),
                 Splat(x, 89.0));
  // x = n ln2 + r with |r| <= ln2/2; ln2 split in two so n * ln2_hi is exact.
  llvm::Value* n = Intrinsic(llvm::Intrinsic::roundeven, b.CreateFMul(xc, Splat(x, M_LOG2E)));
  llvm::Value* r = fma(n, Splat(x, -0.693145751953125), xc);
  r = fma(n, Splat(x, -1.428606765330187e-06), r);
  llvm::Value* p = b.CreateFAdd(fma(b.CreateFMul(r, r), Horner(b, r, kExpQ), r), Splat(x, 1.0));
  // 2^n as two factors 2^(n/2) and 2^(n - n/2) so both stay normal floats for n in [-150, 129];
  // their product overflows to inf or underflows to denormals/0 exactly as exp does.
  llvm::Value* ni = b.CreateFPToSI(n, it);
  llvm::Value* e1 = b.CreateAShr(ni, llvm::ConstantInt::get(it, 1));
  llvm::Value* e2 = b.CreateSub(ni, e1);
  auto pow2 = [&](llvm::Value* e) {
    return b.CreateBitCast(b.CreateShl(b.CreateAdd(e, llvm::ConstantInt::get(it, 127)),
                                       llvm::ConstantInt::get(it, 23)),
                           t);
  };
  llvm::Value* y = b.CreateFMul(b.CreateFMul(p, pow2(e1)), pow2(e2));
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, y);
}

llvm::Value* KernelContext::FastErf(llvm::Value* x) {
  if (!IsF32(x)) {
    return CallC(x->getType()->getScalarType()->isDoubleTy() ? "erf" : "erff", x->getType(), {x});
  }
  auto& b = builder_;
  llvm::Value* ax = Intrinsic(llvm::Intrinsic::fabs, x);
  llvm::Value* small = b.CreateFMul(x, Horner(b, b.CreateFMul(x, x), kErfSmall));
  llvm::Value* z =
      Intrinsic2(llvm::Intrinsic::minnum, Intrinsic2(llvm::Intrinsic::maxnum, ax, Splat(x, 1.0)),
                 Splat(x, 4.0));
  llvm::Value* tail = b.CreateFMul(FastExp(b.CreateFNeg(b.CreateFMul(z, z))),
                                   Horner(b, b.CreateFDiv(Splat(x, 1.0), z), kErfcLarge));
  llvm::Value* large = Intrinsic2(llvm::Intrinsic::copysign, b.CreateFSub(Splat(x, 1.0), tail), x);
  llvm::Value* y = b.CreateSelect(b.CreateFCmpOLT(ax, Splat(x, 1.0)), small, large);
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, y);
}

llvm::Value* KernelContext::FastTanh(llvm::Value* x) {
  if (!IsF32(x)) {
    return CallC(x->getType()->getScalarType()->isDoubleTy() ? "tanh" : "tanhf", x->getType(), {x});
  }
  auto& b = builder_;
  llvm::Value* ax = Intrinsic(llvm::Intrinsic::fabs, x);
  llvm::Value* small = b.CreateFMul(x, Horner(b, b.CreateFMul(x, x), kTanhSmall));
  // 1 - 2 / (exp(2|x|) + 1): no cancellation for |x| >= 0.625; exp overflow gives exactly 1.
  llvm::Value* e = FastExp(b.CreateFMul(ax, Splat(x, 2.0)));
  llvm::Value* large =
      b.CreateFSub(Splat(x, 1.0), b.CreateFDiv(Splat(x, 2.0), b.CreateFAdd(e, Splat(x, 1.0))));
  large = Intrinsic2(llvm::Intrinsic::copysign, large, x);
  return b.CreateSelect(b.CreateFCmpOLT(ax, Splat(x, 0.625)), small, large);
}

llvm::Value* KernelContext::FastSigmoid(llvm::Value* x) {
  auto& b = builder_;
  return b.CreateFDiv(Splat(x, 1.0), b.CreateFAdd(Splat(x, 1.0), FastExp(b.CreateFNeg(x))));
}

llvm::Value* KernelContext::FastGelu(llvm::Value* x) {
  auto& b = builder_;
  llvm::Value* e = FastErf(b.CreateFMul(x, Splat(x, M_SQRT1_2)));
  return b.CreateFMul(b.CreateFMul(x, Splat(x, 0.5)), b.CreateFAdd(Splat(x, 1.0), e));
}

absl::Status KernelContext::Error(const std::string& message) const {
  return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": ", message));
}

absl::Status KernelContext::Unsupported(const std::string& what) const {
  return absl::UnimplementedError(absl::StrCat(node_.Describe(), ": ", what, " is not supported"));
}

llvm::Value* LoadIndex(KernelContext& k, size_t input, llvm::Value* i) {
  DType d = k.in_dtype(input);
  return k.Convert(k.Load(d, k.in(input), i), d, DType::kInt64);
}

llvm::Value* IndexInRange(KernelContext& k, llvm::Value* idx, llvm::Value* len) {
  auto& b = k.b();
  return b.CreateAnd(b.CreateICmpSGE(idx, b.CreateNeg(len)), b.CreateICmpSLT(idx, len));
}

llvm::Value* ScatterCombine(KernelContext& k, DType d, const std::string& reduction,
                            llvm::Value* old, llvm::Value* v) {
  if (reduction == "none") return v;
  return reduction == "add"   ? k.Add(d, old, v)
         : reduction == "mul" ? k.Mul(d, old, v)
         : reduction == "max" ? k.Max(d, old, v)
                              : k.Min(d, old, v);
}

llvm::Value* ReassocAdd(KernelContext& k, llvm::Value* acc, llvm::Value* x) {
  llvm::Value* r = k.b().CreateFAdd(acc, x);
  if (auto* inst = llvm::dyn_cast<llvm::Instruction>(r)) {
    llvm::FastMathFlags fmf = inst->getFastMathFlags();
    fmf.setAllowReassoc(true);
    inst->setFastMathFlags(fmf);
  }
  return r;
}

}  // namespace cuvil::codegen
