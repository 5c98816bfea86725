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

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_HOST_IDENTITY_H_
