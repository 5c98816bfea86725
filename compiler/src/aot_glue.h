// Private: the glue object of an ahead-of-time library (one of the rooms behind aot_writer.h):
// an LLVM module holding the weights, the tensor descriptors, one cuvil_aot_model per body (its
// struct types from cuvil/runtime/aot_layout.def) and the NAME_* API functions, compiled for the
// library's target.
#ifndef CUVIL_COMPILER_SRC_AOT_GLUE_H_
#define CUVIL_COMPILER_SRC_AOT_GLUE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/compiler/aot_writer.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil::aot_internal {

// Whether every word of `s` is a constant or a monomial in the batch (what the library evaluates).
bool MonomialWords(const ScratchSite& s);

// Whether NAME_run of `model` takes all its scratch from the arena: no site is unbounded or left
// out of the library's table.
bool ScratchIsBounded(const CompiledModel& model);

// The glue object: the weights (as cuvil_weights; with several bodies one cuvil_weights__t<i> per
// distinct blob, i its first body), the tensor descriptors, one constant cuvil_aot_model per body
// (layout: runtime/aot/aot_abi.h) and the API functions that forward to the runtime's
// cuvil_aot_run / cuvil_aot_arena_bytes with the body cuvil_aot_cpu_level() selects.
// weights_owner[i] is the first body whose weights equal body i's.
absl::StatusOr<std::string> EmitGlue(const std::vector<AotTier>& tiers,
                                     const std::vector<size_t>& weights_owner,
                                     const std::string& name, const std::string& target_triple);

}  // namespace cuvil::aot_internal

#endif  // CUVIL_COMPILER_SRC_AOT_GLUE_H_
