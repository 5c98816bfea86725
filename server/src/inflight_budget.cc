#include "inflight_budget.h"

#include <unistd.h>

#include <algorithm>

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
                                                                    const char* what,
                                                                    uint64_t held) {
  uint64_t current = in_flight_.load(std::memory_order_relaxed);
  do {
    if (limit_ != 0 && bytes > limit_) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " of ", bytes, " bytes is larger than the ", limit_,
                       " bytes all requests in flight may hold (", limit_source_, ")"));
    }
    if (limit_ != 0 && held > limit_ - bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " of ", bytes, " bytes beside the ", held,
                       " bytes its requests hold is larger than the ", limit_,
                       " bytes all requests in flight may hold (", limit_source_, ")"));
    }
    if (limit_ != 0 && current > limit_ - bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("server is busy: ", what, " of ", bytes, " bytes with ", current,
                       " bytes of requests already in flight would exceed the ", limit_,
                       " bytes allowed (", limit_source_, "); retry later"));
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
                       " bytes all requests in flight may hold (", limit_source_, ")"));
    }
    if (limit_ != 0 && current > limit_ - bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "server is busy: ", what, " of ", held + bytes, " bytes with ", current - held,
          " bytes of other requests already in flight would exceed the ", limit_,
          " bytes allowed (", limit_source_, "); retry later"));
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

InflightBudgetSplit SplitInflightBudget(uint64_t total, uint64_t max_request_bytes) {
  InflightBudgetSplit split;
  split.total = total;
  split.grpc_max_message = max_request_bytes;
  if (total == 0) return split;
  split.grpc_quota = total / 5;
  split.grpc_set_aside = total / 2;
  split.requests = total - split.grpc_set_aside;
  if (split.grpc_quota / 2 < max_request_bytes) {
    split.grpc_max_message = std::max<uint64_t>(1, split.grpc_quota / 2);
    split.grpc_message_lowered = true;
  }
  split.requests_below_max_request = split.requests < max_request_bytes;
  const uint64_t streams = split.grpc_set_aside / 2 / std::max<uint64_t>(1, split.grpc_max_message);
  split.grpc_streams_per_connection = static_cast<int>(std::clamp<uint64_t>(streams, 4, 128));
  return split;
}

}  // namespace cuvil
