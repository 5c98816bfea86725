// Code generation for Einsum: a loop nest over the output's labels around a loop nest over the
// summed labels, multiplying one element of every input. An input axis of size 1 whose label is
// wider broadcasts (stride 0); a label repeated within one input walks its diagonal.
#include <map>
#include <set>

#include "codegen/kernel_context.h"
#include "internal_attrs.h"

namespace cuvil::codegen {
namespace {

absl::Status Einsum(KernelContext& k) {
  const ir::Node& node = k.node();
  DType d = k.in_dtype(0);
  DType acc_type = IsFloat(d) ? DType::kFloat64 : d;
  auto& b = k.b();
  std::vector<std::vector<int64_t>> labels;
  std::map<int64_t, llvm::Value*> extent;
  std::vector<std::map<int64_t, llvm::Value*>> strides(k.num_inputs());
  for (size_t i = 0; i < k.num_inputs(); ++i) {
    labels.push_back(node.attr_ints(attr::EinsumLabels(i)));
    const SymShape& shape = k.in_shape(i);
    if (labels.back().size() != shape.size()) return k.Error("einsum is not canonical");
    Idx s = k.Strides(shape);
    for (size_t a = 0; a < shape.size(); ++a) {
      int64_t l = labels.back()[a];
      if (!(shape[a] == SymDim::Const(1)) || extent.count(l) == 0) extent[l] = k.Dim(shape[a]);
      llvm::Value* stride = shape[a] == SymDim::Const(1) ? k.I64(0) : s[a];
      auto [it, fresh] = strides[i].emplace(l, stride);
      if (!fresh) it->second = b.CreateAdd(it->second, stride);
    }
  }
  std::vector<int64_t> out = node.attr_ints(attr::kEinsumLabelsOut);
  std::set<int64_t> summed;
  for (const auto& [l, e] : extent) summed.insert(l);
  for (int64_t l : out) summed.erase(l);
  std::vector<int64_t> sum_labels(summed.begin(), summed.end());
  Idx out_extents, sum_extents;
  for (int64_t l : out) out_extents.push_back(extent.at(l));
  for (int64_t l : sum_labels) sum_extents.push_back(extent.at(l));
  Idx out_strides = k.Strides(k.out_shape(0));
  llvm::Value* slot = k.Scratch(k.ElemType(acc_type));
  k.ForNest(out_extents, [&](const Idx& o) {
    b.CreateStore(k.Const(acc_type, 0), slot);
    k.ForNest(sum_extents, [&](const Idx& r) {
      std::map<int64_t, llvm::Value*> at;
      for (size_t j = 0; j < out.size(); ++j) at[out[j]] = o[j];
      for (size_t j = 0; j < sum_labels.size(); ++j) at[sum_labels[j]] = r[j];
      llvm::Value* product = nullptr;
      for (size_t i = 0; i < k.num_inputs(); ++i) {
        llvm::Value* offset = k.I64(0);
        for (const auto& [l, stride] : strides[i]) {
          offset = b.CreateAdd(offset, b.CreateMul(at.at(l), stride));
        }
        llvm::Value* v = k.Convert(k.Load(d, k.in(i), offset), d, acc_type);
        product = product == nullptr ? v : k.Mul(acc_type, product, v);
      }
      llvm::Value* acc = b.CreateLoad(k.ElemType(acc_type), slot);
      b.CreateStore(k.Add(acc_type, acc, product), slot);
    });
    llvm::Value* acc = b.CreateLoad(k.ElemType(acc_type), slot);
    k.Store(d, k.out(0), k.Offset(o, out_strides), k.Convert(acc, acc_type, d));
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterEinsumKernels(OpTable& r) { r.DefineEmitter("Einsum", Einsum); }

}  // namespace cuvil::codegen
