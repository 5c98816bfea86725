#include "codegen/lower.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/kernel_context.h"
#include "codegen/kernel_registry.h"
#include "codegen/llvm_targets.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/MDBuilder.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/Transforms/IPO/ConstantMerge.h"
#include "llvm/Transforms/IPO/MergeFunctions.h"

namespace cuvil::codegen {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct HostTarget {
  std::string triple;
  std::string cpu;
  std::string features;
  const llvm::Target* target = nullptr;
};

bool HostHasAvx512() {
  static const bool has = [] {
    llvm::StringMap<bool> f = llvm::sys::getHostCPUFeatures();
    for (const char* name : {"avx512f", "avx512bw", "avx512dq", "avx512vl"}) {
      if (!f.lookup(name)) return false;
    }
    return true;
  }();
  return has;
}

absl::StatusOr<HostTarget> GetHostTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  HostTarget h;
  h.triple = llvm::sys::getProcessTriple();
  h.cpu = llvm::sys::getHostCPUName().str();
  std::vector<std::string> feats;
  for (const auto& f : llvm::sys::getHostCPUFeatures()) {
    feats.push_back(absl::StrCat(f.second ? "+" : "-", f.first().str()));
  }
  // A forced 256-bit build targets the host as if it had no AVX-512 (what an AVX2 host runs).
  if (HostHasAvx512() && TargetVectorBits() < 512) feats.push_back("-avx512f");
  h.features = absl::StrJoin(feats, ",");
  std::string error;
  h.target = llvm::TargetRegistry::lookupTarget(h.triple, error);
  if (h.target == nullptr) return absl::InternalError(absl::StrCat("LLVM target lookup: ", error));
  return h;
}

// A target other than the host: every LLVM back end is registered on first use.
absl::StatusOr<HostTarget> GetCrossTarget(const LowerOptions& o) {
  RegisterAllLlvmTargets();
  HostTarget t;
  t.triple = llvm::Triple::normalize(o.target_triple);
  t.cpu = o.target_cpu.empty() ? "generic" : o.target_cpu;
  t.features = o.target_features;
  std::string error;
  t.target = llvm::TargetRegistry::lookupTarget(t.triple, error);
  if (t.target == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown target '", o.target_triple, "': ", error));
  }
  return t;
}

std::unique_ptr<llvm::TargetMachine> MakeTargetMachine(const HostTarget& h, int opt_level) {
  llvm::TargetOptions options;
  options.AllowFPOpFusion = llvm::FPOpFusion::Fast;
  auto level = opt_level >= 3   ? llvm::CodeGenOptLevel::Aggressive
               : opt_level == 0 ? llvm::CodeGenOptLevel::None
                                : llvm::CodeGenOptLevel::Default;
  // WebAssembly objects link statically (PIC there means Emscripten-style dynamic linking, with
  // GOT imports that a static wasm-ld link cannot satisfy); so do bare-metal ones (no OS, e.g.
  // Cortex-M firmware: a GOT would need the board's linker script to place and copy it).
  const llvm::Triple triple(h.triple);
  const auto reloc = triple.isWasm() || triple.getOS() == llvm::Triple::UnknownOS
                         ? llvm::Reloc::Static
                         : llvm::Reloc::PIC_;
  return std::unique_ptr<llvm::TargetMachine>(h.target->createTargetMachine(
      h.triple, h.cpu, h.features, options, reloc, llvm::CodeModel::Small, level));
}

std::string SanitizeSymbol(const std::string& s) {
  std::string out;
  for (char c : s) out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return out;
}

class ModuleBuilder {
 public:
  ModuleBuilder(const ir::Graph& graph, const MemoryPlan& plan, const HostTarget& host)
      : graph_(graph),
        plan_(plan),
        host_(host),
        module_(std::make_unique<llvm::Module>("cuvil_model", context_)) {}

  absl::Status Build(CompiledModel* model) {
    llvm::Type* ptr = llvm::PointerType::getUnqual(context_);
    llvm::Type* i64 = llvm::Type::getInt64Ty(context_);
    // i32 kernel(args, batch): 0 or an EntryError.
    llvm::FunctionType* kernel_ty =
        llvm::FunctionType::get(llvm::Type::getInt32Ty(context_), {ptr, i64}, false);
    const OpTable& ops = OpTable::Get();
    const bool makes_strings = graph_.MakesStrings();
    KernelRegistry registry(graph_.symbol);
    for (const auto& node : graph_.nodes()) {
      const OpDef* op = ops.Find(node->op_type);
      if (op == nullptr) {
        return absl::UnimplementedError(absl::StrCat("unsupported op ", node->Describe(), " (",
                                                     ops.WhyMissing(node->op_type), ")"));
      }
      // Named by slot: a control-flow kernel's subgraph kernels take the slots after it.
      const int index = static_cast<int>(registry.table().size());
      std::string name = absl::StrCat("k", index, "_", SanitizeSymbol(node->op_type));
      llvm::Function* fn =
          llvm::Function::Create(kernel_ty, llvm::Function::InternalLinkage, name, module_.get());
      SetAttributes(fn);
      registry.Add(fn, *node, /*parent=*/-1);
      node_slots_.push_back(index);
      KernelContext kc(*module_, fn, *node);
      kc.set_registry(&registry, index);
      if (makes_strings) kc.set_string_heap_slot(graph_.StringHeapSlot());
      if (auto s = op->emit(kc); !s.ok()) return s;
      kc.b().CreateRet(kc.Status());
    }
    const std::vector<llvm::Constant*>& table = registry.table();
    model->kernels = std::move(registry.kernels());
    model->scratch_sites = std::move(registry.scratch_sites());
    model->unbounded_scratch = registry.unbounded_scratch();
    auto* table_ty = llvm::ArrayType::get(ptr, table.size());
    table_ = new llvm::GlobalVariable(
        *module_, table_ty, /*isConstant=*/false, llvm::GlobalValue::ExternalLinkage,
        llvm::ConstantArray::get(table_ty, table), kFunctionTableSymbol);
    weights_ =
        new llvm::GlobalVariable(*module_, llvm::Type::getInt8Ty(context_), true,
                                 llvm::GlobalValue::ExternalLinkage, nullptr, kWeightsSymbol);
    // The table an execution uses: one acquire load per execution (see BuildEntry).
    table_ptr_ = new llvm::GlobalVariable(*module_, ptr, /*isConstant=*/false,
                                          llvm::GlobalValue::ExternalLinkage, table_,
                                          kFunctionTablePtrSymbol);
    table_ptr_->setAlignment(llvm::Align(8));
    if (auto s = BuildEntry(kernel_ty); !s.ok()) return s;
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyModule(*module_, &os)) {
      return absl::InternalError(
          absl::StrCat("generated LLVM IR is invalid: ", err.substr(0, 2000)));
    }
    return absl::OkStatus();
  }

  llvm::Module& module() { return *module_; }

 private:
  void SetAttributes(llvm::Function* fn) {
    fn->addFnAttr("target-cpu", host_.cpu);
    fn->addFnAttr("target-features", host_.features);
    // Zen 4/5 and Intel cores default to 256-bit auto-vectorisation; the kernels are shaped for
    // the full width, so let every loop use it.
    std::string bits = std::to_string(TargetVectorBits());
    fn->addFnAttr("prefer-vector-width", bits);
    fn->addFnAttr("min-legal-vector-width", bits);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    // Only called through table slots: its address carries no identity, so identical kernels
    // may be merged into one function.
    fn->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  }

  llvm::Value* Address(llvm::IRBuilder<>& b, const ir::Value* v, llvm::Value* inputs,
                       llvm::Value* outputs, llvm::Value* batch, llvm::Value* arena,
                       llvm::Value* syms) {
    return EmitBufferAddress(b, plan_.locations.at(v), inputs, outputs, weights_, batch, arena,
                             syms);
  }

  absl::Status BuildEntry(llvm::FunctionType* kernel_ty) {
    llvm::Type* ptr = llvm::PointerType::getUnqual(context_);
    llvm::Type* i64 = llvm::Type::getInt64Ty(context_);
    // cuvil_entry_table(inputs, outputs, batch, arena, table, syms) runs the model with the
    // kernels of `table`; cuvil_entry reads cuvil_fn_table_ptr once and calls it. Either way one
    // execution uses one table throughout, so a hot patch publishing a new table takes effect
    // between executions, never inside one.
    auto* entry_ty =
        llvm::FunctionType::get(llvm::Type::getInt32Ty(context_), {ptr, ptr, i64, ptr, ptr}, false);
    auto* with_table_ty = llvm::FunctionType::get(llvm::Type::getInt32Ty(context_),
                                                  {ptr, ptr, i64, ptr, ptr, ptr}, false);
    llvm::Function* entry = llvm::Function::Create(with_table_ty, llvm::Function::ExternalLinkage,
                                                   kEntryWithTableSymbol, module_.get());
    SetAttributes(entry);
    {
      llvm::Function* plain = llvm::Function::Create(entry_ty, llvm::Function::ExternalLinkage,
                                                     kEntrySymbol, module_.get());
      SetAttributes(plain);
      llvm::IRBuilder<> pb(llvm::BasicBlock::Create(context_, "entry", plain));
      // Acquire pairs with the release store that publishes a patched table.
      llvm::LoadInst* t = pb.CreateLoad(ptr, table_ptr_);
      t->setAtomic(llvm::AtomicOrdering::Acquire);
      t->setAlignment(llvm::Align(8));
      pb.CreateRet(pb.CreateCall(with_table_ty, entry,
                                 {plain->getArg(0), plain->getArg(1), plain->getArg(2),
                                  plain->getArg(3), t, plain->getArg(4)}));
    }
    llvm::Value* inputs = entry->getArg(0);
    llvm::Value* outputs = entry->getArg(1);
    llvm::Value* batch = entry->getArg(2);
    llvm::Value* arena = entry->getArg(3);
    llvm::Value* table = entry->getArg(4);
    llvm::Value* caller_syms = entry->getArg(5);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(context_, "entry", entry));
    unlikely_ = llvm::MDBuilder(context_).createBranchWeights(1, 1 << 20);
    // Each kernel's args: its inputs, its outputs, then the symbols and table slots
    // (kernel_context.h).
    size_t max_args = 2;
    for (const auto& n : graph_.nodes())
      max_args = std::max(max_args, n->inputs.size() + n->outputs.size() + 2);
    llvm::Value* args = b.CreateAlloca(ptr, b.getInt64(max_args), "args");
    if (graph_.MakesStrings()) {  // The strings' heap comes in the caller's syms.
      llvm::BasicBlock* none = llvm::BasicBlock::Create(context_, "no_string_heap", entry);
      llvm::BasicBlock* run = llvm::BasicBlock::Create(context_, "run", entry);
      b.CreateCondBr(b.CreateIsNull(caller_syms), none, run, unlikely_);
      b.SetInsertPoint(none);
      b.CreateRet(b.getInt32(kEntryNoStringHeap));
      b.SetInsertPoint(run);
    }
    auto syms = EmitSymbolValues(b, graph_, batch, caller_syms);
    if (!syms.ok()) return syms.status();
    size_t node_index = 0;
    for (const auto& n : graph_.nodes()) {
      const int index = node_slots_[node_index++];
      size_t slot = 0;
      for (const ir::Value* v : n->inputs) {
        llvm::Value* p = v ? Address(b, v, inputs, outputs, batch, arena, *syms)
                           : llvm::ConstantPointerNull::get(llvm::PointerType::getUnqual(context_));
        b.CreateStore(p, b.CreateConstGEP1_64(ptr, args, slot++));
      }
      for (const ir::Value* v : n->outputs) {
        llvm::Value* p =
            v && plan_.locations.count(v)
                ? Address(b, v, inputs, outputs, batch, arena, *syms)
                : llvm::ConstantPointerNull::get(llvm::PointerType::getUnqual(context_));
        b.CreateStore(p, b.CreateConstGEP1_64(ptr, args, slot++));
      }
      b.CreateStore(*syms, b.CreateConstGEP1_64(ptr, args, slot));
      b.CreateStore(table, b.CreateConstGEP1_64(ptr, args, slot + 1));
      // Acquire pairs with the release store of a tool that redirects this slot in place.
      auto* slot_ptr = b.CreateConstGEP1_64(ptr, table, index);
      llvm::LoadInst* fn = b.CreateLoad(ptr, slot_ptr);
      fn->setAtomic(llvm::AtomicOrdering::Acquire);
      fn->setAlignment(llvm::Align(8));
      // A failing kernel ends the execution with its code; later kernels would read its output.
      llvm::Value* rc = b.CreateCall(kernel_ty, fn, {args, batch});
      llvm::BasicBlock* fail = llvm::BasicBlock::Create(context_, "fail", entry);
      llvm::BasicBlock* next = llvm::BasicBlock::Create(context_, "next", entry);
      b.CreateCondBr(b.CreateICmpNE(rc, b.getInt32(0)), fail, next, unlikely_);
      b.SetInsertPoint(fail);
      b.CreateRet(rc);
      b.SetInsertPoint(next);
    }
    // Outputs that are not written by a node (graph inputs, constants, repeated values) are copied.
    for (size_t i = 0; i < graph_.outputs.size(); ++i) {
      const ir::Value* v = graph_.outputs[i];
      const BufferLocation& loc = plan_.locations.at(v);
      if (loc.kind == BufferLocation::Kind::kOutput && loc.index == static_cast<int>(i)) continue;
      llvm::Value* src = Address(b, v, inputs, outputs, batch, arena, *syms);
      llvm::Value* dst = b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, outputs, i));
      llvm::Value* n = EmitDim(b, v->type.ByteSize(), batch, *syms);
      b.CreateMemCpy(dst, llvm::MaybeAlign(1), src, llvm::MaybeAlign(1), n);
    }
    b.CreateRet(b.getInt32(0));
    return absl::OkStatus();
  }

  const ir::Graph& graph_;
  const MemoryPlan& plan_;
  const HostTarget& host_;
  llvm::LLVMContext context_;
  std::unique_ptr<llvm::Module> module_;
  llvm::GlobalVariable* table_ = nullptr;
  llvm::GlobalVariable* table_ptr_ = nullptr;
  llvm::GlobalVariable* weights_ = nullptr;
  llvm::MDNode* unlikely_ = nullptr;  // Branch weights of the entry's failure exits.
  std::vector<int> node_slots_;       // Function-table slot of each graph node's kernel.
};

void Optimize(llvm::Module& module, llvm::TargetMachine& tm, int opt_level) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = opt_level >= 2;
  pto.SLPVectorization = opt_level >= 2;
  llvm::PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::OptimizationLevel level = opt_level >= 3   ? llvm::OptimizationLevel::O3
                                  : opt_level == 2 ? llvm::OptimizationLevel::O2
                                  : opt_level == 1 ? llvm::OptimizationLevel::O1
                                                   : llvm::OptimizationLevel::O0;
  llvm::ModulePassManager mpm;
  if (level != llvm::OptimizationLevel::O0 && std::getenv("CUVIL_NO_MERGE_KERNELS") == nullptr) {
    // Repeated blocks (a transformer's layers, a ResNet stage) lower to kernels that differ only
    // in the pointers they are given: identical kernels become one before the expensive passes.
    mpm.addPass(llvm::ConstantMergePass());
    mpm.addPass(llvm::MergeFunctionsPass());
  }
  mpm.addPass(level == llvm::OptimizationLevel::O0 ? pb.buildO0DefaultPipeline(level)
                                                   : pb.buildPerModuleDefaultPipeline(level));
  mpm.run(module, mam);
}

}  // namespace

namespace {
thread_local int target_vector_bits_override = 0;
thread_local bool batch_invariant_kernels = false;
}  // namespace

bool BatchInvariantKernels() { return batch_invariant_kernels; }

ScopedKernelShape::ScopedKernelShape(int vector_bits, bool batch_invariant)
    : saved_bits_(target_vector_bits_override), saved_invariant_(batch_invariant_kernels) {
  if (vector_bits > 0) target_vector_bits_override = vector_bits;
  batch_invariant_kernels = batch_invariant;
}

ScopedKernelShape::~ScopedKernelShape() {
  target_vector_bits_override = saved_bits_;
  batch_invariant_kernels = saved_invariant_;
}

int TargetVectorBits() {
  if (target_vector_bits_override > 0) return target_vector_bits_override;
  if (!HostHasAvx512()) return 256;
  const char* env = std::getenv("CUVIL_TARGET_VECTOR_BITS");
  if (env != nullptr && std::string_view(env) == "256") return 256;
  return 512;
}

absl::Status LowerToObject(const ir::Graph& graph, const MemoryPlan& plan,
                           const LowerOptions& options, CompiledModel* model) {
  auto host = options.target_triple.empty() ? GetHostTarget() : GetCrossTarget(options);
  if (!host.ok()) return host.status();
  auto t0 = std::chrono::steady_clock::now();
  auto tm = MakeTargetMachine(*host, options.opt_level);
  if (tm == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("LLVM cannot target ", host->triple, " (cpu ",
                                                   host->cpu, ", features ", host->features, ")"));
  }
  ModuleBuilder builder(graph, plan, *host);
  llvm::Module& module = builder.module();
  // The target's data layout before any IR exists, so that whatever is sized while building
  // (pointer-sized integers, struct layouts, constant folding) uses its pointer width (32 bits
  // on wasm32) rather than the default 64.
  module.setTargetTriple(host->triple);
  module.setDataLayout(tm->createDataLayout());
  if (auto s = builder.Build(model); !s.ok()) return s;
  model->timings.push_back({"codegen", MsSince(t0)});

  t0 = std::chrono::steady_clock::now();
  Optimize(module, *tm, options.opt_level);
  model->timings.push_back({"optimize", MsSince(t0)});

  if (!options.emit_llvm_path.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream out(options.emit_llvm_path, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return absl::InternalError(
          absl::StrCat("cannot write ", options.emit_llvm_path, ": ", ec.message()));
    module.print(out, nullptr);
  }

  t0 = std::chrono::steady_clock::now();
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    return absl::InternalError(absl::StrCat("LLVM cannot emit object code for ", host->triple));
  }
  pm.run(module);
  model->object_code.assign(buffer.begin(), buffer.end());
  model->cpu = host->cpu;
  model->timings.push_back({"machine_code", MsSince(t0)});
  return absl::OkStatus();
}

}  // namespace cuvil::codegen
