#include "patch_validation.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "accepted_shapes.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/code_source.h"
#include "cuvil/runtime/parallel.h"

namespace cuvil {
namespace {

// Sets the calling thread's intra-op budget for a scope.
class IntraOpScope {
 public:
  explicit IntraOpScope(int threads) : saved_(IntraOpThreads()) { SetIntraOpThreads(threads); }
  ~IntraOpScope() { SetIntraOpThreads(saved_); }

 private:
  int saved_;
};

float NextFloat(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return static_cast<float>(*state >> 8) / static_cast<float>(1 << 23) - 1.0f;
}

// The input shapes a generated set has: the batch, and every other free dim (an image's height
// and width, a sequence length) at the first of a few sizes the model accepts (its constraints
// hold and its scratch is sizable), largest first; the batch alone when none fits.
std::vector<std::vector<int64_t>> GeneratedShapes(const LoadedModel& loaded, int64_t batch) {
  const CompiledModel& model = loaded.model();
  std::vector<std::vector<int64_t>> fallback;
  for (const TensorSignature& sig : model.inputs) fallback.push_back(EvalShape(sig.shape, batch));
  if (model.InputSymbolCount() <= 1) return fallback;
  std::optional<std::vector<int64_t>> syms =
      AcceptedSymbols(loaded, batch, {224, 128, 64, 32, 16, 8, 4, 2, 1});
  if (!syms) return fallback;
  return InputShapesAt(model, *syms).value_or(fallback);
}

// One generated set (see PatchValidationInputs): `variant` 0, 1 or 2.
std::vector<HostTensor> GeneratedSet(const LoadedModel& loaded,
                                     const inference::ModelConfig& config, int variant) {
  const inference::ModelWarmup* warmup =
      config.model_warmup_size() > 0 ? &config.model_warmup(0) : nullptr;
  const int64_t batch = warmup != nullptr && warmup->batch_size() > 0 ? warmup->batch_size() : 1;
  const std::vector<std::vector<int64_t>> shapes = GeneratedShapes(loaded, batch);
  std::vector<HostTensor> inputs;
  uint32_t state = 12345u + 7919u * static_cast<uint32_t>(variant);
  for (size_t n = 0; n < loaded.model().inputs.size(); ++n) {
    const TensorSignature& sig = loaded.model().inputs[n];
    const std::vector<int64_t>& shape = shapes[n];
    if (sig.dtype == DType::kString) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<std::string> values;
      for (int64_t i = 0; i < n; ++i) values.emplace_back(static_cast<size_t>(i % 4 + 1), 'a');
      inputs.push_back(HostTensor::Strings(shape, std::move(values)));
      continue;
    }
    HostTensor t(sig.dtype, shape);
    std::memset(t.data(), 0, t.byte_size());
    bool zeros = false;
    if (warmup != nullptr && variant == 0) {
      auto it = warmup->inputs().find(sig.name);
      zeros = it != warmup->inputs().end() && it->second.zero_data();
    }
    if (!zeros) {
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        if (sig.dtype == DType::kFloat32) {
          t.data_as<float>()[i] = NextFloat(&state);
        } else if (sig.dtype == DType::kBool) {
          t.SetFromInt64(i, variant == 0 ? 0 : variant == 1 ? 1 : (NextFloat(&state) > 0));
        } else if (IsInteger(sig.dtype)) {
          if (variant == 1) {
            t.SetFromInt64(i, 1);
          } else if (variant == 2) {
            t.SetFromInt64(i, static_cast<int64_t>((NextFloat(&state) + 1.0f) * 2.0f) & 3);
          }
        }
      }
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

bool SameBits(const HostTensor& a, const HostTensor& b) {
  if (a.dtype() == DType::kString) return a.strings() == b.strings();
  return a.byte_size() == b.byte_size() && std::memcmp(a.data(), b.data(), a.byte_size()) == 0;
}

}  // namespace

std::vector<std::vector<HostTensor>> PatchValidationInputs(const LoadedModel& loaded,
                                                           const inference::ModelConfig& config) {
  std::vector<std::vector<HostTensor>> sets;
  for (int variant = 0; variant < 3; ++variant) {
    sets.push_back(GeneratedSet(loaded, config, variant));
  }
  return sets;
}

namespace {

// Runs `reference` and `candidate` (null: the current table) on every set of `inputs` on which
// the reference succeeds and compares (see ValidatePatch). `what` names the candidate in
// messages ("the patched code"), `reference_what` the reference ("the current code").
absl::StatusOr<PatchValidationResult> CompareTables(
    const LoadedModel& loaded, const PreparedPatch* reference, const PreparedPatch* candidate,
    const std::vector<std::vector<HostTensor>>& inputs, const PatchValidationOptions& options,
    const char* what, const char* reference_what) {
  IntraOpScope threads(options.intra_op_threads);
  PatchValidationResult result;
  absl::Status first_current_error = absl::OkStatus();
  const auto& outputs_sig = loaded.model().outputs;
  for (size_t set = 0; set < inputs.size(); ++set) {
    auto current = loaded.RunWith(reference, inputs[set]);
    if (absl::IsAborted(current.status())) return current.status();
    if (!current.ok()) {
      if (first_current_error.ok()) first_current_error = current.status();
      continue;  // Not an input this model takes.
    }
    auto patched = loaded.RunWith(candidate, inputs[set]);
    if (absl::IsAborted(patched.status())) return patched.status();
    if (!patched.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("validation: ", what, " fails where ", reference_what,
                       " succeeds (input set ", set + 1, "): ", patched.status().message()));
    }
    ++result.input_sets;
    if (patched->size() != current->size()) {
      return absl::FailedPreconditionError(absl::StrCat("validation: ", what, " returns ",
                                                        patched->size(), " outputs, ",
                                                        reference_what, " ", current->size()));
    }
    for (size_t o = 0; o < current->size(); ++o) {
      const HostTensor& a = (*current)[o];
      const HostTensor& b = (*patched)[o];
      const std::string name = o < outputs_sig.size() ? outputs_sig[o].name : absl::StrCat(o);
      if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "validation: output '", name, "' is ", b.TypeString(), " from ", what, " and ",
            a.TypeString(), " from ", reference_what, " (input set ", set + 1, ")"));
      }
      if (a.dtype() == DType::kString || options.exact) {
        if (!SameBits(a, b) && result.first_mismatch.empty()) {
          result.first_mismatch =
              absl::StrCat("output '", name, "' differs bitwise (input set ", set + 1, ")");
        }
        if (a.dtype() == DType::kString) continue;
      }
      for (int64_t i = 0; i < a.num_elements(); ++i) {
        const double old_v = a.GetAsDouble(i), new_v = b.GetAsDouble(i);
        const double diff = std::fabs(new_v - old_v);
        const bool nan_mismatch = std::isnan(old_v) != std::isnan(new_v);
        if (!std::isnan(diff)) result.max_abs_diff = std::max(result.max_abs_diff, diff);
        if (!options.exact &&
            (nan_mismatch || diff > options.atol + options.rtol * std::fabs(old_v)) &&
            result.first_mismatch.empty()) {
          result.first_mismatch =
              absl::StrCat("output '", name, "' element ", i, ": ", new_v, " from ", what, ", ",
                           old_v, " from ", reference_what, " (input set ", set + 1, ")");
        }
      }
    }
  }
  if (result.input_sets == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("validation: ", reference_what,
                     " fails on every validation input: ", first_current_error.message()));
  }
  return result;
}

}  // namespace

absl::StatusOr<PatchValidationResult> ValidatePatch(
    const LoadedModel& loaded, const PreparedPatch* patch,
    const std::vector<std::vector<HostTensor>>& inputs, const PatchValidationOptions& options) {
  return CompareTables(loaded, nullptr, patch, inputs, options, "the patched code",
                       "the current code");
}

absl::StatusOr<PatchValidationResult> ValidateRollback(
    const LoadedModel& loaded, const PatchController::RollbackTrial& trial,
    const std::vector<std::vector<HostTensor>>& inputs, int intra_op_threads) {
  PatchValidationResult none;
  if (trial.above.empty()) return none;  // The table that served before the patch, as it was.
  PatchValidationOptions options;
  options.intra_op_threads = intra_op_threads;
  options.exact = true;
  std::vector<std::string> unchecked;
  for (const PatchRecord& r : trial.above) {
    if (r.kind == kPatchKindProfile) continue;  // Timing wrappers compute nothing of their own.
    if (!r.check.validated) {
      unchecked.push_back(absl::StrCat(r.id));
      continue;
    }
    // Each layer above agreed with the table beneath it within its own tolerance; removing one
    // beneath them may add those differences up.
    options.exact = options.exact && r.check.exact;
    options.rtol += r.check.rtol;
    options.atol += r.check.atol;
  }
  if (!unchecked.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "patch", unchecked.size() > 1 ? "es " : " ", absl::StrJoin(unchecked, ", "), " above it ",
        unchecked.size() > 1 ? "were" : "was",
        " never validated (forced, or validation off), so nothing says what the stack without it "
        "should compute; roll back from the top, or set force"));
  }
  auto compared = CompareTables(loaded, trial.before.get(), trial.without.get(), inputs, options,
                                "the stack without the patch", "the stack before the patch");
  if (!compared.ok() || compared->first_mismatch.empty()) return compared;
  return absl::FailedPreconditionError(absl::StrCat(
      "rolling back this patch leaves the patches above it computing other outputs than the "
      "version did before it (",
      compared->first_mismatch,
      options.exact ? ", exact" : absl::StrCat(", rtol ", options.rtol, ", atol ", options.atol),
      "); roll back from the top, or set force"));
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> PrepareRecompileFromSource(
    LoadedModel& loaded, const std::string& options_text, std::vector<std::string> functions) {
  auto options = ParseRecompileOptions(options_text);
  if (!options.ok()) return options.status();
  const CodeSource* known = loaded.source();
  if (known == nullptr || (known->onnx_bytes.empty() && known->onnx_path.empty())) {
    return absl::FailedPreconditionError("the version's model source is unknown");
  }
  const CodeSource& source = *known;
  if (functions.empty()) {
    // Every kernel an active IR patch does not replace: a recompile changes the base code.
    std::set<std::string> patched;
    for (const PatchRecord& r : loaded.patches().Patches()) {
      if (r.active && r.kind == kPatchKindIr)
        patched.insert(r.functions.begin(), r.functions.end());
    }
    if (!patched.empty()) {
      for (const KernelFunction& k : loaded.model().kernels) {
        if (!patched.count(k.symbol)) functions.push_back(k.symbol);
      }
      if (functions.empty()) {
        return absl::FailedPreconditionError(
            "every kernel is replaced by an active IR patch; nothing to recompile");
      }
    }
  }
  CompileOptions compile = source.options;
  compile.opt_level = options->opt_level;
  auto recompiled = source.onnx_bytes.empty() ? CompileOnnxFile(source.onnx_path, compile)
                                              : CompileOnnxBytes(source.onnx_bytes, compile);
  if (!recompiled.ok()) return recompiled.status();
  return loaded.patches().PrepareRecompilePatch(*recompiled, functions,
                                                RecompileOptionsText(*options));
}

std::vector<std::string> ReapplyPatches(LoadedModel& target,
                                        const std::vector<PatchRecord>& records,
                                        const std::vector<std::vector<HostTensor>>& inputs,
                                        const PatchValidationOptions& options) {
  std::vector<std::string> refused;
  for (const PatchRecord& r : records) {
    // Profiles end by themselves; a tier swap belongs to the old build (the new one tiers up on
    // its own).
    if (!r.active || r.kind == kPatchKindProfile || r.author == kTierSwapAuthor) continue;
    absl::StatusOr<std::shared_ptr<PreparedPatch>> patch =
        r.kind == kPatchKindIr ? target.patches().PrepareIrPatch(
                                     r.source, r.functions,
                                     inputs.empty() ? std::vector<HostTensor>{} : inputs.front())
                               : PrepareRecompileFromSource(target, r.source, r.functions);
    absl::Status status = patch.status();
    if (status.ok()) {
      // The operator accepted what the patch computes when it was first applied (forced or
      // not): here it must run where the new build runs, with the same output shapes.
      status = ValidatePatch(target, patch->get(), inputs, options).status();
    }
    if (status.ok()) status = target.patches().CommitRestoredPatch(*std::move(patch), r).status();
    if (!status.ok()) {
      refused.push_back(
          absl::StrCat("patch ", r.id, " (", r.kind, ") was not re-applied: ", status.message()));
    }
  }
  return refused;
}

}  // namespace cuvil
