// The serialized form of a CompiledModel (format/proto/compiled_model.proto): its description
// (everything but the object code and the weights, which each container stores in its own way)
// with one encoder and one decoder. JIT cache entries, snapshots and the patch sandbox's job all
// hold a model this way; the loader (cuvil_jit_loader) reads it without the compiler.
#ifndef CUVIL_FORMAT_MODEL_HEADER_H_
#define CUVIL_FORMAT_MODEL_HEADER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "compiled_model.pb.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil {

// `model`'s description: everything but its object code and weights. Thread-safe.
::cuvil::jitcache::v1::CompiledModelHeader EncodeModelHeader(const CompiledModel& model);

// The model `header` describes, with `object_code` (copied) and `weights`; DataLoss naming what is
// inconsistent (dtypes, dim programs, sizes, indices): `header` is untrusted bytes. Thread-safe.
absl::StatusOr<CompiledModel> DecodeModelHeader(
    const ::cuvil::jitcache::v1::CompiledModelHeader& header, std::string_view object_code,
    WeightsBlob weights);

}  // namespace cuvil

#endif  // CUVIL_FORMAT_MODEL_HEADER_H_
