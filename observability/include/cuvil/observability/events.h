// Names for the server events counted by labelled families: why a request was rejected before a
// model version served it, and what kind of code change (patch, rollback, snapshot...) happened.
#ifndef CUVIL_OBSERVABILITY_EVENTS_H_
#define CUVIL_OBSERVABILITY_EVENTS_H_

#include <string_view>

namespace cuvil::observability {

// Why a request was refused before a model version executed it (routing or admission).
enum class RejectionReason {
  kUnknownModel,        // No model of that name was ever known.
  kUnknownVersion,      // The model has no such version.
  kInvalidVersion,      // The version is not a number.
  kVersionUnavailable,  // The named version exists but is not READY.
  kNoReadyVersion,      // No version given and none of the model's versions is READY.
  kQueueFull,           // The version's priority queue was at max_queue_size.
  kDraining,            // The version was unloading and had no compatible successor.
};
inline constexpr int kRejectionReasonCount = 7;
// "unknown_model", "no_ready_version", ... (the `reason` label value; stable).
std::string_view RejectionReasonName(RejectionReason reason);

// The kind of change an admin call made to a version's code.
enum class PatchKind { kIr, kRecompile, kProfile, kRollback, kSnapshot, kRestore, kTierSwap };
inline constexpr int kPatchKindCount = 7;
// "ir", "recompile", "profile", "rollback", "snapshot", "restore", "tier_swap".
std::string_view PatchKindName(PatchKind kind);

// How the change ended: applied, refused before anything changed (bad input or a validation
// mismatch), or failed (an internal error).
enum class PatchResult { kOk, kRefused, kFailed };
inline constexpr int kPatchResultCount = 3;
// "ok", "refused", "failed".
std::string_view PatchResultName(PatchResult result);

}  // namespace cuvil::observability

#endif  // CUVIL_OBSERVABILITY_EVENTS_H_
