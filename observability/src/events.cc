#include "cuvil/observability/events.h"

namespace cuvil::observability {

std::string_view RejectionReasonName(RejectionReason reason) {
  switch (reason) {
    case RejectionReason::kUnknownModel:
      return "unknown_model";
    case RejectionReason::kUnknownVersion:
      return "unknown_version";
    case RejectionReason::kInvalidVersion:
      return "invalid_version";
    case RejectionReason::kVersionUnavailable:
      return "version_unavailable";
    case RejectionReason::kNoReadyVersion:
      return "no_ready_version";
    case RejectionReason::kQueueFull:
      return "queue_full";
    case RejectionReason::kDraining:
      return "draining";
  }
  return "unknown";
}

std::string_view PatchKindName(PatchKind kind) {
  switch (kind) {
    case PatchKind::kIr:
      return "ir";
    case PatchKind::kRecompile:
      return "recompile";
    case PatchKind::kProfile:
      return "profile";
    case PatchKind::kRollback:
      return "rollback";
    case PatchKind::kSnapshot:
      return "snapshot";
    case PatchKind::kRestore:
      return "restore";
    case PatchKind::kTierSwap:
      return "tier_swap";
  }
  return "unknown";
}

std::string_view PatchResultName(PatchResult result) {
  switch (result) {
    case PatchResult::kOk:
      return "ok";
    case PatchResult::kRefused:
      return "refused";
    case PatchResult::kFailed:
      return "failed";
  }
  return "unknown";
}

}  // namespace cuvil::observability
