// The ORC JIT: one JITDylib (namespace) per model version, all linked to a shared runtime dylib.
#ifndef CUVIL_JITCACHE_JIT_ENGINE_H_
#define CUVIL_JITCACHE_JIT_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/jitcache/patch_controller.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

class JitEngine;
namespace jitcache_internal {
struct BatchSplitPlan;
class SandboxChild;
}  // namespace jitcache_internal

// Signature of the generated entry point (see compiled_model.h).
using EntryFn = int32_t (*)(const void* const* inputs, void* const* outputs, int64_t batch,
                            void* arena, int64_t* syms);

// Signature of cuvil_entry_table: the entry point with an explicit kernel table.
using EntryWithTableFn = int32_t (*)(const void* const* inputs, void* const* outputs, int64_t batch,
                                     void* arena, void* const* table, int64_t* syms);

// Where a version's code came from (its ONNX source and compile options), kept for recompile
// patches, reloads and snapshots. Defined by the compile service (cuvil/jitcache/code_source.h):
// the loader only holds it for its owner, so it needs no compiler header.
struct CodeSource;

// A compiled model version living in its own JIT namespace: its code, weights, the kernel table
// executions use and the guard that keeps code alive while executions may run it. Its hot
// patches are managed by the PatchController it owns (patches()), which alone changes the table.
// Destroying it removes the namespace's code and frees its memory; it must outlive every
// execution that uses it.
//
// Thread-safety: thread-safe. Run/Execute/RunWith and the shape helpers may be called
// concurrently from any thread (each call uses its own arena), with each other and with the patch
// operations; they take no lock (the execution guard is two atomic counters and the table one
// atomic pointer). set_source is called once before serving. The private execution
// interface the controller drives (Publish, WaitForExecutions) is described in
// jitcache/src/patch_target.h.
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

  // The version's hot patches (layers, validation tables, history, rollback, profiles).
  PatchController& patches() { return *patches_; }
  const PatchController& patches() const { return *patches_; }

  // Runs the entry point on the current kernel table inside an execution guard: the whole
  // execution uses one table, and code a rollback removes is freed only after every execution
  // that could call it has returned. A batch-separable model's batch is split into parts run on
  // the calling thread's intra-op threads (see model().arena.max_shards); `arena` holds
  // model().arena.CheckedBytesForSymbols(syms) bytes. `syms` holds the value of every symbol
  // (syms[0] == batch; see ResolveSymbols) and may be null for a model whose only symbol is the
  // batch; the run writes the data-dependent ones (model().data_dependent_dims), and the outputs
  // then have the dims OutputShapesAfterRun gives. Lock-free and allocation-free (for models with
  // at most 8 inputs and 8 outputs); returns cuvil_entry's code (the first failing part's).
  int32_t Execute(const void* const* inputs, void* const* outputs, int64_t batch, void* arena,
                  int64_t* syms = nullptr) const;

  // Like Run, but with `patch`'s kernel table (validation before a commit; a prepared patch or a
  // PatchController::RollbackTrial table); null: the current one. Runs inside the execution guard
  // like Execute, so no rollback frees code under it; Aborted when the version was patched or
  // rolled back since `patch` was prepared (its table may name code that is gone: prepare it
  // again).
  absl::StatusOr<std::vector<HostTensor>> RunWith(const PreparedPatch* patch,
                                                  const std::vector<HostTensor>& inputs) const;
  // Executions running now (requests and validation runs).
  int64_t running_executions() const;
  // Start of the weights executions read (weights_bytes() long, zero-padded).
  const void* weights_data() const;
  // Where the code came from (see CodeSource); set once by whoever compiled or restored it,
  // before serving. source() is null when unknown.
  void set_source(std::shared_ptr<const CodeSource> source) { source_ = std::move(source); }
  const CodeSource* source() const { return source_.get(); }
  // Bytes of the read-only weights (our copy, or the cache entry's mapping used in place).
  size_t weights_bytes() const { return weights_mapped_bytes_; }

  // Resolves the batch size from `input_shapes`; InvalidArgument naming the tensor on mismatch.
  // For a model with several symbols, the batch of ResolveSymbols.
  absl::StatusOr<int64_t> ResolveBatch(absl::Span<const std::vector<int64_t>> input_shapes) const;

  // Every symbol's value (model().symbols order, at least one element: the batch, 1 for a
  // static model) from `input_shapes`, with every input shape checked against them, the model's
  // dim constraints (CompiledModel::dim_constraints) holding, and the arena and every output
  // sizable (so EvalShape of an output succeeds). A data-dependent symbol holds its upper bound
  // (the run overwrites it). A model that makes strings gets one more entry, 0, at
  // model().StringHeapSlot(), where the caller stores its StringHeap's address (string_ops.h).
  // InvalidArgument naming the tensor and dim.
  absl::StatusOr<std::vector<int64_t>> ResolveSymbols(
      absl::Span<const std::vector<int64_t>> input_shapes) const;

  // Each output's shape once a run with `syms` (from ResolveSymbols, written by the run) has
  // returned: what ResolveSymbols sized them for, except along data-dependent dims, which the run
  // set (an output then holds that many elements, at the start of its buffer).
  std::vector<std::vector<int64_t>> OutputShapesAfterRun(absl::Span<const int64_t> syms) const;

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
  // The jitcache_internal::PatchTarget its PatchController drives (defined in jit_engine.cc):
  // the controller reaches the version only through it.
  class PatchTargetImpl;
  explicit LoadedModel(JitEngine* engine);

  JitEngine* engine_ = nullptr;
  std::string namespace_name_;
  CompiledModel model_;
  void* weights_ = nullptr;  // Our read-only copy of the weights; null when used in place.
  size_t weights_mapped_bytes_ = 0;
  // Waits until every execution that may have read the table published before this call has
  // returned, or `seconds` pass (false then). One waiter at a time (the epoch's two parities
  // serve one): its only caller is the PatchController, under its rollback lock.
  bool WaitForExecutions(double seconds) const;
  // Counts an execution in the current epoch (see Execute); returns the parity to leave with.
  uint64_t EnterExecution() const;
  void LeaveExecution(uint64_t parity) const;
  // The buffers of one run of `inputs` (outputs, arena, symbols), checked against the signature.
  struct RunState;
  absl::StatusOr<std::unique_ptr<RunState>> PrepareRun(const std::vector<HostTensor>& inputs) const;
  absl::StatusOr<std::vector<HostTensor>> RunImpl(const PreparedPatch* patch,
                                                  const std::vector<HostTensor>& inputs) const;
  // Makes `table` (table generation `generation`) the one executions that start from now use.
  void Publish(void* const* table, uint64_t generation);

  EntryFn entry_ = nullptr;
  EntryWithTableFn entry_with_table_ = nullptr;
  std::unique_ptr<const jitcache_internal::BatchSplitPlan> split_;  // Set by Load.
  void** function_table_ = nullptr;
  void*** table_ptr_ = nullptr;  // cuvil_fn_table_ptr inside the generated code.
  struct Handle;
  std::unique_ptr<Handle> handle_;  // The JITDylib and its ResourceTracker.

  // Execution guard (two-counter epochs): an execution counts itself in active_[epoch & 1];
  // WaitForExecutions flips the epoch and waits for the old parity to drain.
  mutable std::atomic<uint64_t> epoch_{0};
  mutable std::atomic<int64_t> active_[2] = {0, 0};
  std::atomic<void* const*> current_table_{nullptr};

  // Generation of the published table (the controller's table generation as of the last
  // publish), readable without its lock: validation runs compare it inside the guard.
  std::atomic<uint64_t> published_generation_{0};
  std::shared_ptr<const CodeSource> source_;  // Set once before serving.

  // Declared last, destroyed first: the controller's layers go before the namespace's handle.
  std::unique_ptr<PatchTargetImpl> patch_target_;
  std::unique_ptr<PatchController> patches_;
};

// Thread-safe.
class JitEngine {
 public:
  // Creates the LLJIT instance and the shared runtime namespace.
  static absl::StatusOr<std::unique_ptr<JitEngine>> Create();
  ~JitEngine();

  // Links `model` into a new namespace called `namespace_name` ("<model>/<version>").
  // AlreadyExists if the namespace is live. Read-only weights (a JIT cache entry's mapping) are
  // used in place and kept alive by the version; others are copied to read-only memory.
  absl::StatusOr<std::unique_ptr<LoadedModel>> Load(const std::string& namespace_name,
                                                    CompiledModel model);

  // Names of live namespaces.
  std::vector<std::string> Namespaces() const;

 private:
  friend class LoadedModel;
  friend class jitcache_internal::SandboxChild;  // Numbers its layers apart from the server's.
  JitEngine();
  // Patch ids (and the layer symbols that embed them) continue from `next`.
  void StartPatchIdsAt(uint64_t next);
  void Unload(LoadedModel* model);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_JIT_ENGINE_H_
