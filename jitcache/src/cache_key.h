// Private: the JIT cache key — XXH3-128 over the build identity (compiler build, runtime ABI,
// LLVM, the code generator's target choices, the host's triple, CPU and features: ModelIdentity),
// the entry format version, the serialized CompileOptions (model_format.h), and the model: its
// bytes, or its file's content digest (remembered by the file's identity in the digest memo) and
// size, plus the contents of every external data file it refers to.
#ifndef CUVIL_JITCACHE_SRC_CACHE_KEY_H_
#define CUVIL_JITCACHE_SRC_CACHE_KEY_H_

#include <string>

#include "absl/status/statusor.h"
#include "cuvil/compiler/compiler.h"
#include "digest_memo.h"

namespace cuvil::jitcache_internal {

// The key (32 hex digits) of compiling the model at `path` (when `bytes` is empty) or held in
// `bytes` with `options`; see ObjectCache::Key for the errors. `memo` (may be null) remembers
// model file digests. Thread-safe.
absl::StatusOr<std::string> CacheKeyOf(const std::string& path, const std::string& bytes,
                                       const CompileOptions& options, const DigestMemo* memo);

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_CACHE_KEY_H_
