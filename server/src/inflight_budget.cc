#include "inflight_budget.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace cuvil {

InflightBudget::Reservation& InflightBudget::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = other.budget_;
    bytes_ = other.bytes_;
    other.budget_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void InflightBudget::Reservation::Release() {
  if (budget_ != nullptr) budget_->in_flight_.fetch_sub(bytes_, std::memory_order_acq_rel);
  budget_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<InflightBudget::Reservation> InflightBudget::Reserve(uint64_t bytes,
                                                                    const char* what) {
  uint64_t current = in_flight_.load(std::memory_order_relaxed);
  do {
    if (limit_ != 0 && bytes > limit_) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " of ", bytes, " bytes is larger than the ", limit_,
                       " bytes all requests in flight may hold (--max-inflight-bytes)"));
    }
    if (limit_ != 0 && current > limit_ - bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("server is busy: ", what, " of ", bytes, " bytes with ", current,
                       " bytes of requests already in flight would exceed the ", limit_,
                       " bytes allowed (--max-inflight-bytes); retry later"));
    }
  } while (!in_flight_.compare_exchange_weak(current, current + bytes, std::memory_order_acq_rel,
                                             std::memory_order_relaxed));
  return Reservation(this, bytes);
}

absl::Status InflightBudget::Extend(Reservation* reservation, uint64_t bytes, const char* what) {
  if (bytes == 0) return absl::OkStatus();
  const uint64_t held = reservation->bytes();
  uint64_t current = in_flight_.load(std::memory_order_relaxed);
  do {
    if (limit_ != 0 && (bytes > limit_ || held > limit_ - bytes)) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " of ", held + bytes, " bytes is larger than the ", limit_,
                       " bytes all requests in flight may hold (--max-inflight-bytes)"));
    }
    if (limit_ != 0 && current > limit_ - bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "server is busy: ", what, " of ", held + bytes, " bytes with ", current - held,
          " bytes of other requests already in flight would exceed the ", limit_,
          " bytes allowed (--max-inflight-bytes); retry later"));
    }
  } while (!in_flight_.compare_exchange_weak(current, current + bytes, std::memory_order_acq_rel,
                                             std::memory_order_relaxed));
  reservation->budget_ = this;
  reservation->bytes_ = held + bytes;
  return absl::OkStatus();
}

uint64_t InflightBudget::DefaultLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return uint64_t{1} << 30;  // Unknown: 1 GiB.
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 4;
}

}  // namespace cuvil
