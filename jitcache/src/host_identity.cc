#include "host_identity.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/TargetParser/Host.h"

namespace cuvil::jitcache_internal {

const HostIdentity& HostIdentityOfThisProcess() {
  static const HostIdentity* host = [] {
    auto* h = new HostIdentity;
    h->triple = llvm::sys::getProcessTriple();
    h->cpu = llvm::sys::getHostCPUName().str();
    std::vector<std::string> feats;
    for (const auto& f : llvm::sys::getHostCPUFeatures()) {
      feats.push_back(absl::StrCat(f.second ? "+" : "-", f.first().str()));
    }
    std::sort(feats.begin(), feats.end());
    h->features = absl::StrJoin(feats, ",");
    return h;
  }();
  return *host;
}

}  // namespace cuvil::jitcache_internal
