// Private: the timing wrappers of a profile patch. Each wrapped kernel gets a small LLVM function
// with the kernel's signature that calls cuvil_profile_call with its ProfiledKernel, which times
// the real kernel and adds to that kernel's counters.
#ifndef CUVIL_JITCACHE_SRC_KERNEL_PROFILER_H_
#define CUVIL_JITCACHE_SRC_KERNEL_PROFILER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuvil/jitcache/patch_controller.h"

namespace cuvil {

// One wrapped kernel: where it jumps and what it counted. A cache line each, so threads running
// different kernels do not share counters' lines.
struct alignas(64) ProfiledKernel {
  using Fn = int32_t (*)(void* args, int64_t batch);
  Fn target = nullptr;  // Immutable once the wrappers are linked.
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> total_ns{0};
};

// The counters of one profile patch. Thread-safe: counting is lock-free (relaxed atomics),
// Report reads a consistent-enough view while kernels run.
class KernelProfiler {
 public:
  // One counter set per (function name, current kernel address).
  explicit KernelProfiler(const std::vector<std::pair<std::string, void*>>& kernels);

  size_t size() const { return names_.size(); }
  ProfiledKernel* kernel(size_t i) { return &kernels_[i]; }
  const std::string& name(size_t i) const { return names_[i]; }

  // Per-kernel calls, total and mean time and share of the total, largest share first; kernels
  // never called are left out.
  std::vector<KernelProfile> Report() const;

  // Zeroes every counter. Called just before the wrappers are published, so the table counts
  // only executions that ran on the published table (not the patch's validation run).
  void Reset();

  // LLVM IR defining, for each kernel i, a function named name(i) with the kernel signature that
  // calls `thunk_symbol` (declared in the IR) with &kernel(i).
  std::string WrapperIr(const std::string& thunk_symbol);

  // Address of cuvil_profile_call(ProfiledKernel*, void* args, int64_t batch).
  static void* Thunk();

 private:
  std::vector<std::string> names_;
  std::unique_ptr<ProfiledKernel[]> kernels_;
};

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_SRC_KERNEL_PROFILER_H_
