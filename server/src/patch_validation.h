// Private: how a patch is checked before it is published, and how a version's patch stack is
// carried onto a new build of the same version (reload): shared by the admin API and the loader.
#ifndef CUVIL_SERVER_SRC_PATCH_VALIDATION_H_
#define CUVIL_SERVER_SRC_PATCH_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/host_tensor.h"
#include "model_config.pb.h"

namespace cuvil {

// The author of the recompile patch a tier-up commits as the base of the stack.
inline constexpr char kTierSwapAuthor[] = "tiered-compilation";

struct PatchValidationOptions {
  double rtol = 1e-3;  // |patched - current| <= atol + rtol * |current| per element.
  double atol = 1e-5;
  bool exact = false;        // Bit equality of every output instead of the tolerance.
  int intra_op_threads = 1;  // The version's own (kernels may split work differently).
};

struct PatchValidationResult {
  int input_sets = 0;          // Input sets on which both ran and were compared.
  double max_abs_diff = 0;     // Over numeric outputs.
  std::string first_mismatch;  // Empty when every output matched.
};

// The input sets a patch of `model` is validated on, each in signature order:
// 1. the version's first warm-up sample where its config has one with generated data (zero_data:
//    zeros; random_data or a data file: deterministic values) at its batch size, else a batch-1
//    input of deterministic floats in [-1, 1), integers 0 and bools false; free dims other than
//    the batch (height, width, sequence) at the largest of 224, 128, ..., 1 the model accepts;
// 2. floats from another seed, integers 1 and bools true (an If takes its other branch, a Loop
//    with a trip count runs its body once);
// 3. floats from a third seed, integers in [0, 3] and mixed bools.
// Strings are "a", "bb", ... Thread-safe.
std::vector<std::vector<HostTensor>> PatchValidationInputs(const LoadedModel& loaded,
                                                           const inference::ModelConfig& config);

// Runs the current code and `patch`'s table of `loaded` on every set of `inputs` on which the
// current code succeeds (a generated set the model cannot take, e.g. an index out of range, is
// skipped), at `options.intra_op_threads`, and compares: output count, dtypes and shapes first,
// then strings exactly and numbers within the tolerance (bitwise with `exact`). OK with
// first_mismatch set when values differ (the caller decides whether to force); FailedPrecondition
// when the current code runs on no set, when the patched code fails where the current succeeds,
// or when an output's dtype or shape differs; Aborted (from RunWith) when the version changed
// since `patch` was prepared. Thread-safe.
absl::StatusOr<PatchValidationResult> ValidatePatch(
    const LoadedModel& loaded, const PreparedPatch* patch,
    const std::vector<std::vector<HostTensor>>& inputs, const PatchValidationOptions& options);

// Checks the table a middle rollback would publish (`trial`, from PatchController::TryRollback):
// with no active patch above the rolled-back one there is nothing to check (the table that served
// before it returns). Otherwise every patch above must have been validated (PatchCheck), and
// the stack without the patch must compute, on every set of `inputs`, what the stack before the
// patch computed, within the sum of those patches' tolerances (exact when all were exact).
// FailedPrecondition naming the unvalidated patches or the first mismatch (the caller may force);
// errors of ValidatePatch otherwise (Aborted when the version changed since the trial).
absl::StatusOr<PatchValidationResult> ValidateRollback(
    const LoadedModel& loaded, const PatchController::RollbackTrial& trial,
    const std::vector<std::vector<HostTensor>>& inputs, int intra_op_threads);

// Prepares a recompile patch of `loaded`: its model compiled again from its recorded source with
// `options_text` ("opt_level=N") for `functions` (empty: every kernel that no active IR patch
// replaces, so a recompile never masks an IR patch beneath it). InvalidArgument for bad options
// or names; FailedPrecondition when the version's source is unknown. Thread-safe.
absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareRecompileFromSource(
    LoadedModel& loaded, const std::string& options_text, std::vector<std::string> functions);

// Re-applies `records` (a version's active patches, oldest first; profile patches are skipped)
// onto `target`, a new build of the same version, each through the same checks as a new patch
// (IR check, sandbox, validation runs on `inputs`: it must run wherever the new build runs, with
// the same output dtypes and shapes; differing values are what the operator accepted when the
// patch was first applied) and keeping its id, author and time. A patch that fails them
// is left out and named in the result (the version serves without it); the rest still apply.
// Thread-safe with respect to executions of `target`.
std::vector<std::string> ReapplyPatches(LoadedModel& target,
                                        const std::vector<PatchRecord>& records,
                                        const std::vector<std::vector<HostTensor>>& inputs,
                                        const PatchValidationOptions& options);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_PATCH_VALIDATION_H_
