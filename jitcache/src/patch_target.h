// Private: the boundary between a version's executable part (LoadedModel) and its patch stack
// (PatchController). The controller reaches the version only through
// jitcache_internal::PatchTarget, which LoadedModel implements; the code of a patch is a
// PreparedPatch.
#ifndef CUVIL_JITCACHE_SRC_PATCH_TARGET_H_
#define CUVIL_JITCACHE_SRC_PATCH_TARGET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/jitcache/patch_controller.h"
#include "cuvil/runtime/host_tensor.h"
#include "kernel_profiler.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"

namespace cuvil {

// The code and table of one prepared or committed patch.
class PreparedPatch {
 public:
  ~PreparedPatch() {
    if (tracker) llvm::consumeError(tracker->remove());  // Frees the code if never published.
    if (own_dylib != nullptr) llvm::consumeError(session->removeJITDylib(*own_dylib));
  }
  uint64_t id = 0;
  uint64_t base_generation = 0;  // The table generation it was prepared against.
  llvm::orc::ResourceTrackerSP tracker;
  // Recompile patches link a whole object into a namespace of their own (its symbols would clash
  // with the version's); removing it frees the code.
  llvm::orc::ExecutionSession* session = nullptr;
  llvm::orc::JITDylib* own_dylib = nullptr;
  std::unique_ptr<void*[]> table;  // The base table with every layer up to this one applied.
  std::vector<std::pair<int, void*>> slots;  // What this layer replaces: (slot, code).
  std::shared_ptr<KernelProfiler> profiler;  // Profile patches.
  double profile_seconds = 0;
  // Recompile patches: what they link (for snapshots); sandboxed IR patches: the object code the
  // sandbox produced (a later sandbox child links it again to rebuild the stack).
  std::string object_code;
  std::vector<std::pair<int, std::string>> slot_symbols;  // IR patches from object code.
  double sandbox_ms = 0;  // IR patches: the sandbox child's time (start to exit).
  // IR patches run on probe sets: each kernel the patch replaces and its calls over the sets.
  std::vector<std::pair<std::string, uint64_t>> probe_calls;
  PatchRecord record;
};

namespace jitcache_internal {

// What every version of one JitEngine shares: the LLJIT, the runtime namespace the versions link
// to, the patch id counter and the compile lock. Owned by the engine (JitEngine::Impl).
struct JitShared {
  std::unique_ptr<llvm::orc::LLJIT> jit;  // Thread-safe (ORC's own locking).
  llvm::orc::JITDylib* runtime = nullptr;
  std::atomic<uint64_t> next_patch_id{1};  // Unique across namespaces: symbols embed it.
  // LLJIT's compile layer compiles on the calling thread: one IR compile at a time (patches are
  // prepared from several admin threads). Never held with a controller's locks.
  absl::Mutex compile_mu;
};

// The executable part of a version as its PatchController sees it: what the layers are linked
// into and built over, and the two operations that change what executions run (Publish) and
// learn when they are done with it (WaitForExecutions). Implemented by LoadedModel; the
// controller holds it by pointer and never owns it (the version owns the controller).
//
// Thread-safety: every method may be called from any thread, except that WaitForExecutions has
// one caller at a time (the controller's rollback lock) and Publish is called with the
// controller's patch lock held (publishes are ordered by it). None of them takes a lock.
class PatchTarget {
 public:
  virtual ~PatchTarget() = default;

  // "<model>/<version>", for messages and the names of patch namespaces.
  virtual const std::string& namespace_name() const = 0;
  virtual const CompiledModel& model() const = 0;
  // cuvil_fn_table: the base kernels, beneath every layer (slots may be redirected in place by
  // tools: read them atomically).
  virtual void** base_table() const = 0;
  // The weights executions read and their mapped size (see LoadedModel::weights_data).
  virtual const void* weights_data() const = 0;
  virtual size_t weights_bytes() const = 0;
  // The engine's shared JIT state, and the version's own namespace patches link into.
  virtual JitShared& jit() const = 0;
  virtual llvm::orc::JITDylib& dylib() const = 0;
  // OK when `inputs` (signature order) is a run the version can make; the error
  // LoadedModel::Run would return otherwise. Allocates that run's buffers.
  virtual absl::Status CheckRunInputs(const std::vector<HostTensor>& inputs) const = 0;
  // Makes `table` (table generation `generation`) the one every execution that starts from now
  // uses; executions already running finish on theirs. Never waits.
  virtual void Publish(void* const* table, uint64_t generation) = 0;
  // Waits until every execution that may have read a table published before this call has
  // returned, or `seconds` pass (false then). One caller at a time.
  virtual bool WaitForExecutions(double seconds) const = 0;
  // Executions running now.
  virtual int64_t running_executions() const = 0;
};

}  // namespace jitcache_internal
}  // namespace cuvil

#endif  // CUVIL_JITCACHE_SRC_PATCH_TARGET_H_
