#include "kernel_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cuvil::codegen {

int KernelRegistry::Add(llvm::Function* fn, const ir::Node& node, int parent) {
  const int index = static_cast<int>(table_.size());
  table_.push_back(fn);
  KernelFunction k{index, fn->getName().str(), node.op_type, node.name, SignatureOf(node, symbol_)};
  k.parent = parent;
  kernels_.push_back(std::move(k));
  return index;
}

void KernelRegistry::NoteScratch(int kernel, int32_t kind,
                                 std::optional<std::vector<SymDim>> words) {
  if (!words.has_value()) {
    unbounded_scratch_ = true;
    return;
  }
  scratch_sites_.push_back(ScratchSite{kernel, kind, *std::move(words)});
}

std::string SignatureOf(const ir::Node& node, const std::string& symbol) {
  auto render = [&](const std::vector<ir::Value*>& values) {
    std::vector<std::string> parts;
    for (const ir::Value* v : values) parts.push_back(v ? v->type.ToString(symbol) : "none");
    return absl::StrJoin(parts, ", ");
  };
  return absl::StrCat("(", render(node.inputs), ") -> (", render(node.outputs), ")");
}

}  // namespace cuvil::codegen
