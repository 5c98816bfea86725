// Private: input shapes a compiled model accepts, for the requests the server makes up itself
// (the default warm-up, patch validation sets).
#ifndef CUVIL_SERVER_SRC_ACCEPTED_SHAPES_H_
#define CUVIL_SERVER_SRC_ACCEPTED_SHAPES_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "cuvil/jitcache/jit_engine.h"

namespace cuvil {

// Symbol values at which `loaded` runs: symbol 0 at `batch` when it is the leading (batch) dim of
// an input, and every other symbol bound from the inputs — and symbol 0 too when it is not a
// batch (an image model exported at batch 1, whose first free dim is its height) — at the first
// of `sizes` whose input shapes the model accepts (LoadedModel::ResolveSymbols: its dim
// constraints hold and its scratch is addressable). nullopt when none of `sizes` fits.
std::optional<std::vector<int64_t>> AcceptedSymbols(const LoadedModel& loaded, int64_t batch,
                                                    std::initializer_list<int64_t> sizes);

// The model's input shapes at `syms` (nullopt when a shape does not evaluate).
std::optional<std::vector<std::vector<int64_t>>> InputShapesAt(const CompiledModel& model,
                                                               const std::vector<int64_t>& syms);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_ACCEPTED_SHAPES_H_
