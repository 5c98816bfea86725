// Private: the compile service's half of the compiled-model format (format/proto/
// compiled_model.proto; the model's description, its encoder and decoder are in the format
// library, cuvil/format/model_header.h): the one identity check that decides whether stored
// object code may be loaded, used by JIT cache entries (cache_entry.cc) and snapshots
// (snapshot.cc), and CompileOptions serialized once (the cache key hashes it). Both name the
// compiler, so they stay out of the loader.
#ifndef CUVIL_JITCACHE_SRC_MODEL_FORMAT_H_
#define CUVIL_JITCACHE_SRC_MODEL_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "compiled_model.pb.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/format/model_header.h"

namespace cuvil::jitcache_internal {

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
