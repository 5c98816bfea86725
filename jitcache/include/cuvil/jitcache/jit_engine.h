// The ORC JIT: one JITDylib (namespace) per model version, all linked to a shared runtime dylib.
#ifndef CUVIL_JITCACHE_JIT_ENGINE_H_
#define CUVIL_JITCACHE_JIT_ENGINE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuvil/compiler/compiled_model.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

class JitEngine;

// Signature of the generated entry point (see compiled_model.h).
using EntryFn = int32_t (*)(const void* const* inputs, void* const* outputs, int64_t batch,
                            void* arena);

// A compiled model version living in its own JIT namespace. Destroying it removes the namespace's
// code and frees its memory; it must outlive every execution that uses it.
// Thread-safe: Run may be called concurrently (each call uses its own arena).
class LoadedModel {
 public:
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

  const std::string& namespace_name() const { return namespace_name_; }
  const CompiledModel& model() const { return model_; }
  EntryFn entry() const { return entry_; }
  // Address of cuvil_fn_table (one pointer per kernel, see CompiledModel::kernels).
  void** function_table() const { return function_table_; }
  // Bytes of the read-only weights mapping.
  size_t weights_bytes() const { return weights_mapped_bytes_; }

  // Resolves the batch size from `input_shapes`; InvalidArgument naming the tensor on mismatch.
  absl::StatusOr<int64_t> ResolveBatch(const std::vector<std::vector<int64_t>>& input_shapes) const;

  // Checks that `input_shapes` (signature order) are exactly the shapes the compiled code reads at
  // `batch`. The last check before generated code touches caller buffers; allocation-free when
  // the shapes match. InvalidArgument naming the input otherwise.
  absl::Status CheckInputShapes(absl::Span<const std::vector<int64_t>> input_shapes,
                                int64_t batch) const;

  // Validates inputs against the signature, runs the entry point with a fresh arena and returns
  // the outputs. InvalidArgument for wrong names, dtypes or shapes (checked in signature order).
  absl::StatusOr<std::vector<HostTensor>> Run(const std::vector<HostTensor>& inputs) const;

 private:
  friend class JitEngine;
  LoadedModel() = default;

  JitEngine* engine_ = nullptr;
  std::string namespace_name_;
  CompiledModel model_;
  void* weights_ = nullptr;  // mmap-ed, read-only after load.
  size_t weights_mapped_bytes_ = 0;
  EntryFn entry_ = nullptr;
  void** function_table_ = nullptr;
  struct Handle;
  std::unique_ptr<Handle> handle_;  // The JITDylib and its ResourceTracker.
};

// Thread-safe.
class JitEngine {
 public:
  // Creates the LLJIT instance and the shared runtime namespace.
  static absl::StatusOr<std::unique_ptr<JitEngine>> Create();
  ~JitEngine();

  // Links `model` into a new namespace called `namespace_name` ("<model>/<version>").
  // AlreadyExists if the namespace is live; the model's weights are copied to read-only memory.
  absl::StatusOr<std::unique_ptr<LoadedModel>> Load(const std::string& namespace_name,
                                                    CompiledModel model);

  // Names of live namespaces.
  std::vector<std::string> Namespaces() const;

 private:
  friend class LoadedModel;
  JitEngine();
  void Unload(LoadedModel* model);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_JIT_ENGINE_H_
