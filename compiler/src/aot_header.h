// Private: the C header of an ahead-of-time library (one of the rooms behind aot_writer.h):
// NAME.h's text, its public structs generated from cuvil/runtime/aot_layout.def.
#ifndef CUVIL_COMPILER_SRC_AOT_HEADER_H_
#define CUVIL_COMPILER_SRC_AOT_HEADER_H_

#include <string>
#include <vector>

#include "cuvil/compiler/aot_writer.h"

namespace cuvil::aot_internal {

// NAME.h for a library of `tiers` (one or several bodies of one model): the documented C API,
// its link line for `target_triple` (empty: the host). Thread-safe.
std::string HeaderText(const std::vector<AotTier>& tiers, const std::string& name,
                       const std::string& source, const std::string& target_triple);

}  // namespace cuvil::aot_internal

#endif  // CUVIL_COMPILER_SRC_AOT_HEADER_H_
