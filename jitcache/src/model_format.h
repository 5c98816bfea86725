// Private: the one format of a compiled model (jitcache/proto/compiled_model.proto), used by JIT
// cache entries (cache_entry.cc), snapshots (snapshot.cc) and the patch sandbox's job: the model's
// description with one encoder and one decoder, the one identity check that decides whether
// stored object code may be loaded, and CompileOptions serialized once (the cache key hashes it).
#ifndef CUVIL_JITCACHE_SRC_MODEL_FORMAT_H_
#define CUVIL_JITCACHE_SRC_MODEL_FORMAT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "compiled_model.pb.h"
#include "cuvil/compiler/compiled_model.h"
#include "cuvil/compiler/compiler.h"

namespace cuvil::jitcache_internal {

// `model`'s description: everything but its object code and weights. Thread-safe.
::cuvil::jitcache::v1::CompiledModelHeader EncodeModelHeader(const CompiledModel& model);

// The model `header` describes, with `object_code` (copied) and `weights`; DataLoss naming what is
// inconsistent (dtypes, dim programs, sizes, indices): `header` is untrusted bytes. Thread-safe.
absl::StatusOr<CompiledModel> DecodeModelHeader(
    const ::cuvil::jitcache::v1::CompiledModelHeader& header, std::string_view object_code,
    WeightsBlob weights);

// What generates code in this process: the compiler build, runtime ABI and LLVM versions with
// the code generator's target choices (CodeIdentity), the target triple, CPU and CPU features.
// Thread-safe.
::cuvil::jitcache::v1::ModelIdentity ThisBuildIdentity();

// Empty when object code generated under `written` may be loaded in this process (every field
// equals ThisBuildIdentity's); else why not, as "written by another build (...)", "written for
// TRIPLE CPU" or "written for other CPU features". Cache entries and snapshots both decide with
// it. Thread-safe.
std::string IdentityMismatch(const ::cuvil::jitcache::v1::ModelIdentity& written);

// Every field of `options` that changes the generated code, in a canonical form (maps in key
// order). The fields that do not (debug outputs, out-parameters) are named in the function,
// which destructures CompileOptions and ImportOptions: a field added to either does not compile
// until it is serialized here or listed as ignored. Thread-safe.
::cuvil::jitcache::v1::CompileOptionsRecord CompileOptionsRecordOf(const CompileOptions& options);

// CompileOptionsRecordOf(options) serialized: equal for options that compile to the same code
// in one build (what the cache key hashes). Thread-safe.
std::string SerializedCompileOptions(const CompileOptions& options);

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_MODEL_FORMAT_H_
