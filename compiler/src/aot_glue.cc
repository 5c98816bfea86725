#include "aot_glue.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "aot_archive.h"
#include "codegen/llvm_targets.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

namespace cuvil::aot_internal {

bool MonomialWords(const ScratchSite& s) {
  return std::all_of(s.words.begin(), s.words.end(),
                     [](const SymDim& d) { return d.IsMonomial(); });
}

bool ScratchIsBounded(const CompiledModel& model) {
  return !model.unbounded_scratch &&
         std::all_of(model.scratch_sites.begin(), model.scratch_sites.end(), MonomialWords);
}

absl::StatusOr<std::string> EmitGlue(const std::vector<AotTier>& tiers,
                                     const std::vector<size_t>& weights_owner,
                                     const std::string& name, const std::string& target_triple) {
  const CompiledModel& model = *tiers[0].model;
  const bool several = tiers.size() > 1;
  codegen::RegisterAllLlvmTargets();
  const std::string triple = target_triple.empty() ? llvm::sys::getProcessTriple()
                                                   : llvm::Triple::normalize(target_triple);
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) return absl::InternalError(absl::StrCat("LLVM target lookup: ", error));
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, "generic", "", llvm::TargetOptions(),
      llvm::Triple(triple).isWasm() || llvm::Triple(triple).getOS() == llvm::Triple::UnknownOS
          ? llvm::Reloc::Static
          : llvm::Reloc::PIC_,
      llvm::CodeModel::Small, llvm::CodeGenOptLevel::Default));
  if (tm == nullptr) return absl::InternalError(absl::StrCat("LLVM cannot target ", triple));
  llvm::LLVMContext ctx;
  llvm::Module module(name + "_glue", ctx);
  module.setTargetTriple(triple);
  module.setDataLayout(tm->createDataLayout());
  const llvm::DataLayout& dl = module.getDataLayout();
  llvm::Type* ptr = llvm::PointerType::getUnqual(ctx);
  llvm::Type* i8 = llvm::Type::getInt8Ty(ctx);
  llvm::Type* i32 = llvm::Type::getInt32Ty(ctx);
  llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);
  llvm::Type* size_ty = dl.getIntPtrType(ctx);
  // The structs cuvil_aot_run reads, from their one declaration (the runtime checks its C side
  // against the same list on each target).
  std::map<std::string, llvm::StructType*, std::less<>> structs;
  {
    llvm::Type* const I32 = i32;
    llvm::Type* const I64 = i64;
    llvm::Type* const P = ptr;
    std::vector<llvm::Type*> fields;
#define CUVIL_AOT_FIELD(f, kind, ctype, doc) fields.push_back(kind);
#define CUVIL_AOT_STRUCT(s, visibility, doc, list) \
  fields.clear();                                  \
  list structs[#s] = llvm::StructType::create(ctx, fields, #s);
#include "cuvil/runtime/aot_layout.def"
#undef CUVIL_AOT_STRUCT
#undef CUVIL_AOT_FIELD
  }
  auto* dim_ty = structs.at("cuvil_aot_dim");
  auto* tensor_ty = structs.at("cuvil_aot_tensor");
  auto* model_ty = structs.at("cuvil_aot_model");
  auto* site_ty = structs.at("cuvil_aot_scratch_site");
  auto dim_constant = [&](const SymDim& d) {
    return llvm::ConstantStruct::get(dim_ty,
                                     {llvm::ConstantInt::get(i64, d.coef()),
                                      llvm::ConstantInt::get(i32, d.IsStatic() ? 0 : d.power())});
  };

  // The weights, 64-byte aligned like the JIT engine's page-aligned copy needs at least.
  for (size_t t = 0; t < tiers.size(); ++t) {
    if (weights_owner[t] != t) continue;
    const WeightsBlob& blob = tiers[t].model->weights;
    const size_t wbytes = std::max<size_t>(blob.size(), 1);
    llvm::Constant* wdata =
        blob.empty() ? static_cast<llvm::Constant*>(
                           llvm::ConstantAggregateZero::get(llvm::ArrayType::get(i8, wbytes)))
                     : llvm::ConstantDataArray::getRaw(
                           llvm::StringRef(reinterpret_cast<const char*>(blob.data()), blob.size()),
                           blob.size(), i8);
    auto* weights = new llvm::GlobalVariable(
        module, wdata->getType(), /*isConstant=*/true, llvm::GlobalValue::ExternalLinkage, wdata,
        several ? TierSymbol(kWeightsSymbol, t) : std::string(kWeightsSymbol));
    weights->setAlignment(llvm::Align(64));
  }

  auto tensors = [&](const std::vector<TensorSignature>& sigs, const std::string& kind) {
    std::vector<llvm::Constant*> descs;
    for (size_t i = 0; i < sigs.size(); ++i) {
      const TensorSignature& s = sigs[i];
      std::vector<llvm::Constant*> dims;
      for (const SymDim& d : s.shape) dims.push_back(dim_constant(d));
      auto* dims_ty = llvm::ArrayType::get(dim_ty, dims.size());
      auto* dims_gv = new llvm::GlobalVariable(
          module, dims_ty, true, llvm::GlobalValue::PrivateLinkage,
          llvm::ConstantArray::get(dims_ty, dims), absl::StrCat(name, "_", kind, i, "_dims"));
      llvm::Constant* str = llvm::ConstantDataArray::getString(ctx, s.name);
      auto* name_gv =
          new llvm::GlobalVariable(module, str->getType(), true, llvm::GlobalValue::PrivateLinkage,
                                   str, absl::StrCat(name, "_", kind, i, "_name"));
      descs.push_back(llvm::ConstantStruct::get(
          tensor_ty, {name_gv, llvm::ConstantInt::get(i32, static_cast<int32_t>(s.dtype)),
                      llvm::ConstantInt::get(i32, DTypeSize(s.dtype)),
                      llvm::ConstantInt::get(i32, static_cast<int32_t>(s.shape.size())), dims_gv}));
    }
    auto* arr_ty = llvm::ArrayType::get(tensor_ty, descs.size());
    return new llvm::GlobalVariable(module, arr_ty, true, llvm::GlobalValue::ExternalLinkage,
                                    llvm::ConstantArray::get(arr_ty, descs),
                                    absl::StrCat(name, "_", kind));
  };
  llvm::GlobalVariable* inputs = tensors(model.inputs, "inputs");
  llvm::GlobalVariable* outputs = tensors(model.outputs, "outputs");

  // A body's scratch sites (see cuvil_aot_scratch_site) grouped by kernel, and their count. A
  // site whose size is no monomial in the batch is left out (ScratchIsBounded says so).
  auto scratch_sites = [&](const CompiledModel& body, size_t t) {
    std::vector<ScratchSite> sites;
    for (const ScratchSite& s : body.scratch_sites) {
      if (MonomialWords(s)) sites.push_back(s);
    }
    std::stable_sort(sites.begin(), sites.end(), [](const ScratchSite& a, const ScratchSite& b) {
      return a.kernel < b.kernel;
    });
    std::vector<llvm::Constant*> entries;
    for (size_t i = 0; i < sites.size(); ++i) {
      std::vector<llvm::Constant*> words;
      for (const SymDim& d : sites[i].words) words.push_back(dim_constant(d));
      auto* words_ty = llvm::ArrayType::get(dim_ty, words.size());
      auto* words_gv = new llvm::GlobalVariable(
          module, words_ty, true, llvm::GlobalValue::PrivateLinkage,
          llvm::ConstantArray::get(words_ty, words), absl::StrCat(name, "_scratch", t, "_", i));
      entries.push_back(llvm::ConstantStruct::get(
          site_ty,
          {llvm::ConstantInt::get(i32, sites[i].kind), llvm::ConstantInt::get(i32, sites[i].kernel),
           llvm::ConstantInt::get(i32, static_cast<int32_t>(words.size())), words_gv}));
    }
    auto* arr_ty = llvm::ArrayType::get(site_ty, entries.size());
    auto* table = new llvm::GlobalVariable(module, arr_ty, true, llvm::GlobalValue::PrivateLinkage,
                                           llvm::ConstantArray::get(arr_ty, entries),
                                           absl::StrCat(name, "_scratch_sites", t));
    return std::pair<llvm::Constant*, int32_t>(table, static_cast<int32_t>(entries.size()));
  };

  auto* entry_ty = llvm::FunctionType::get(i32, {ptr, ptr, i64, ptr, ptr}, false);
  std::vector<llvm::Constant*> descs, tier_names;
  for (size_t t = 0; t < tiers.size(); ++t) {
    const CompiledModel& body = *tiers[t].model;
    const auto [sites, num_sites] = scratch_sites(body, t);
    llvm::Function* entry = llvm::Function::Create(
        entry_ty, llvm::GlobalValue::ExternalLinkage,
        several ? TierSymbol(kEntrySymbol, t) : std::string(kEntrySymbol), module);
    descs.push_back(new llvm::GlobalVariable(
        module, model_ty, true, llvm::GlobalValue::InternalLinkage,
        llvm::ConstantStruct::get(
            model_ty, {llvm::ConstantInt::get(i64, body.arena.per_batch_bytes),
                       llvm::ConstantInt::get(i64, body.arena.fixed_bytes), entry,
                       llvm::ConstantInt::get(i32, static_cast<int32_t>(body.inputs.size())),
                       llvm::ConstantInt::get(i32, static_cast<int32_t>(body.outputs.size())),
                       inputs, outputs, llvm::ConstantInt::get(i32, num_sites), sites}),
        absl::StrCat(name, "_model", t)));
    llvm::Constant* str = llvm::ConstantDataArray::getString(ctx, tiers[t].cpu);
    tier_names.push_back(new llvm::GlobalVariable(module, str->getType(), true,
                                                  llvm::GlobalValue::PrivateLinkage, str,
                                                  absl::StrCat(name, "_tier", t, "_name")));
  }
  // The body this CPU runs: the first whose min_level cuvil_aot_cpu_level() reaches.
  llvm::FunctionCallee cpu_level =
      module.getOrInsertFunction("cuvil_aot_cpu_level", llvm::FunctionType::get(i32, false));
  auto pick = [&](llvm::IRBuilder<>& b, const std::vector<llvm::Constant*>& per_tier) {
    if (!several) return static_cast<llvm::Value*>(per_tier[0]);
    llvm::Value* level = b.CreateCall(cpu_level);
    llvm::Value* chosen = per_tier.back();
    for (size_t t = tiers.size() - 1; t-- > 0;) {
      chosen =
          b.CreateSelect(b.CreateICmpSGE(level, llvm::ConstantInt::get(i32, tiers[t].min_level)),
                         per_tier[t], chosen);
    }
    return chosen;
  };

  // size_t NAME_arena_bytes(int64_t batch)
  {
    auto* rt_ty = llvm::FunctionType::get(size_ty, {ptr, i64}, false);
    llvm::FunctionCallee rt = module.getOrInsertFunction("cuvil_aot_arena_bytes", rt_ty);
    auto* fn =
        llvm::Function::Create(llvm::FunctionType::get(size_ty, {i64}, false),
                               llvm::GlobalValue::ExternalLinkage, name + "_arena_bytes", module);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
    b.CreateRet(b.CreateCall(rt, {pick(b, descs), fn->getArg(0)}));
  }
  // int NAME_run(const void* const* inputs, void* const* outputs, int64_t batch, void* arena)
  {
    auto* rt_ty = llvm::FunctionType::get(i32, {ptr, ptr, ptr, i64, ptr}, false);
    llvm::FunctionCallee rt = module.getOrInsertFunction("cuvil_aot_run", rt_ty);
    auto* run_ty = llvm::FunctionType::get(i32, {ptr, ptr, i64, ptr}, false);
    auto* fn =
        llvm::Function::Create(run_ty, llvm::GlobalValue::ExternalLinkage, name + "_run", module);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
    b.CreateRet(b.CreateCall(
        rt, {pick(b, descs), fn->getArg(0), fn->getArg(1), fn->getArg(2), fn->getArg(3)}));
  }
  // const char* NAME_tier(void)
  {
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(ptr, false),
                                      llvm::GlobalValue::ExternalLinkage, name + "_tier", module);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
    b.CreateRet(pick(b, tier_names));
  }

  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    return absl::InternalError("LLVM cannot emit the AOT glue object");
  }
  pm.run(module);
  return std::string(buffer.begin(), buffer.end());
}

}  // namespace cuvil::aot_internal
