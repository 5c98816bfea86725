// Private: a CompiledModel's description (signatures, symbols, kernels, arena plan) as the cache
// entry header holds it, for the patch sandbox's job (the one place besides the cache that passes
// a compiled model between processes).
#ifndef CUVIL_JITCACHE_SRC_MODEL_HEADER_H_
#define CUVIL_JITCACHE_SRC_MODEL_HEADER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "cuvil/compiler/compiled_model.h"
#include "jit_cache.pb.h"

namespace cuvil::jitcache_internal {

// `model`'s description: everything but its object code and weights (no key, no sections).
// Thread-safe.
::cuvil::jitcache::v1::CacheHeader ModelHeader(const CompiledModel& model);

// The model `header` describes, with `object_code` and `weights`; DataLoss naming what is
// inconsistent (sizes, indices) — the checks a cache hit gets. Thread-safe.
absl::StatusOr<CompiledModel> ModelFromHeader(const ::cuvil::jitcache::v1::CacheHeader& header,
                                              std::string_view object_code, WeightsBlob weights);

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_MODEL_HEADER_H_
