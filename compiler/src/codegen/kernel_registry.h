// Private: the patchable kernels of one module, in function-table slot order.
#ifndef CUVIL_COMPILER_SRC_CODEGEN_KERNEL_REGISTRY_H_
#define CUVIL_COMPILER_SRC_CODEGEN_KERNEL_REGISTRY_H_

#include <optional>
#include <string>
#include <vector>

#include "cuvil/compiler/ir.h"
#include "cuvil/format/compiled_model.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Function.h"

namespace cuvil::codegen {

// Every kernel an execution calls through the function table: the graph's nodes and the nodes of
// the subgraphs of its control-flow ops (If, Loop, Scan), each in a slot of its own, so a hot
// patch can replace any of them and one execution uses one table throughout. A control-flow
// kernel's subgraph kernels take the slots right after it. Not thread-safe: one module is built
// at a time.
class KernelRegistry {
 public:
  // `symbol`: the graph's symbolic dimension, named in signatures.
  explicit KernelRegistry(std::string symbol) : symbol_(std::move(symbol)) {}

  // Gives `fn`, the kernel of `node`, the next slot and returns its index. `parent` is the slot of
  // the control-flow kernel whose subgraph holds `node`, or -1 for a node of the graph itself.
  int Add(llvm::Function* fn, const ir::Node& node, int parent);

  // The function table's initial entries, one per slot.
  const std::vector<llvm::Constant*>& table() const { return table_; }
  // What CompiledModel::kernels lists, one per slot.
  std::vector<KernelFunction>& kernels() { return kernels_; }

  // Records scratch the kernel in slot `kernel` takes outside the arena plan (see ScratchSite);
  // `words` is nullopt when no shape bounds it.
  void NoteScratch(int kernel, int32_t kind, std::optional<std::vector<SymDim>> words);
  // What CompiledModel::scratch_sites and unbounded_scratch hold.
  std::vector<ScratchSite>& scratch_sites() { return scratch_sites_; }
  bool unbounded_scratch() const { return unbounded_scratch_; }

 private:
  std::string symbol_;
  std::vector<llvm::Constant*> table_;
  std::vector<KernelFunction> kernels_;
  std::vector<ScratchSite> scratch_sites_;
  bool unbounded_scratch_ = false;
};

// "(float32[batch,784], float32[512,784]) -> (float32[batch,512])" for `node`, dims named after
// `symbol`. Thread-safe.
std::string SignatureOf(const ir::Node& node, const std::string& symbol);

}  // namespace cuvil::codegen

#endif  // CUVIL_COMPILER_SRC_CODEGEN_KERNEL_REGISTRY_H_
