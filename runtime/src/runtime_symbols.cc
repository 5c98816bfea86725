#include "cuvil/runtime/runtime_symbols.h"

#include <cstdlib>
#include <cstring>

#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/selection_ops.h"
#include "cuvil/runtime/string_ops.h"
#include "cuvil/runtime/ukernels.h"
#include "kernels.h"

namespace cuvil {

#define CUVIL_RT_SYMBOL(fn) \
  RuntimeSymbol { #fn, reinterpret_cast<void*>(&fn) }

const std::vector<RuntimeSymbol>& RuntimeSymbols() {
  static const std::vector<RuntimeSymbol> symbols = {
      // clang-format off
      CUVIL_RT_SYMBOL(cuvil_rt_alloc),
      CUVIL_RT_SYMBOL(cuvil_rt_format_strings),
      CUVIL_RT_SYMBOL(cuvil_rt_free),
      CUVIL_RT_SYMBOL(cuvil_rt_nms),
      CUVIL_RT_SYMBOL(cuvil_rt_normalize_strings),
      CUVIL_RT_SYMBOL(cuvil_rt_parallel_for),
      CUVIL_RT_SYMBOL(cuvil_rt_parse_strings),
      CUVIL_RT_SYMBOL(cuvil_rt_unique),
      CUVIL_RT_SYMBOL(cuvil_uk_conv2d),
      CUVIL_RT_SYMBOL(cuvil_uk_matmul_nbits),
      CUVIL_RT_SYMBOL(cuvil_uk_maxpool2d),
      CUVIL_RT_SYMBOL(cuvil_uk_qconv2d),
      CUVIL_RT_SYMBOL(cuvil_uk_qmatmul),
      CUVIL_RT_SYMBOL(cuvil_uk_qdepthwise2d),
      // clang-format on
  };
  return symbols;
}

}  // namespace cuvil
