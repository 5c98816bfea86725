#include "cuvil/runtime/abi.h"

#include <cstring>

namespace cuvil::abi {
namespace {

constexpr Function kFunctions[] = {
#define CUVIL_ABI(name, in_aot, ret, ...) \
  Function{#name, in_aot, ret, {__VA_ARGS__}, std::initializer_list<Type>{__VA_ARGS__}.size()},
#include "cuvil/runtime/abi.def"
#undef CUVIL_ABI
};

}  // namespace

const Function& Describe(Fn fn) { return kFunctions[static_cast<int>(fn)]; }

std::span<const Function> All() { return kFunctions; }

const Function* Find(std::string_view name) {
  for (const Function& f : kFunctions) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

}  // namespace cuvil::abi
