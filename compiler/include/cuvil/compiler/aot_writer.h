// Ahead-of-time libraries: a compiled model written as a static library (libNAME.a) plus a C
// header (NAME.h) that a C or C++ program links without LLVM, absl or the rest of Cuvil.
#ifndef CUVIL_COMPILER_AOT_WRITER_H_
#define CUVIL_COMPILER_AOT_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil {

struct AotOptions {
  std::string out_dir;          // created when missing
  std::string name;             // C identifier: libNAME.a, NAME.h, NAME_run, ...
  std::string runtime_archive;  // libcuvil_aot_runtime.a built for the model's target
  std::string source;           // the model's path, quoted in the header
  std::string target_triple;    // the model's CompileOptions::target_triple (empty: the host)
};

// What WriteAotLibrary wrote. Thread-compatible value type.
struct AotReport {
  std::string library_path;
  std::string header_path;
  int64_t code_bytes = 0;     // the model's machine code and its tables (every body's object)
  int64_t weights_bytes = 0;  // the weights blob(s)
  int64_t runtime_bytes = 0;  // the runtime objects copied in
  int64_t library_bytes = 0;  // the whole archive
  // Symbols the library needs from the program's C library and libm (everything else is inside).
  std::vector<std::string> external_symbols;
};

// One body of a library: the model compiled for one CPU. Plain data; `model` is not owned.
struct AotTier {
  std::string cpu;        // what NAME_tier() reports: the LLVM CPU name it was compiled for
  int32_t min_level = 0;  // x86-64 level the CPU must reach to run it (cuvil_aot_cpu_level)
  const CompiledModel* model = nullptr;
};

// The bodies of a dispatching x86-64 library, best first: x86-64-v4 (AVX-512), x86-64-v3 (AVX2 +
// FMA) and baseline x86-64, so one library runs on any x86-64 CPU at its best tier. Thread-safe.
std::vector<AotTier> AotX86Tiers();

// Writes OUT_DIR/libNAME.a (the model object, an object holding the weights, the tensor
// descriptors and NAME_run / NAME_arena_bytes, and the runtime archive's members) and
// OUT_DIR/NAME.h. Every symbol the library defines other than its NAME_* API gets the private name
// NAME__symbol, so several libraries link into one program. InvalidArgument for a name that is not
// a C identifier; Internal for LLVM failures; the files are not written on error. Thread-safe.
absl::Status WriteAotLibrary(const CompiledModel& model, const AotOptions& options,
                             AotReport* report);

// As above with several bodies of one model (the same graph compiled for different x86-64 CPUs,
// best first, the last with min_level 0 or 1): NAME_run, NAME_arena_bytes and NAME_tier use the
// first body whose min_level cuvil_aot_cpu_level() reaches. Bodies whose weights are byte-equal
// share one copy. InvalidArgument when `tiers` is empty, a model is null, the models' inputs or
// outputs differ, or a multi-body library targets anything but x86-64 ELF. Thread-safe.
absl::Status WriteAotLibrary(const std::vector<AotTier>& tiers, const AotOptions& options,
                             AotReport* report);

// An ONNX model to compile into an AOT library: its bytes when `bytes` is not empty, else the
// file at `path`. Plain data.
struct AotSource {
  std::string path;
  std::string bytes;
};

// Compiles `source` for `target` (see ConfigureAotTarget) and writes its library, the one path
// behind `cuvilc compile --aot` and Python's save_aot. For this host on x86-64 with no
// options.target_cpu the library holds one body per AotX86Tiers level (it runs on any x86-64 CPU
// at its best tier); otherwise one body, for options.target_cpu ("host": this CPU). An empty
// aot.runtime_archive becomes runtime_dir/<the target's runtime archive>. `first_body` (may be
// null) receives the first body. Errors: ConfigureAotTarget's, the compile's, WriteAotLibrary's
// (the name is checked before anything compiles). Thread-safe.
absl::Status CompileAotLibrary(const AotSource& source, CompileOptions options, AotOptions aot,
                               const std::string& target, const std::string& runtime_dir,
                               AotReport* report, CompiledModel* first_body = nullptr);

// The architecture this build of Cuvil runs on: "x86_64", "aarch64" or "unknown". Thread-safe.
const char* AotHostArch();

// Points `options` at an ahead-of-time `target`: "" or AotHostArch() compile for this host (its
// CPU and features, or options->target_cpu when set), "aarch64" for AArch64 Linux with NEON
// (generic CPU unless target_cpu is set), "wasm32" for WASI with SIMD128, "wasm32-scalar" for
// WASI without it. Returns the file name of the runtime archive built for that target
// (libcuvil_aot_runtime.a, libcuvil_aot_runtime-aarch64.a, libcuvil_aot_runtime-wasm32.a,
// libcuvil_aot_runtime-wasm32-scalar.a). InvalidArgument for an
// unknown target; Unimplemented for a known one this host cannot compile for yet. Thread-safe.
absl::StatusOr<std::string> ConfigureAotTarget(const std::string& target, CompileOptions* options);

// The text of NAME.h for `model` (the documented C API); its link line follows `target_triple`
// (empty: the host). Thread-safe.
std::string AotHeader(const CompiledModel& model, const std::string& name,
                      const std::string& source, const std::string& target_triple = "");

}  // namespace cuvil

#endif  // CUVIL_COMPILER_AOT_WRITER_H_
