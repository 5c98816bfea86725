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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil::jitcache::v1 {
class SandboxInputSet;
class SandboxJob;
}  // namespace cuvil::jitcache::v1

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
// or produced no object or a damaged reply (DecodeSandboxReply; an ok reply must carry
// SandboxJobCallCounts(job.job) counts), or when the program cannot be found (SandboxProgram);
// Unavailable when no child could be started; Internal when `job.job` is not a serialized
// SandboxJob. Thread-safe (each call has its own child).
absl::StatusOr<SandboxResult> RunInSandbox(const SandboxJob& job);

// The sandbox program: $CUVIL_PATCH_SANDBOX when set, else `cuvil-patch-sandbox` beside the
// running executable, else the one this build made. Empty when none is executable.
// Thread-safe.
std::string SandboxProgram();

// ---- The messages that cross the process boundary ----
//
// Both directions are untrusted: the child runs hostile patch code that may write anything to
// its reply descriptor, and the child must not trust its job further than the checks below. The
// functions here are pure (no I/O, no JIT), so tests and fuzz/fuzz_patch_sandbox.cc drive them
// with arbitrary bytes.
//
// The reply (descriptor 5) is a 24-byte header in host byte order — uint32 magic 0x53565543
// ("CUVS"), int32 ok (1: the payload is the object code; 0: it is an error message), int32
// probe_code, uint32 call_counts, uint64 payload_bytes — then payload_bytes bytes of payload,
// then call_counts uint64 counts (host byte order).

// The header's size; a reply is never shorter.
inline constexpr size_t kSandboxReplyHeaderBytes = 24;
// The largest payload (object code or error message) and count vector a reply may declare.
inline constexpr uint64_t kSandboxMaxPayloadBytes = uint64_t{256} << 20;
inline constexpr uint32_t kSandboxMaxCallCounts = uint32_t{1} << 20;

// The reply bytes the child writes: `ok` with `payload` the object code (and `calls` the call
// counts, one per patched kernel), or !ok with `payload` the error message and no counts.
// Thread-safe.
std::string EncodeSandboxReply(bool ok, int32_t probe_code, std::string_view payload,
                               const std::vector<uint64_t>& calls = {});

// How many bytes follow the header whose first kSandboxReplyHeaderBytes bytes are `header`;
// nullopt when the header is malformed (shorter than a header, bad magic, ok neither 0 nor 1,
// a payload or count vector above the limits). Lets a reader size what it reads next without
// trusting the header further. Thread-safe.
std::optional<uint64_t> SandboxReplyBodyBytes(std::string_view header);

// Decodes a whole reply. For an ok reply, the result with its object code, probe code and call
// counts (child_ms is left 0); the reply must carry exactly `expected_call_counts` counts (see
// SandboxJobCallCounts) and a non-empty object code. For a refusal, FailedPrecondition "patch
// refused by the sandbox: <the child's message>". DataLoss naming what is wrong for anything
// else: a truncated header, a bad magic number, sizes above the limits, fewer or more bytes than
// the header declares, a refusal carrying counts. Allocates only after the sizes are checked
// against `bytes`. Thread-safe.
absl::StatusOr<SandboxResult> DecodeSandboxReply(std::string_view bytes,
                                                 size_t expected_call_counts);

// The number of call counts an ok reply to `job` (a serialized cuvil.jitcache.v1.SandboxJob)
// carries: its patch_slots' count when it has probe sets, else 0. Reads the wire format without
// parsing (or copying) the job's code; nullopt when the bytes are not a well-formed message.
// Thread-safe.
std::optional<size_t> SandboxJobCallCounts(std::string_view job);

// Every structural check the child makes before it touches the JIT, with `weights_bytes` the
// size of the weights it was handed: the weights size the job names matches; the model header
// rebuilds (DecodeModelHeader's checks, with the job's object code); every layer has a known kind
// and every slot (the patch's and the layers') is a kernel index of the header, the patch's
// slots non-empty and distinct; every probe tensor has a known dtype, non-negative dims whose
// partial products fit in int64, and exactly as many data bytes (numeric dtypes) or strings (the
// string dtype) as its shape holds, and nothing of the other kind. OK when the job is sound, else
// DataLoss whose message is the child's refusal ("the sandbox's job names a kernel slot out of
// range", "the sandbox's probe input is damaged: ..."). Thread-safe.
absl::Status CheckSandboxJob(const ::cuvil::jitcache::v1::SandboxJob& job, size_t weights_bytes);

// The tensors of one probe set of a job CheckSandboxJob accepted, as the child runs them (one
// allocation per tensor, proportional to the set's own bytes). Thread-safe.
std::vector<HostTensor> SandboxProbeInputs(const ::cuvil::jitcache::v1::SandboxInputSet& set);

// The child's main (cuvil-patch-sandbox): reads the job from descriptors 3 and 4, replies on 5,
// exits. Returns only when its arguments are wrong (exit status 2).
class SandboxChild {
 public:
  static int Main(int argc, char** argv);
};

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_PATCH_SANDBOX_H_
