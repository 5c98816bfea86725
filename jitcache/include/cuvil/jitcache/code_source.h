// Where a loaded version's code came from: the compile service records it on the version
// (LoadedModel::set_source) for recompile patches, reloads and snapshots. The loader only keeps
// it (it holds compile options, so it is defined here, above the compiler, not in jit_engine.h).
#ifndef CUVIL_JITCACHE_CODE_SOURCE_H_
#define CUVIL_JITCACHE_CODE_SOURCE_H_

#include <string>

#include "cuvil/compiler/compiler.h"

namespace cuvil {

// Thread-compatible value type.
struct CodeSource {
  std::string onnx_path;   // Read when onnx_bytes is empty.
  std::string onnx_bytes;  // Inline models.
  CompileOptions options;  // What the version was compiled with (emit/needs fields unused).
};

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_CODE_SOURCE_H_
