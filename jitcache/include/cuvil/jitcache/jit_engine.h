// The ORC JIT: one JITDylib (namespace) per model version, all linked to a shared runtime dylib.
#ifndef CUVIL_JITCACHE_JIT_ENGINE_H_
#define CUVIL_JITCACHE_JIT_ENGINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "cuvil/compiler/compiled_model.h"
#include "cuvil/compiler/compiler.h"
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

// Patch kinds (PatchRecord::kind).
inline constexpr char kPatchKindIr[] = "ir";
inline constexpr char kPatchKindRecompile[] = "recompile";
inline constexpr char kPatchKindProfile[] = "profile";

// One kernel's share of a profiling window.
struct KernelProfile {
  std::string function;
  uint64_t calls = 0;
  uint64_t total_ns = 0;
  double mean_ns = 0;
  double share = 0;  // total_ns / the sum over every kernel (0..1).
};

// How a patch was checked before its commit (PatchRecord::check).
struct PatchCheck {
  // True when validation compared the patched outputs with the table beneath the patch and they
  // agreed within the tolerance below; false when it was forced, not validated, or is unknown.
  bool validated = false;
  bool exact = false;  // Bit equality was required.
  double rtol = 0;
  double atol = 0;
};

// One hot patch of a version, as ListPatches reports it.
struct PatchRecord {
  uint64_t id = 0;
  int64_t unix_ms = 0;
  std::string kind;                    // kPatchKind*.
  std::vector<std::string> functions;  // Kernel symbols the patch replaces.
  std::string author;
  bool active = true;  // False once rolled back.
  int64_t rolled_back_unix_ms = 0;
  // ir: the LLVM IR text; recompile: the options ("opt_level=1"); profile: "seconds=N".
  std::string source;
  // Profile patches: the per-kernel table (live while active, final once rolled back).
  std::vector<KernelProfile> profile;
  PatchCheck check;  // What CommitPatch was told (kept through reloads and snapshots).
};

// Options of a recompile patch: what CompileOptions exposes that leaves the kernel set, the
// weights layout and the signatures unchanged.
struct RecompileOptions {
  int opt_level = 3;  // LLVM optimisation level 0..3.
};

// "opt_level=N"; ParseRecompileOptions reads it back (InvalidArgument naming an unknown key or a
// bad value; comma-separated key=value).
std::string RecompileOptionsText(const RecompileOptions& options);
absl::StatusOr<RecompileOptions> ParseRecompileOptions(const std::string& text);

// Where a version's code came from, kept for recompile patches and snapshots (set by the loader;
// empty when unknown). Thread-compatible value type.
struct CodeSource {
  std::string onnx_path;   // Read when onnx_bytes is empty.
  std::string onnx_bytes;  // Inline models.
  CompileOptions options;  // What the version was compiled with (emit/needs fields unused).
};

// A patch compiled into a version's namespace but not yet visible to executions. Dropping it
// unpublished frees its code. Thread-compatible.
class PreparedPatch;

// Limits of the sandbox child that compiles and first runs an IR patch (patch_sandbox.h).
struct PatchSandboxLimits {
  double timeout_seconds = 10;  // Compile plus first run; the child is killed after it.
  bool enabled = true;          // False: compile in-process (tests of the engine itself only).
};

// Checks patch IR before anything compiles it: no module-level or inline asm, no call through a
// constant address, and every external function it declares is a Cuvil runtime ABI symbol, a
// libm/libc math or memory function on the allow-list, or an LLVM intrinsic; no external global
// variables. InvalidArgument naming the first refused construct. Thread-safe.
absl::Status CheckPatchIr(const std::string& ir_text);

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
  // that could call it has returned. A batch-separable model's batch is split into parts run on
  // the calling thread's intra-op threads (see model().arena.max_shards); `arena` holds
  // model().arena.CheckedBytesForSymbols(syms) bytes. `syms` holds the value of every symbol
  // (syms[0] == batch; see ResolveSymbols) and may be null for a model whose only symbol is the
  // batch; the run writes the data-dependent ones (model().data_dependent_dims), and the outputs
  // then have the dims OutputShapesAfterRun gives. Lock-free and allocation-free (for models with
  // at most 8 inputs and 8 outputs); returns cuvil_entry's code (the first failing part's).
  int32_t Execute(const void* const* inputs, void* const* outputs, int64_t batch, void* arena,
                  int64_t* syms = nullptr) const;

  // Compiles `ir_text` (LLVM IR defining kernels with their exact names and the kernel signature
  // `i32 (ptr, i64)`; other definitions become private to the patch) into a new layer of this
  // namespace. `functions`, when not empty, must be exactly the kernels the IR defines.
  // The IR is checked before anything compiles it (CheckPatchIr: no inline or module asm, calls
  // only to the Cuvil runtime ABI, libm and LLVM intrinsics, no other external symbols); then a
  // sandbox child process (patch_sandbox.h) compiles it and runs it once on `probe_inputs` (when
  // not empty; the model's signature order) with `sandbox` limits: a crash, an LLVM fatal error
  // or a timeout there refuses the patch (FailedPrecondition naming the reason) and only the
  // object code the child produced is linked here. InvalidArgument (naming the line or function)
  // for a syntax error, an unknown kernel, a wrong signature, a refused construct or an invalid
  // module; Aborted when the version was patched or rolled back while the sandbox ran (prepare
  // again); Internal when the code cannot be linked. Nothing is visible to executions until
  // CommitPatch.
  absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareIrPatch(
      const std::string& ir_text, const std::vector<std::string>& functions,
      const std::vector<HostTensor>& probe_inputs = {}, const PatchSandboxLimits& sandbox = {});
  // PrepareIrPatch with several probe sets: the sandbox runs the patch once on each (a set the
  // version cannot run is no refusal; a crash or a timeout is), counting the calls of each kernel
  // the patch replaces (ProbeCalls). InvalidArgument when a set does not fit the model.
  absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareIrPatchOnSets(
      const std::string& ir_text, const std::vector<std::string>& functions,
      const std::vector<std::vector<HostTensor>>& probe_sets,
      const PatchSandboxLimits& sandbox = {});
  // Each kernel an IR patch replaces with the number of times the sandbox's probe runs called
  // it; empty when no probe ran (or `patch` is not an IR patch). Validation refuses a patch whose
  // kernels never ran: it would have compared nothing.
  static std::vector<std::pair<std::string, uint64_t>> ProbeCalls(const PreparedPatch& patch);
  // Like Run, but with `patch`'s kernel table (validation before a commit); null: the current one.
  // Runs inside the execution guard like Execute, so no rollback frees code under it; Aborted
  // when the version was patched or rolled back since `patch` was prepared (its table may name
  // code that is gone: prepare it again).
  absl::StatusOr<std::vector<HostTensor>> RunWith(const PreparedPatch* patch,
                                                  const std::vector<HostTensor>& inputs) const;
  // Publishes `patch` (prepared on this model against the current table): executions that start
  // afterwards use it, executions already running finish on the old table. Never waits for
  // executions. Aborted if another patch was committed or rolled back since `patch` was prepared
  // (prepare it again), or while the version is frozen (Freeze). Returns the patch id.
  // `check` says how the caller validated it (a middle rollback later relies on it).
  absl::StatusOr<uint64_t> CommitPatch(std::shared_ptr<PreparedPatch> patch, std::string author,
                                       PatchCheck check = {});
  // Commits a recompile patch of every kernel (`patch`, from PrepareRecompilePatch with no
  // functions named) as the new *base* of the stack: it goes beneath every active layer, whose
  // kernels keep overriding it (a tier swap must not mask user patches). Its record is listed
  // first among the active patches. Aborted as CommitPatch; InvalidArgument when `patch` does
  // not replace every kernel.
  absl::StatusOr<uint64_t> CommitBasePatch(std::shared_ptr<PreparedPatch> patch,
                                           std::string author);
  // Stops commits (CommitPatch and CommitBasePatch then fail with Aborted, naming `reason`) and
  // returns the active patches, oldest first: a reload copies them onto its new version, and no
  // patch can land on this one after the copy. Unfreeze undoes it (the reload failed).
  std::vector<PatchRecord> Freeze(std::string reason);
  void Unfreeze();
  // Links the kernels `functions` (every kernel when empty) of `recompiled` — this version's
  // model compiled again with other options (`options_text` is recorded) — into a new layer.
  // InvalidArgument when `recompiled` is not the same model (kernels, signatures, weights) or a
  // name is not a kernel; Internal when LLVM cannot link it. Nothing is visible until CommitPatch.
  absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareRecompilePatch(
      const CompiledModel& recompiled, const std::vector<std::string>& functions,
      const std::string& options_text);
  // Wraps every kernel cuvil_entry calls (KernelFunction::parent -1; a subgraph's kernels run
  // inside their control-flow kernel's time), or the named `functions` (nested ones included),
  // with timing (calls and nanoseconds per kernel, atomic counters) in a new layer. Once committed,
  // the patch rolls itself back after `seconds` (a timer thread; 0: never) and its record keeps the
  // final table. FailedPrecondition while another profile patch is active; InvalidArgument for an
  // unknown function or a negative duration.
  absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareProfilePatch(
      double seconds, const std::vector<std::string>& functions);
  // Restores the table without patch `id` (any active patch: the table is rebuilt from the base
  // code and the remaining layers, in order). NotFound for an unknown id; FailedPrecondition when
  // it is already rolled back or an active profile patch above it wraps its code (roll that back
  // first). Then waits, without holding the patch lock (ListPatches, other versions and snapshots
  // go on), until no execution can still be inside the removed code, and frees it. When
  // executions are still inside after `drain_seconds` (a kernel that never returns), the rollback
  // stays done (new executions never see the code) but its code is kept until a later rollback
  // sees every execution of that time gone (or the version is destroyed); the result is then
  // DeadlineExceeded naming how many executions are stuck. Rollbacks of one version are
  // serialised with each other.
  //
  // With `trial` (from TryRollback), the rollback publishes exactly the table tried: Aborted
  // when the version was patched or rolled back since (try again).
  struct RollbackTrial;
  absl::Status Rollback(uint64_t id, double drain_seconds = 10,
                        const RollbackTrial* trial = nullptr);
  // What rolling back patch `id` would publish, to be checked before it is: `without` is that
  // table (every active layer but `id`) and `before` the table that served before `id` was
  // committed (only the layers beneath it); RunWith runs either inside the execution guard
  // (Aborted once the version changes). `above` lists the active patches above `id`: when it is
  // not empty, `without` is a combination of layers that never ran together. NotFound and
  // FailedPrecondition as Rollback. Thread-safe.
  struct RollbackTrial {
    std::shared_ptr<PreparedPatch> without;
    std::shared_ptr<PreparedPatch> before;
    std::vector<PatchRecord> above;
  };
  absl::StatusOr<RollbackTrial> TryRollback(uint64_t id) const;
  // Executions running now (requests and validation runs).
  int64_t running_executions() const;
  // True while code of a rollback whose drain timed out is kept for executions still inside it
  // (see Rollback). Blocks while another rollback drains.
  bool has_stuck_code() const;
  // The patches committed to this version, oldest first (active ones in stack order: a base
  // patch comes before the layers above it), profile tables as of now. At most 256 records:
  // beyond that the oldest rolled-back ones are dropped (active ones always stay).
  std::vector<PatchRecord> Patches() const;
  // The per-kernel table of profile patch `id` so far (final once it rolled back), largest share
  // first. NotFound when `id` is not a profile patch of this version.
  absl::StatusOr<std::vector<KernelProfile>> ProfileReport(uint64_t id) const;
  // The object code active recompile patch `id` links (snapshots carry it, so a restore on the
  // same CPU does not compile again). NotFound otherwise.
  absl::StatusOr<std::string> PatchObjectCode(uint64_t id) const;
  // Blocks until profile patch `id` is no longer active (its timer rolled it back) or `timeout`
  // seconds pass; true if it is inactive.
  bool WaitForProfileEnd(uint64_t id, double timeout_seconds) const;
  // Commits `patch` with the identity of `original` (id, time, author) instead of new ones: a
  // restored snapshot keeps its patch ids. AlreadyExists if that id is already in the history;
  // InvalidArgument for an id of 0 or above 2^62 (later ids count up from it).
  absl::StatusOr<uint64_t> CommitRestoredPatch(std::shared_ptr<PreparedPatch> patch,
                                               const PatchRecord& original);
  // Called (from the committing or rolling-back thread, no lock held) after every commit and
  // rollback, including a profile's automatic one; set once before patches start.
  void set_change_listener(std::function<void()> listener);
  // The automatic rollback of profile patch `id` at the end of its window: `started` is when the
  // timer fired, `status` what Rollback returned. Not called when the patch was rolled back by
  // hand first (the rollback call reports itself).
  using AutoRollbackListener = std::function<void(uint64_t id, const absl::Status& status,
                                                  std::chrono::steady_clock::time_point started)>;
  // Called on the profile timer's thread (no lock held) after each automatic rollback, before
  // WaitForProfileEnd returns for that patch; set once before patches start.
  void set_auto_rollback_listener(AutoRollbackListener listener);
  // Incremented by every commit and rollback (snapshot writers compare it).
  uint64_t change_count() const;
  // Start of the weights executions read (weights_bytes() long, zero-padded).
  const void* weights_data() const;
  // Where the code came from (see CodeSource); set once by the loader before serving.
  void set_source(CodeSource source) { source_ = std::move(source); }
  const CodeSource& source() const { return source_; }
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
  LoadedModel() = default;

  JitEngine* engine_ = nullptr;
  std::string namespace_name_;
  CompiledModel model_;
  void* weights_ = nullptr;  // Our read-only copy of the weights; null when used in place.
  size_t weights_mapped_bytes_ = 0;
  // Waits until every execution that may have read the table published before this call has
  // returned, or `seconds` pass (false then). Serialised by retire_mu_; never under patch_mu_.
  bool WaitForExecutions(double seconds) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(retire_mu_);
  // Counts an execution in the current epoch (see Execute); returns the parity to leave with.
  uint64_t EnterExecution() const;
  void LeaveExecution(uint64_t parity) const;
  // The buffers of one run of `inputs` (outputs, arena, symbols), checked against the signature.
  struct RunState;
  absl::StatusOr<std::unique_ptr<RunState>> PrepareRun(const std::vector<HostTensor>& inputs) const;
  absl::StatusOr<std::vector<HostTensor>> RunImpl(const PreparedPatch* patch,
                                                  const std::vector<HostTensor>& inputs) const;
  void Publish(void* const* table);
  // Shared tail of the IR-based patch kinds: parses `ir_text`, renames the kernels it defines
  // to "<kernel>.patch<id>", links it into a new layer and builds the layer's table.
  absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareIrLayer(
      const std::string& ir_text, const std::vector<std::string>& functions, uint64_t id,
      const char* kind, void* profile_thunk, const std::vector<std::vector<HostTensor>>* probe_sets,
      const PatchSandboxLimits& sandbox);
  // Links `object_code` (defining each (slot, symbol) of `symbols`) under `patch`'s tracker and
  // records it in `patch` (slots, slot_symbols, object_code). No code generation.
  absl::Status LinkPatchObject(PreparedPatch* patch, std::string object_code,
                               const std::vector<std::pair<int, std::string>>& symbols);
  // An IR patch layer from object code a sandbox produced (the sandbox child rebuilds a stack
  // with it). Nothing is visible until CommitPatch.
  friend class jitcache_internal::SandboxChild;
  absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareObjectPatch(
      std::string object_code, const std::vector<std::pair<int, std::string>>& symbols);
  // A table: the base kernels with every layer's slots applied in order (patch_mu_ held).
  std::unique_ptr<void*[]> BuildTable(size_t layer_count) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(patch_mu_);
  // The layer index of active patch `id` with Rollback's checks (patch_mu_ held).
  absl::StatusOr<size_t> RollbackLayer(uint64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(patch_mu_);
  // Commits `patch` at layer position `at` (layers_.size(): on top).
  absl::StatusOr<uint64_t> CommitLocked(std::shared_ptr<PreparedPatch> patch, size_t at)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(patch_mu_);
  // Rebuilds the tables of layers [from, end) and publishes the top one (patch_mu_ held); the
  // tables they replace go to `retired`.
  void RebuildFrom(size_t from, std::vector<std::unique_ptr<void*[]>>* retired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(patch_mu_);
  void NotifyChange();
  // True while patch `id` is in the history and not rolled back.
  bool IsActivePatch(uint64_t id) const;
  // Starts the automatic rollback of profile patch `id` after `seconds`.
  void StartProfileTimer(uint64_t id, double seconds);
  // Stops (and joins) the profile timer; called before the namespace goes away.
  void StopProfileTimer();

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

  // Generation of the published table (table_generation_ as of the last publish), readable
  // without patch_mu_: validation runs compare it inside the guard.
  std::atomic<uint64_t> published_generation_{0};
  // Serialises the drains of rollbacks (never held with patch_mu_ acquired after it).
  mutable absl::Mutex retire_mu_;
  // Code of rollbacks whose drain timed out: freed once a drain sees every execution that
  // started before them gone (two consecutive drains of both parities).
  std::vector<std::shared_ptr<PreparedPatch>> retained_ ABSL_GUARDED_BY(retire_mu_);
  mutable absl::Mutex patch_mu_;
  bool frozen_ ABSL_GUARDED_BY(patch_mu_) = false;
  // Tables a base commit replaced; freed by the next rollback's drain.
  std::vector<std::unique_ptr<void*[]>> retired_tables_ ABSL_GUARDED_BY(patch_mu_);
  std::string frozen_reason_ ABSL_GUARDED_BY(patch_mu_);
  struct Layer;
  std::vector<std::unique_ptr<Layer>> layers_ ABSL_GUARDED_BY(patch_mu_);  // Active, oldest first.
  std::vector<PatchRecord> history_ ABSL_GUARDED_BY(patch_mu_);
  uint64_t table_generation_ ABSL_GUARDED_BY(patch_mu_) = 0;
  std::atomic<uint64_t> change_count_{0};
  std::function<void()> change_listener_;        // Set once before patches start.
  AutoRollbackListener auto_rollback_listener_;  // Set once before patches start.
  CodeSource source_;                            // Set once before serving.

  // The profile timer: at most one profile patch is active at a time.
  struct ProfileTimer;
  std::unique_ptr<ProfileTimer> profile_timer_;
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
