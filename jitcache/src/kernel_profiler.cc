#include "kernel_profiler.h"

#include <time.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cuvil {
namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call.
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

extern "C" int32_t cuvil_profile_call(ProfiledKernel* k, void* args, int64_t batch) {
  const uint64_t t0 = NowNs();
  const int32_t rc = k->target(args, batch);
  const uint64_t t1 = NowNs();
  // Relaxed: counters are only summed for the report, never used to order anything.
  k->calls.fetch_add(1, std::memory_order_relaxed);
  k->total_ns.fetch_add(t1 - t0, std::memory_order_relaxed);
  return rc;
}

}  // namespace

KernelProfiler::KernelProfiler(const std::vector<std::pair<std::string, void*>>& kernels)
    : kernels_(std::make_unique<ProfiledKernel[]>(std::max<size_t>(kernels.size(), 1))) {
  for (size_t i = 0; i < kernels.size(); ++i) {
    names_.push_back(kernels[i].first);
    kernels_[i].target = reinterpret_cast<ProfiledKernel::Fn>(kernels[i].second);
  }
}

std::vector<KernelProfile> KernelProfiler::Report() const {
  std::vector<KernelProfile> rows;
  uint64_t sum = 0;
  for (size_t i = 0; i < names_.size(); ++i) {
    KernelProfile row;
    row.function = names_[i];
    row.calls = kernels_[i].calls.load(std::memory_order_relaxed);
    row.total_ns = kernels_[i].total_ns.load(std::memory_order_relaxed);
    if (row.calls == 0) continue;
    row.mean_ns = static_cast<double>(row.total_ns) / static_cast<double>(row.calls);
    sum += row.total_ns;
    rows.push_back(std::move(row));
  }
  for (KernelProfile& row : rows) {
    row.share = sum == 0 ? 0 : static_cast<double>(row.total_ns) / static_cast<double>(sum);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const KernelProfile& a, const KernelProfile& b) {
    return a.total_ns > b.total_ns;
  });
  return rows;
}

void KernelProfiler::Reset() {
  for (size_t i = 0; i < names_.size(); ++i) {
    kernels_[i].calls.store(0, std::memory_order_relaxed);
    kernels_[i].total_ns.store(0, std::memory_order_relaxed);
  }
}

std::string KernelProfiler::WrapperIr(const std::string& thunk_symbol) {
  std::string ir = absl::StrCat("declare i32 @\"", thunk_symbol, "\"(ptr, ptr, i64)\n");
  for (size_t i = 0; i < names_.size(); ++i) {
    // The counters' address is a constant of the wrapper: no lookup on the call path.
    absl::StrAppend(&ir, "define i32 @\"", names_[i], "\"(ptr %args, i64 %batch) {\n",
                    "  %r = tail call i32 @\"", thunk_symbol, "\"(ptr inttoptr (i64 ",
                    reinterpret_cast<uintptr_t>(&kernels_[i]),
                    " to ptr), ptr %args, i64 %batch)\n  ret i32 %r\n}\n");
  }
  return ir;
}

void* KernelProfiler::Thunk() { return reinterpret_cast<void*>(&cuvil_profile_call); }

}  // namespace cuvil
