// Private: the sandbox that compiles and first runs an IR patch in a separate process, so that a
// patch that crashes, loops, or makes LLVM abort takes that process down instead of the server.
//
// The child is `cuvil-patch-sandbox` (jitcache/src/patch_sandbox_main.cc), a fresh program
// started with posix_spawn — never a fork of the server, whose other threads may hold locks
// (the C library's, the unwinder's, LLVM's) that a forked child would wait on for ever. It gets
// the job on descriptor 3 (a serialized SandboxJob, patch_sandbox.proto: the version's
// description, base object code, its active layers' code and the patch IR) and the version's
// weights on descriptor 4, rebuilds the version's current kernel table in a JIT of its own,
// compiles the patch, links it, runs each probe set once on one thread (counting the calls of
// the patched kernels), and writes the object code and the counts to descriptor 5. The server links
// only that object code: no LLVM code generation of patch IR ever runs in the server process.
//
// Limits: the child is killed after `timeout_seconds`, dies with the server (PR_SET_PDEATHSIG),
// inherits no descriptor but its five, writes no core file, and its address space is capped
// (2 GiB plus the job and the weights; not under sanitizers, which reserve terabytes).
#ifndef CUVIL_JITCACHE_SRC_PATCH_SANDBOX_H_
#define CUVIL_JITCACHE_SRC_PATCH_SANDBOX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cuvil::jitcache_internal {

struct SandboxJob {
  std::string job;                // A serialized cuvil.jitcache.v1.SandboxJob.
  const void* weights = nullptr;  // The version's weights (`weights_bytes` long).
  size_t weights_bytes = 0;
  double timeout_seconds = 10;
};

// What the child produced: object code defining the patch's symbols.
struct SandboxResult {
  std::string object_code;
  int32_t probe_code = 0;  // 0: every probe set ran and succeeded (or there was none).
  // Calls of each patched kernel over the probe sets (the job's patch_slots order); empty when
  // no probe ran.
  std::vector<uint64_t> kernel_calls;
  double child_ms = 0;  // Start to exit.
};

// Runs `job` in a `cuvil-patch-sandbox` child and waits for it. FailedPrecondition naming the
// reason when the child crashed (the signal), exited with an error (LLVM's message), timed out,
// or produced no object, or when the program cannot be found (SandboxProgram); Unavailable when
// no child could be started. Thread-safe (each call has its own child).
absl::StatusOr<SandboxResult> RunInSandbox(const SandboxJob& job);

// The sandbox program: $CUVIL_PATCH_SANDBOX when set, else `cuvil-patch-sandbox` beside the
// running executable, else the one this build made. Empty when none is executable.
// Thread-safe.
std::string SandboxProgram();

// The child's main (cuvil-patch-sandbox): reads the job from descriptors 3 and 4, replies on 5,
// exits. Returns only when its arguments are wrong (exit status 2).
class SandboxChild {
 public:
  static int Main(int argc, char** argv);
};

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_PATCH_SANDBOX_H_
