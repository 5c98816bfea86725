// Private: what identifies the machine code a host can run (shared by cache entries and snapshots).
#ifndef CUVIL_JITCACHE_SRC_HOST_IDENTITY_H_
#define CUVIL_JITCACHE_SRC_HOST_IDENTITY_H_

#include <string>

namespace cuvil::jitcache_internal {

// Thread-compatible value; the instance HostIdentityOfThisProcess returns is immutable.
struct HostIdentity {
  std::string triple;
  std::string cpu;
  std::string features;  // Sorted "+avx2,-avx512f,...".
};

// This process's target triple, CPU name and CPU features, computed once. Thread-safe.
const HostIdentity& HostIdentityOfThisProcess();

// The compiler that generates code in this process: kCompilerVersion, kRuntimeAbiVersion, the
// LLVM version and the GNU build ID of the binary holding the compiler (else a hash of its file),
// computed once. Cache keys and entry headers hold it. Thread-safe.
const std::string& CompilerBuildIdentity();

// CompilerBuildIdentity plus the code generator's target choices (CodegenTargetKey): object code
// recorded under another value must not be loaded here (snapshots check it). Thread-safe.
std::string CodeIdentity();

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_HOST_IDENTITY_H_
