// The C ABI that generated code calls (declared in abi.def): helper functions exported into the
// JIT's shared runtime namespace. Generated code may also call libm directly (resolved from the
// host process).
#ifndef CUVIL_RUNTIME_RUNTIME_SYMBOLS_H_
#define CUVIL_RUNTIME_RUNTIME_SYMBOLS_H_

#include <vector>

namespace cuvil {

struct RuntimeSymbol {
  const char* name;
  void* address;
};

// Every function of cuvil/runtime/abi.def with its address, for registration in the runtime
// JITDylib.
const std::vector<RuntimeSymbol>& RuntimeSymbols();

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_RUNTIME_SYMBOLS_H_
