#include "cuvil/runtime/runtime_symbols.h"

#include "cuvil/runtime/abi.h"
#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/selection_ops.h"
#include "cuvil/runtime/string_ops.h"
#include "cuvil/runtime/ukernels.h"
#include "kernels.h"

namespace cuvil {
namespace {

using namespace abi;  // abi.def's type letters

// Each C declaration has the types abi.def gives it, so the callee types generated code uses
// (KernelContext::CallAbi, from the same list) are the functions' real ones.
#define CUVIL_ABI(name, in_aot, ret, ...)           \
  static_assert(Matches(&name, ret, {__VA_ARGS__}), \
                #name ": its C declaration differs from cuvil/runtime/abi.def");
#include "cuvil/runtime/abi.def"
#undef CUVIL_ABI

}  // namespace

const std::vector<RuntimeSymbol>& RuntimeSymbols() {
  static const std::vector<RuntimeSymbol> symbols = {
#define CUVIL_ABI(name, ...) RuntimeSymbol{#name, reinterpret_cast<void*>(&name)},
#include "cuvil/runtime/abi.def"
#undef CUVIL_ABI
  };
  return symbols;
}

}  // namespace cuvil
