// Private: the sandbox that compiles and first runs an IR patch in a child process, so that a patch
// that crashes, loops, or makes LLVM abort takes the child down instead of the server.
//
// The child is a fork of the server: it inherits the version's linked code, weights and the
// probe buffers without a copy. It parses the (already checked) patch IR in a fresh LLVM context,
// compiles it for the host, links it in a JIT of its own against the runtime ABI and the
// version's weights, runs the caller's probe with a table in which the patch's kernels replace
// theirs, on one thread, and sends the object code back. The server links only that object code:
// no LLVM code generation of patch IR ever runs in the server process.
//
// Limits: the child is killed after `timeout_seconds`; its address space is capped at the
// parent's plus 1 GiB. A child of a multithreaded process may block on a lock another thread of
// the server held at the fork (LLVM's or the C library's): that shows as a timeout, never as a
// hang of the server.
#ifndef CUVIL_JITCACHE_SRC_PATCH_SANDBOX_H_
#define CUVIL_JITCACHE_SRC_PATCH_SANDBOX_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cuvil::jitcache_internal {

struct SandboxJob {
  std::string ir;                    // Checked patch IR; kernels carry their unique names.
  std::vector<std::string> symbols;  // The unique kernel symbols the patch defines.
  std::vector<int> slots;            // Their kernel table slots (same order).
  std::vector<void*> table;          // The current kernel table (copied, then patched).
  std::string weights_symbol;        // Defined at `weights` in the child's JIT.
  const void* weights = nullptr;
  // Runs the version on the probe input with the given table (in the child, one thread);
  // returns the entry's code. Null: compile and link only.
  std::function<int32_t(void* const* table)> probe;
  double timeout_seconds = 10;
};

// What the child produced: object code defining `symbols`.
struct SandboxResult {
  std::string object_code;
  int32_t probe_code = 0;  // What the probe returned (0: success).
  double child_ms = 0;     // Fork to exit.
};

// Runs `job` in a forked child and waits for it. FailedPrecondition naming the reason when the
// child crashed (the signal), exited with an error (LLVM's message), timed out, or its code
// returned no object; Unavailable when no child could be started. Thread-safe (each call has its
// own child); the caller must not hold locks the probe takes.
absl::StatusOr<SandboxResult> RunInSandbox(const SandboxJob& job);

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_PATCH_SANDBOX_H_
