// Private: turning exceptions into statuses where jitcache work runs on threads of its own (loader
// threads, thread pools, helper threads), where an escaping exception is std::terminate.
#ifndef CUVIL_JITCACHE_SRC_CATCHING_H_
#define CUVIL_JITCACHE_SRC_CATCHING_H_

#include <exception>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cuvil::jitcache_internal {

// Runs `fn` (returning a Status or StatusOr); an exception becomes Internal naming `what`.
template <typename Fn>
auto Catching(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, " failed: ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, " failed: unknown exception"));
  }
}

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_CATCHING_H_
