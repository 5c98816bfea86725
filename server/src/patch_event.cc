#include "patch_event.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "cuvil/observability/probes.h"
#include "spdlog/spdlog.h"

namespace cuvil {

using observability::PatchKind;
using observability::PatchResult;

PatchKind PatchKindFromRequest(std::string_view kind) {
  if (kind == "recompile") return PatchKind::kRecompile;
  if (kind == "profile") return PatchKind::kProfile;
  return PatchKind::kIr;
}

std::string PatchFunctions(const LoadedModel& loaded, uint64_t id) {
  // Patches() returns a copy: keep it alive while reading it.
  const std::vector<PatchRecord> patches = loaded.patches().Patches();
  for (const PatchRecord& p : patches) {
    if (p.id == id) return absl::StrJoin(p.functions, ",");
  }
  return "";
}

PatchEvent::PatchEvent(observability::ServerMetrics* metrics, PatchKind kind, std::string model)
    : PatchEvent(metrics, kind, std::move(model), std::chrono::steady_clock::now()) {}

PatchEvent::PatchEvent(observability::ServerMetrics* metrics, PatchKind kind, std::string model,
                       std::chrono::steady_clock::time_point start)
    : metrics_(metrics), kind_(kind), model_(std::move(model)), start_(start) {}

void PatchEvent::Done(std::string functions) {
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  switch_ms_ = std::max(0.0, elapsed_ms - excluded_ms_);
  functions_ = std::move(functions);
  done_ = true;
}

void PatchEvent::Fail(const absl::Status& status) { failure_ = status; }

PatchEvent::~PatchEvent() {
  // Errors of the caller's making (bad IR, validation mismatch, unknown patch) change nothing
  // and are refusals; anything else is the server failing.
  PatchResult result = PatchResult::kRefused;
  if (done_) {
    result = PatchResult::kOk;
  } else if (!failure_.ok()) {
    switch (failure_.code()) {
      case absl::StatusCode::kInternal:
      case absl::StatusCode::kUnknown:
      case absl::StatusCode::kDataLoss:
      case absl::StatusCode::kResourceExhausted:
        result = PatchResult::kFailed;
        break;
      default:
        break;
    }
  }
  const std::string_view kind = observability::PatchKindName(kind_);
  if (metrics_ != nullptr) {
    metrics_->RecordPatch(model_, version_, kind_, result, done_ ? switch_ms_ / 1000 : -1);
  }
  if (done_) {
    // The declared probes cover code changes; a snapshot changes nothing.
    if (kind_ == PatchKind::kRollback) {
      CUVIL_PROBE_PATCH_ROLLED_BACK(model_.c_str(), functions_.c_str());
    } else if (kind_ != PatchKind::kSnapshot) {
      CUVIL_PROBE_PATCH_APPLIED(model_.c_str(), functions_.c_str());
    }
    spdlog::info(
        "patch event: model '{}' version {} kind {} result ok ({}) functions [{}] "
        "switch {:.3f} ms",
        model_, version_, kind, detail_, functions_, switch_ms_);
  } else {
    spdlog::warn("patch event: model '{}' version {} kind {} result {}{}{}{}{}", model_,
                 version_.empty() ? "?" : version_, kind, observability::PatchResultName(result),
                 failure_.ok() ? "" : ": ", std::string(failure_.message()),
                 detail_.empty() ? "" : "; ", detail_);
  }
}

}  // namespace cuvil
