#include "cuvil/runtime/runtime_symbols.h"

#include <cstdlib>
#include <cstring>

#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"
#include "kernels.h"

extern "C" {

void* cuvil_rt_alloc(int64_t bytes) {
  size_t rounded = (static_cast<size_t>(bytes > 0 ? bytes : 1) + 63) / 64 * 64;
  return std::aligned_alloc(64, rounded);
}

void cuvil_rt_free(void* p) { std::free(p); }

}  // extern "C"

namespace cuvil {

#define CUVIL_RT_SYMBOL(fn) \
  RuntimeSymbol { #fn, reinterpret_cast<void*>(&fn) }

const std::vector<RuntimeSymbol>& RuntimeSymbols() {
  static const std::vector<RuntimeSymbol> symbols = {
      // clang-format off
      CUVIL_RT_SYMBOL(cuvil_rt_alloc),
      CUVIL_RT_SYMBOL(cuvil_rt_free),
      CUVIL_RT_SYMBOL(cuvil_rt_parallel_for),
      CUVIL_RT_SYMBOL(cuvil_uk_conv2d),
      CUVIL_RT_SYMBOL(cuvil_uk_maxpool2d),
      // clang-format on
  };
  return symbols;
}

}  // namespace cuvil
