// Private: a server-wide bound on the bytes requests hold in memory while they are in flight,
// shared by the front ends so many concurrent large requests cannot exhaust memory together.
#ifndef CUVIL_SERVER_SRC_INFLIGHT_BUDGET_H_
#define CUVIL_SERVER_SRC_INFLIGHT_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"

namespace cuvil {

// Bytes reserved by requests in flight, against a fixed limit (0: unlimited). A request reserves
// what it holds (a gRPC ModelInfer its message's bytes) before it allocates anything for them and
// keeps the reservation until its response has gone out; a reservation that would cross the
// limit fails at once instead of waiting, so a burst of large requests is refused, not queued.
// Thread-safe; must outlive its reservations.
class InflightBudget {
 public:
  explicit InflightBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}
  InflightBudget(const InflightBudget&) = delete;
  InflightBudget& operator=(const InflightBudget&) = delete;

  // Bytes held until destroyed or Release()d. Move-only; thread-compatible.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_) {
      other.budget_ = nullptr;
      other.bytes_ = 0;
    }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }
    // Returns the bytes to the budget now; later calls do nothing.
    void Release();
    uint64_t bytes() const { return bytes_; }

   private:
    friend class InflightBudget;
    Reservation(InflightBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    InflightBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // Reserves `bytes`, or ResourceExhausted naming `what` (e.g. "gRPC ModelInfer") when the bytes
  // in flight would then exceed the limit. Never blocks. A request larger than the limit on its
  // own is always refused.
  absl::StatusOr<Reservation> Reserve(uint64_t bytes, const char* what);

  // Adds `bytes` to `*reservation` (empty, or taken from this budget), for a request whose size
  // is learnt as it arrives (a chunked HTTP body, the JSON it parses into). On refusal, the
  // ResourceExhausted of Reserve() (naming the whole `reservation->bytes() + bytes`) and
  // `*reservation` unchanged. Never blocks.
  absl::Status Extend(Reservation* reservation, uint64_t bytes, const char* what);

  uint64_t limit() const { return limit_; }
  // Bytes reserved now (a snapshot; for tests and metrics).
  uint64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }

  // A quarter of the machine's physical memory: the default of --max-inflight-bytes.
  static uint64_t DefaultLimit();

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> in_flight_{0};
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_INFLIGHT_BUDGET_H_
