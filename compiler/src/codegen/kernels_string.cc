// Code generation for string tensors: Cast to and from STRING and StringNormalizer call the
// runtime (cuvil/runtime/string_ops.h); strings they make go to the execution's StringHeap.
#include "kernels_string.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil::codegen {

absl::Status EmitStringCast(KernelContext& k) {
  auto& b = k.b();
  const DType from = k.in_dtype(0), to = k.out_dtype(0);
  llvm::Value* n = k.NumElements(k.out_shape(0));
  if (from == DType::kString && to == DType::kString) {
    k.Memcpy(k.out(0), k.in(0), n, DType::kString);
    return absl::OkStatus();
  }
  if (from == DType::kString) {
    llvm::Value* bad = k.CallAbi(abi::Fn::cuvil_rt_parse_strings,
                                 {k.in(0), n, b.getInt32(static_cast<int32_t>(to)), k.out(0)});
    k.FailIf(b.CreateICmpNE(bad, k.I64(0)), kEntryStringNotANumber);
    return absl::OkStatus();
  }
  llvm::Value* heap = k.StringHeap();
  if (heap == nullptr) return k.Unsupported("making strings inside a subgraph");
  llvm::Value* rc = k.CallAbi(abi::Fn::cuvil_rt_format_strings,
                              {k.in(0), b.getInt32(static_cast<int32_t>(from)), n, k.out(0), heap});
  k.FailIf(b.CreateICmpNE(rc, b.getInt32(0)), kEntryNoStringHeap);
  return absl::OkStatus();
}

namespace {

// A private constant array of CuvilString views of `words` (each a private byte array).
llvm::Value* StringArrayConstant(KernelContext& k, const std::vector<std::string>& words) {
  llvm::LLVMContext& c = k.llvm_context();
  auto* view_ty = llvm::StructType::get(c, {k.b().getPtrTy(), k.I64Ty()});
  std::vector<llvm::Constant*> views;
  for (size_t i = 0; i < words.size(); ++i) {
    auto* bytes = llvm::ConstantDataArray::getString(c, words[i], /*AddNull=*/false);
    auto* global = new llvm::GlobalVariable(
        k.module(), bytes->getType(), /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage, bytes,
        absl::StrCat(k.function()->getName().str(), ".word", i));
    views.push_back(llvm::ConstantStruct::get(
        view_ty, {global, llvm::ConstantInt::get(k.I64Ty(), words[i].size())}));
  }
  auto* array_ty = llvm::ArrayType::get(view_ty, views.size());
  return new llvm::GlobalVariable(
      k.module(), array_ty, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
      llvm::ConstantArray::get(array_ty, views), k.function()->getName() + ".stopwords");
}

absl::Status StringNormalizer(KernelContext& k) {
  auto& b = k.b();
  const ir::Node& n = k.node();
  std::optional<int32_t> id = k.out_shape(0).back().expr().AsSymbol();
  if (!id || *id == 0) return k.Error("its output size is not a data-dependent symbol");
  const std::string action = n.attr_string("case_change_action", "NONE");
  const int32_t case_change = action == "LOWER" ? 1 : action == "UPPER" ? 2 : 0;
  std::vector<std::string> stopwords;
  if (auto it = n.attrs.find("stopwords"); it != n.attrs.end()) {
    stopwords = std::get<std::vector<std::string>>(it->second);
  }
  llvm::Value* heap = k.StringHeap();
  if (heap == nullptr) return k.Unsupported("StringNormalizer inside a subgraph");
  llvm::Value* words = stopwords.empty() ? llvm::ConstantPointerNull::get(b.getPtrTy())
                                         : StringArrayConstant(k, stopwords);
  llvm::Value* kept = k.CallAbi(abi::Fn::cuvil_rt_normalize_strings,
                                {k.in(0), k.NumElements(k.in_shape(0)), b.getInt32(case_change),
                                 b.getInt32(n.attr_int("is_case_sensitive", 0) != 0 ? 1 : 0), words,
                                 k.I64(static_cast<int64_t>(stopwords.size())), k.out(0), heap});
  k.FailIf(b.CreateICmpSLT(kept, k.I64(0)), kEntryNoStringHeap);
  k.StoreSymbol(*id, b.CreateSelect(b.CreateICmpSLT(kept, k.I64(0)), k.I64(0), kept));
  return absl::OkStatus();
}

}  // namespace

void RegisterStringKernels(OpTable& r) { r.DefineEmitter("StringNormalizer", StringNormalizer); }

}  // namespace cuvil::codegen
