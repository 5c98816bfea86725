// Private: a server-wide bound on the bytes requests hold in memory while they are in flight,
// shared by the front ends so many concurrent large requests cannot exhaust memory together.
#ifndef CUVIL_SERVER_SRC_INFLIGHT_BUDGET_H_
#define CUVIL_SERVER_SRC_INFLIGHT_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace cuvil {

// Bytes reserved by requests in flight, against a fixed limit (0: unlimited). A request reserves
// what it holds (a gRPC ModelInfer its message's bytes) before it allocates anything for them and
// keeps the reservation until its response has gone out; a reservation that would cross the
// limit fails at once instead of waiting, so a burst of large requests is refused, not queued.
// Thread-safe; must outlive its reservations.
class InflightBudget {
 public:
  // `limit_source` says where the limit comes from, in refusals' messages ("--max-inflight-bytes",
  // or the share of it InflightBudgetSplit leaves the requests).
  explicit InflightBudget(uint64_t limit_bytes, std::string limit_source = "--max-inflight-bytes")
      : limit_(limit_bytes), limit_source_(std::move(limit_source)) {}
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
  // in flight would then exceed the limit. Never blocks. `held` is what the same work already
  // holds in other reservations of this budget and keeps while this one lives (an execution's
  // requests' inputs): `bytes` that cannot fit beside it even with nothing else in flight are
  // refused as too large ("... is larger than ..."), not as busy ("server is busy: ..."), so
  // clients are not told to retry what can never be admitted.
  absl::StatusOr<Reservation> Reserve(uint64_t bytes, const char* what, uint64_t held = 0);

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
  const std::string limit_source_;
  std::atomic<uint64_t> in_flight_{0};
};

// How --max-inflight-bytes, one total, is shared out. gRPC reads a whole message into buffers of
// its own before any handler sees it, so those buffers cannot be charged to an InflightBudget:
// they obey a grpc::ResourceQuota instead, and the InflightBudget takes what is left. The quota is
// soft — the transport reclaims after the fact — and a burst of large messages overshoots it:
// 512 ModelInfer calls of 60 MiB at once peaked at 1.7-2.5 times the quota above the idle RSS
// (quotas of 128 MiB to 512 MiB, on 2 contended vCPUs; the smaller the quota, the larger the
// factor). So half the total is set aside for gRPC's receive buffers, with a quota of a fifth of
// the total (2.5 times the quota set aside), and the other half goes to the requests' own bytes
// (decoded gRPC messages, HTTP bodies and their parsed JSON, the responses): a gRPC flood and an
// HTTP flood at once stay within the total. (With the quota at half the total and the
// InflightBudget the whole of it, both floods together reached 1.9 times the total.) gRPC
// messages are limited to half the quota, a tenth of the total: a message nearer the quota is
// sometimes reset by the transport (RST_STREAM 11) even when it arrives alone.
//
// The quota alone does not hold a flood on one connection while other connections are busy:
// gRPC reads every ModelInfer message whole as soon as its stream opens, and each of the quota's
// reclamation sweeps cancels one stream of one connection, in turn, so sweeps spent on the small
// calls of other clients let the flood's streams pile up (512 calls of 60 MiB on one connection,
// with health checks and mlp calls on another: 1.0-1.5 GB above the idle RSS at a 1 GiB total).
// So a connection may have only as many streams open as fill half the set-aside with messages
// of the largest size, at least 4 and at most 128 (4 at 1 GiB and 64 MiB messages: that flood
// then peaked 0.3 GB above idle; 8 streams: 0.63 GB); --grpc-max-streams-per-connection
// overrides it, for clients that keep many streams open on one connection. Plain data.
struct InflightBudgetSplit {
  uint64_t total = 0;  // --max-inflight-bytes; 0: unlimited (no quota, no limit).
  // gRPC's receive buffers: its ResourceQuota (total / 5), and the bytes set aside for them
  // (total / 2).
  uint64_t grpc_quota = 0;
  uint64_t grpc_set_aside = 0;
  // The InflightBudget's limit: total - grpc_set_aside (0 with total 0: unlimited).
  uint64_t requests = 0;
  // The largest gRPC message the server takes: --max-request-bytes, lowered to half the quota
  // when that is smaller (grpc_message_lowered then says so).
  uint64_t grpc_max_message = 0;
  bool grpc_message_lowered = false;
  // Streams one gRPC connection may have open at once (0 with total 0: gRPC's default).
  int grpc_streams_per_connection = 0;
  // HTTP bodies (and gRPC messages) above `requests` can never be admitted: true when
  // --max-request-bytes allows such requests.
  bool requests_below_max_request = false;
};

// Shares `total` (--max-inflight-bytes; 0: unlimited) out for requests of at most
// `max_request_bytes` (--max-request-bytes).
InflightBudgetSplit SplitInflightBudget(uint64_t total, uint64_t max_request_bytes);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_INFLIGHT_BUDGET_H_
