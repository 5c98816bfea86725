// Private: the observability of one admin call that changes a version's code (a patch, rollback,
// snapshot, restore or tier swap): cuvil_patches_total, the switch-latency histogram, a USDT
// probe and one log line, recorded when the call ends.
//
//   PatchEvent event(metrics_, PatchKindFromRequest(request.kind()), request.name());
//   ...  event.set_version(v); event.ExcludeMs(compile_ms);  ...
//   event.Done(functions);   // the change took effect; without it the call counts as refused
#ifndef CUVIL_SERVER_SRC_PATCH_EVENT_H_
#define CUVIL_SERVER_SRC_PATCH_EVENT_H_

#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/observability/server_metrics.h"

namespace cuvil {

// The event kind a PatchFunction request's `kind` names ("" and "ir": kIr; "recompile",
// "profile"); anything else is reported as kIr (the call refuses it).
observability::PatchKind PatchKindFromRequest(std::string_view kind);

// The functions patch `id` of `loaded` replaced, comma-separated ("" if unknown).
std::string PatchFunctions(const LoadedModel& loaded, uint64_t id);

// Not thread-safe: lives on the stack of one admin call.
class PatchEvent {
 public:
  // Starts the clock: the admin call was received. `metrics` may be null (metrics off).
  PatchEvent(observability::ServerMetrics* metrics, observability::PatchKind kind,
             std::string model);
  // For changes the server starts itself (a profile patch's automatic rollback): the clock
  // started at `start`.
  PatchEvent(observability::ServerMetrics* metrics, observability::PatchKind kind,
             std::string model, std::chrono::steady_clock::time_point start);
  // Records the event: ok if Done ran, else the Fail status's result, else refused.
  ~PatchEvent();
  PatchEvent(const PatchEvent&) = delete;
  PatchEvent& operator=(const PatchEvent&) = delete;

  // For calls that learn the model late (a restore names it inside the artifact).
  void set_model(std::string model) { model_ = std::move(model); }
  void set_version(std::string version) { version_ = std::move(version); }
  // Free text for the log line (patch id, author...).
  void set_detail(std::string detail) { detail_ = std::move(detail); }
  // Time inside the call that is not switching (the patch's own compile), in milliseconds.
  void ExcludeMs(double ms) { excluded_ms_ += ms; }
  // The change is in effect now; `functions` names what changed (for the probe and the log).
  void Done(std::string functions);
  // The call failed with `status` after it was accepted (refused for client errors).
  void Fail(const absl::Status& status);

 private:
  observability::ServerMetrics* metrics_;
  observability::PatchKind kind_;
  std::string model_;
  std::string version_;
  std::string functions_;
  std::string detail_;
  std::chrono::steady_clock::time_point start_;
  double excluded_ms_ = 0;
  double switch_ms_ = -1;  // Set by Done.
  absl::Status failure_;
  bool done_ = false;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_PATCH_EVENT_H_
