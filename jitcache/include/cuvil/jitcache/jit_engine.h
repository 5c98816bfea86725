// The ORC JIT: one JITDylib (namespace) per model version, all linked to a shared runtime dylib.
#ifndef CUVIL_JITCACHE_JIT_ENGINE_H_
#define CUVIL_JITCACHE_JIT_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "cuvil/compiler/compiled_model.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

class JitEngine;

// Signature of the generated entry point (see compiled_model.h).
using EntryFn = int32_t (*)(const void* const* inputs, void* const* outputs, int64_t batch,
                            void* arena);

// Signature of cuvil_entry_table: the entry point with an explicit kernel table.
using EntryWithTableFn = int32_t (*)(const void* const* inputs, void* const* outputs, int64_t batch,
                                     void* arena, void* const* table);

// One hot patch of a version, as ListPatches reports it.
struct PatchRecord {
  uint64_t id = 0;
  int64_t unix_ms = 0;
  std::string kind;                    // "ir"
  std::vector<std::string> functions;  // Kernel symbols the patch replaces.
  std::string author;
  bool active = true;  // False once rolled back.
  int64_t rolled_back_unix_ms = 0;
  std::string source;  // The patch's LLVM IR text.
};

// A patch compiled into a version's namespace but not yet visible to executions. Dropping it
// unpublished frees its code. Thread-compatible.
class PreparedPatch;

// A compiled model version living in its own JIT namespace. Destroying it removes the namespace's
// code and frees its memory; it must outlive every execution that uses it.
// Thread-safe: Run/Execute may be called concurrently (each call uses its own arena) with each
// other and with the patch operations, which are serialised among themselves.
class LoadedModel {
 public:
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;

  const std::string& namespace_name() const { return namespace_name_; }
  const CompiledModel& model() const { return model_; }
  // The raw entry point (reads cuvil_fn_table_ptr once per call). Unguarded: code a rolled-back
  // patch leaves behind may be freed under it; use Execute while patches can be rolled back.
  EntryFn entry() const { return entry_; }
  // Address of cuvil_fn_table (one pointer per kernel, see CompiledModel::kernels): the compiled
  // kernels, which unpatched executions call (slots may be redirected in place by tools).
  void** function_table() const { return function_table_; }

  // Runs the entry point on the current kernel table inside an execution guard: the whole
  // execution uses one table, and code a rollback removes is freed only after every execution
  // that could call it has returned. Lock-free and allocation-free; returns cuvil_entry's code.
  int32_t Execute(const void* const* inputs, void* const* outputs, int64_t batch,
                  void* arena) const;

  // Compiles `ir_text` (LLVM IR defining kernels with their exact names and the kernel signature
  // `i32 (ptr, i64)`; other definitions become private to the patch) into a new layer of this
  // namespace. `functions`, when not empty, must be exactly the kernels the IR defines.
  // InvalidArgument (naming the line or function) for a syntax error, an unknown kernel, a wrong
  // signature or an invalid module; Internal when LLVM cannot compile or link it. Nothing is
  // visible to executions until CommitPatch.
  absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareIrPatch(
      const std::string& ir_text, const std::vector<std::string>& functions);
  // Like Run, but with `patch`'s kernel table (validation before a commit); null: the current one.
  absl::StatusOr<std::vector<HostTensor>> RunWith(const PreparedPatch* patch,
                                                  const std::vector<HostTensor>& inputs) const;
  // Publishes `patch` (prepared on this model against the current table): executions that start
  // afterwards use it, executions already running finish on the old table. Never waits for
  // executions. FailedPrecondition if another patch was committed or rolled back since `patch`
  // was prepared. Returns the patch id.
  absl::StatusOr<uint64_t> CommitPatch(std::shared_ptr<PreparedPatch> patch, std::string author);
  // Restores the table that was current before patch `id`, which must be the latest active patch
  // (FailedPrecondition otherwise; NotFound for an unknown id). Returns once no execution can
  // still be inside the patch's code (at most one execution's length), then frees that code.
  absl::Status Rollback(uint64_t id);
  // Every patch committed to this version, oldest first.
  std::vector<PatchRecord> Patches() const;
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
  // Waits until every execution that may have read the table published before this call has
  // returned. Called with patch_mu_ held, off the request path.
  void WaitForExecutions() const;
  absl::StatusOr<std::vector<HostTensor>> RunImpl(const PreparedPatch* patch,
                                                  const std::vector<HostTensor>& inputs) const;
  void Publish(void* const* table);

  EntryFn entry_ = nullptr;
  EntryWithTableFn entry_with_table_ = nullptr;
  void** function_table_ = nullptr;
  void*** table_ptr_ = nullptr;  // cuvil_fn_table_ptr inside the generated code.
  struct Handle;
  std::unique_ptr<Handle> handle_;  // The JITDylib and its ResourceTracker.

  // Execution guard (two-counter epochs): an execution counts itself in active_[epoch & 1];
  // WaitForExecutions flips the epoch and waits for the old parity to drain.
  mutable std::atomic<uint64_t> epoch_{0};
  mutable std::atomic<int64_t> active_[2] = {0, 0};
  std::atomic<void* const*> current_table_{nullptr};

  mutable absl::Mutex patch_mu_;
  struct Layer;
  std::vector<std::unique_ptr<Layer>> layers_ ABSL_GUARDED_BY(patch_mu_);  // Active, oldest first.
  std::vector<PatchRecord> history_ ABSL_GUARDED_BY(patch_mu_);
  uint64_t table_generation_ ABSL_GUARDED_BY(patch_mu_) = 0;
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
