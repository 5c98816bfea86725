// Hot patching of a loaded model version: the layers over its base kernel table, their history,
// validation support, rollback and the profile timer. The version itself (its code, weights and
// execution guard) is LoadedModel (jit_engine.h), which owns one PatchController.
#ifndef CUVIL_JITCACHE_PATCH_CONTROLLER_H_
#define CUVIL_JITCACHE_PATCH_CONTROLLER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

class LoadedModel;
namespace jitcache_internal {
class PatchTarget;
class SandboxChild;
}  // namespace jitcache_internal

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

// The patch stack of one LoadedModel: prepares layers (IR, recompile, profile) in the version's
// namespace, commits them by publishing a new kernel table to the version, rolls them back
// (freeing their code once no execution can still run it), and keeps their history.
// Obtained from LoadedModel::patches(); lives and dies with its version.
//
// Thread-safety: thread-safe. Every method may be called from any thread, concurrently with each
// other and with the version's executions (which never take these locks). Commits, rollbacks and
// the preparation of tables are serialised by patch_mu_ (guards the layers, the history, the
// frozen state, the table generation and the tables a base commit retired); rollbacks are
// serialised with each other by retire_mu_ (guards the code kept for stuck executions), held for
// the whole rollback including its drain. Lock order: retire_mu_, then patch_mu_, then the
// profile timer's mutex; the engine's compile lock is never held with any of them. patch_mu_ is
// never held while waiting for executions or running a sandbox child. The change listener runs
// with no lock held after a commit and, after a rollback, with only retire_mu_ held.
class PatchController {
 public:
  ~PatchController();
  PatchController(const PatchController&) = delete;
  PatchController& operator=(const PatchController&) = delete;

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
  // Publishes `patch` (prepared on this model against the current table): executions that start
  // afterwards use it, executions already running finish on the old table. Never waits for
  // executions. Aborted if another patch was committed or rolled back since `patch` was prepared
  // (prepare it again), or while the version is frozen (Freeze). Returns the patch id.
  // `check` says how the caller validated it (a middle rollback later relies on it).
  // (LoadedModel::RunWith runs a prepared patch's table before its commit.)
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
  // unknown function or a negative duration; Aborted when the version was patched or rolled back
  // while the wrappers were compiled (prepare again).
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
  // committed (only the layers beneath it); LoadedModel::RunWith runs either inside the execution
  // guard (Aborted once the version changes). `above` lists the active patches above `id`: when
  // it is not empty, `without` is a combination of layers that never ran together. NotFound and
  // FailedPrecondition as Rollback. Thread-safe.
  struct RollbackTrial {
    std::shared_ptr<PreparedPatch> without;
    std::shared_ptr<PreparedPatch> before;
    std::vector<PatchRecord> above;
  };
  absl::StatusOr<RollbackTrial> TryRollback(uint64_t id) const;
  // True while code of a rollback whose drain timed out is kept for executions still inside it
  // (see Rollback). Blocks while another rollback drains.
  bool has_stuck_code() const;
  // True while patch layers (IR, recompile or profile) are active over the base code. Lock-free
  // (a hint: a commit or rollback may change it at once).
  bool has_layers() const { return layer_count_.load(std::memory_order_relaxed) > 0; }
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
  // Called (from the committing or rolling-back thread, no patch lock held) after every commit
  // and rollback, including a profile's automatic one; set once before patches start.
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

 private:
  // LoadedModel creates its controller and detaches it before its namespace goes away (Detach);
  // it uses nothing else of the controller's private part.
  friend class LoadedModel;
  // The sandbox child rebuilds the server's stack from object code (PrepareObjectPatch).
  friend class jitcache_internal::SandboxChild;

  // `target` is the version this controller patches; it owns the controller and outlives it.
  explicit PatchController(jitcache_internal::PatchTarget* target);
  // Stops the profile timer (its automatic rollback must not run against a namespace going
  // away) and disowns the code of every layer and retained patch: removing the namespace frees
  // it. Called once by ~LoadedModel before the namespace is removed.
  void Detach();
  const CompiledModel& model() const;         // The version's (target_->model()).
  const std::string& namespace_name() const;  // The version's, for messages.

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
  absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareObjectPatch(
      std::string object_code, const std::vector<std::pair<int, std::string>>& symbols);
  // Gives `patch` (its slots filled) its table over the current top layer, the generation it
  // was built against and its record. Takes patch_mu_.
  void SealOnTop(PreparedPatch& patch, uint64_t id, const std::string& kind,
                 const std::vector<std::string>& functions, const std::string& source)
      ABSL_LOCKS_EXCLUDED(patch_mu_);
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
  // Publishes `table` to the version's executions as the next table generation (patch_mu_ held).
  void PublishLocked(void* const* table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(patch_mu_);
  // Waits until every execution that may have read the table published before this call has
  // returned, or `seconds` pass (false then). The version's execution guard serves one waiter at
  // a time: retire_mu_ makes this controller that waiter. Never under patch_mu_.
  bool WaitForExecutions(double seconds) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(retire_mu_);
  void NotifyChange();
  // True while patch `id` is in the history and not rolled back.
  bool IsActivePatch(uint64_t id) const;
  // Starts the automatic rollback of profile patch `id` after `seconds`.
  void StartProfileTimer(uint64_t id, double seconds);
  // Stops (and joins) the profile timer; called before the namespace goes away.
  void StopProfileTimer();

  // The version patched: its code, namespace and execution guard. Not owned (it owns us).
  jitcache_internal::PatchTarget* const target_;

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
  // layers_.size(), for has_layers(); written under patch_mu_.
  std::atomic<size_t> layer_count_{0};
  std::vector<PatchRecord> history_ ABSL_GUARDED_BY(patch_mu_);
  // Generation of the table last published (the version's published generation follows it).
  uint64_t table_generation_ ABSL_GUARDED_BY(patch_mu_) = 0;
  std::atomic<uint64_t> change_count_{0};
  std::function<void()> change_listener_;        // Set once before patches start.
  AutoRollbackListener auto_rollback_listener_;  // Set once before patches start.

  // The profile timer: at most one profile patch is active at a time.
  struct ProfileTimer;
  std::unique_ptr<ProfileTimer> profile_timer_;
};

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_PATCH_CONTROLLER_H_
