// Private: where a JIT cache lookup's time goes, phase by phase (CacheLookup::timings).
#ifndef CUVIL_JITCACHE_SRC_LAPS_H_
#define CUVIL_JITCACHE_SRC_LAPS_H_

#include <chrono>
#include <vector>

#include "cuvil/format/compiled_model.h"

namespace cuvil::jitcache_internal {

// Appends the time since the last Lap (or construction) as `phase` to `out` (when not null).
class Laps {
 public:
  explicit Laps(std::vector<PhaseTiming>* out) : out_(out) {}
  void Lap(const char* phase) {
    const auto now = std::chrono::steady_clock::now();
    if (out_ != nullptr) {
      out_->push_back({phase, std::chrono::duration<double, std::milli>(now - last_).count()});
    }
    last_ = now;
  }

 private:
  std::vector<PhaseTiming>* out_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_LAPS_H_
