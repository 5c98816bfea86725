#include "admin_operations.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/kernel_precision.h"
#include "cuvil/jitcache/code_source.h"
#include "cuvil/server/model_config.h"
#include "google/protobuf/text_format.h"
#include "load_parameters.h"
#include "model_name.h"
#include "patch_event.h"
#include "patch_validation.h"
#include "sequence_batcher.h"
#include "spdlog/spdlog.h"

namespace cuvil {
namespace {

// Compares without an early exit so timing does not reveal how much of a token matched.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

absl::Status AdminOperations::Authorize(const std::string& authorization) const {
  if (token_.empty()) return absl::OkStatus();
  constexpr char kPrefix[] = "Bearer ";
  if (!absl::StartsWith(authorization, kPrefix) ||
      !ConstantTimeEquals(authorization.substr(sizeof(kPrefix) - 1), token_)) {
    return absl::UnauthenticatedError("this call needs 'authorization: Bearer <admin token>'");
  }
  return absl::OkStatus();
}

absl::Status AdminOperations::AuthorizeNativeCode(const char* what) const {
  if (!token_.empty() || insecure_admin_) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what,
      " runs or reveals native code in the server, which any local user could then do: start "
      "the server with --admin-token-file (and send 'authorization: Bearer <token>'), or with "
      "--insecure-admin on a development machine"));
}

absl::StatusOr<cuvil::admin::v1::LoadModelResponse> AdminOperations::LoadModel(
    const cuvil::admin::v1::LoadModelRequest& request) {
  if (request.version() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("version must be positive (0: version 1), got ", request.version()));
  }
  // The inline model goes through Triton's load-parameter parser so the name and file rules are
  // the same as for RepositoryModelLoad.
  LoadParametersInput input;
  input.model_name = request.name();
  if (!request.onnx_model().empty()) {
    const int64_t version = request.version() > 0 ? request.version() : 1;
    LoadParameter& file = input.parameters.emplace_back();
    file.key = absl::StrCat("file:", version, "/model.onnx");
    file.type = LoadParameter::Type::kBytes;
    file.value = request.onnx_model();
  }
  absl::StatusOr<LoadRequest> load = ParseLoadParameters(input);
  if (!load.ok()) return load.status();
  load->config_pbtxt = request.config_pbtxt();
  load->wait = request.wait();
  if (auto s = models_->Load(*load); !s.ok()) return s;
  cuvil::admin::v1::LoadModelResponse response;
  response.set_name(request.name());
  for (const VersionStatus& v : models_->Versions(request.name())) response.add_versions(v.version);
  return response;
}

absl::Status AdminOperations::UnloadModel(const cuvil::admin::v1::UnloadModelRequest& request) {
  if (absl::Status s = ValidateModelName(request.name()); !s.ok()) return s;
  if (request.version() != 0) {
    return absl::UnimplementedError(
        "unloading a single version is not supported; unload the model");
  }
  return models_->Unload(request.name());
}

cuvil::admin::v1::ListModelsResponse AdminOperations::ListModels() const {
  cuvil::admin::v1::ListModelsResponse response;
  for (const VersionStatus& v : models_->Index()) {
    auto* m = response.add_models();
    m->set_name(v.name);
    m->set_version(v.version);
    m->set_state(ModelStateName(v.state));
    m->set_reason(v.reason);
    if (v.model) {
      const CompiledModel& compiled = v.model->loaded().model();
      m->set_namespace_(v.model->loaded().namespace_name());
      m->set_compile_ms(v.model->compile_ms());
      m->set_weights_bytes(v.model->loaded().weights_bytes());
      m->set_code_bytes(compiled.object_code.size());
      m->set_arena_bytes_per_batch(compiled.arena.per_batch_bytes);
      m->set_cuvil_precision(PrecisionSummary(compiled.kernels));
    }
  }
  return response;
}

absl::StatusOr<cuvil::admin::v1::ListFunctionsResponse> AdminOperations::ListFunctions(
    const cuvil::admin::v1::ListFunctionsRequest& request) const {
  auto model =
      models_->Get(request.name(), request.version() > 0 ? absl::StrCat(request.version()) : "");
  if (!model.ok()) return model.status();
  cuvil::admin::v1::ListFunctionsResponse response;
  const std::vector<KernelFunction>& kernels = (*model)->loaded().model().kernels;
  for (const KernelFunction& k : kernels) {
    auto* f = response.add_functions();
    if (k.parent >= 0 && static_cast<size_t>(k.parent) < kernels.size()) {
      f->set_parent(kernels[k.parent].symbol);
    }
    f->set_index(k.index);
    f->set_symbol(k.symbol);
    f->set_op_type(k.op_type);
    f->set_node_name(k.node_name);
    f->set_signature(k.signature);
    f->set_precision(KernelPrecision(k));
  }
  return response;
}

namespace {

absl::StatusOr<uint64_t> ParsePatchId(const std::string& text) {
  uint64_t id = 0;
  if (!absl::SimpleAtoi(text, &id) || id == 0) {
    return absl::InvalidArgumentError(absl::StrCat("patch_id '", text, "' is not a patch id"));
  }
  return id;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void FillProfile(const std::vector<KernelProfile>& table,
                 google::protobuf::RepeatedPtrField<cuvil::admin::v1::KernelProfile>* out) {
  for (const KernelProfile& k : table) {
    auto* row = out->Add();
    row->set_function(k.function);
    row->set_calls(k.calls);
    row->set_total_ns(k.total_ns);
    row->set_mean_ns(k.mean_ns);
    row->set_share(k.share);
  }
}

// How long a patch call waits for an earlier patch of the same version to finish, and how many
// times it prepares again when a rollback or tier swap moved the table on under it.
constexpr std::chrono::seconds kPatchQueueWait{60};
constexpr int kPatchAttempts = 8;

// Compiles the patch a request asks for into a new, unpublished layer of `loaded`; an IR patch
// is compiled and first run on each set of `probes` in the sandbox.
absl::StatusOr<std::shared_ptr<PreparedPatch>> PreparePatch(
    LoadedModel& loaded, const std::string& kind,
    const cuvil::admin::v1::PatchFunctionRequest& request,
    const std::vector<std::string>& functions, const std::vector<std::vector<HostTensor>>& probes) {
  if (kind == kPatchKindProfile) {
    return loaded.patches().PrepareProfilePatch(request.profile_seconds(), functions);
  }
  if (kind == kPatchKindIr)
    return loaded.patches().PrepareIrPatchOnSets(request.body(), functions, probes);
  return PrepareRecompileFromSource(
      loaded, request.options().empty() ? request.body() : request.options(), functions);
}

// With --snapshot-dir, records the version's new state now (the watcher would a moment later).
void SyncSnapshot(SnapshotStore* store, const ModelVersion& version) {
  if (store == nullptr) return;
  if (absl::Status s = store->Sync(version); !s.ok()) {
    spdlog::warn("{}", std::string(s.message()));
  }
}

}  // namespace

absl::StatusOr<cuvil::admin::v1::PatchFunctionResponse> AdminOperations::PatchFunction(
    const cuvil::admin::v1::PatchFunctionRequest& request) {
  PatchEvent event(metrics_, PatchKindFromRequest(request.kind()), request.name());
  if (absl::Status s = ValidateModelName(request.name()); !s.ok()) return s;
  const std::string kind = request.kind().empty() ? kPatchKindIr : request.kind();
  if (kind != kPatchKindIr && kind != kPatchKindRecompile && kind != kPatchKindProfile) {
    return absl::InvalidArgumentError(absl::StrCat(
        "patch kind '", request.kind(), "' is not supported (\"ir\", \"recompile\", \"profile\")"));
  }
  if (kind == kPatchKindIr && request.body().empty()) {
    return absl::InvalidArgumentError("the patch body is empty");
  }
  if (kind == kPatchKindIr) {
    if (absl::Status s = AuthorizeNativeCode("an IR patch"); !s.ok()) return s;
  }
  auto model =
      models_->Get(request.name(), request.version() > 0 ? absl::StrCat(request.version()) : "");
  if (!model.ok()) return model.status();
  event.set_version((*model)->version_string());
  LoadedModel& loaded = (*model)->mutable_loaded();
  std::vector<std::string> functions(request.functions().begin(), request.functions().end());
  if (!request.function().empty()) functions.push_back(request.function());

  PatchValidationOptions validation;
  validation.rtol = request.has_rtol() ? request.rtol() : 1e-3;
  validation.atol = request.has_atol() ? request.atol() : 1e-5;
  validation.exact = request.exact();
  validation.intra_op_threads = SchedulerOptionsFromConfig((*model)->config()).intra_op_threads;
  // Generated sets first, then requests the version served (branches real data takes).
  std::vector<std::vector<HostTensor>> inputs = PatchValidationInputs(loaded, (*model)->config());
  for (std::vector<HostTensor>& served : (*model)->RecentRequests()) {
    inputs.push_back(std::move(served));
  }
  cuvil::admin::v1::PatchFunctionResponse response;
  // Patches of one version queue here rather than race each other to commit.
  absl::Mutex& queue = (*model)->patch_operation_mu();
  const auto queue_deadline = std::chrono::steady_clock::now() + kPatchQueueWait;
  while (!queue.TryLock()) {
    if (std::chrono::steady_clock::now() >= queue_deadline) {
      absl::Status busy = absl::AbortedError(absl::StrCat(
          "another patch of ", request.name(), " version ", (*model)->version_string(),
          " has been preparing for more than ", kPatchQueueWait.count(), " s; try again"));
      event.Fail(busy);
      return busy;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  bool queue_held = true;
  absl::Cleanup leave_queue = [&queue, &queue_held] {
    if (queue_held) queue.Unlock();
  };
  absl::StatusOr<uint64_t> id = absl::AbortedError("not committed");
  // A rollback, a profile window's end or a tier swap between preparing and committing moves
  // the table on (Aborted): prepare against the new one, a few times.
  for (int attempt = 0; attempt < kPatchAttempts && absl::IsAborted(id.status()); ++attempt) {
    auto t0 = std::chrono::steady_clock::now();
    auto patch = PreparePatch(loaded, kind, request, functions, inputs);
    if (absl::IsAborted(patch.status())) {
      id = patch.status();
      continue;
    }
    if (!patch.ok()) return patch.status();
    response.set_compile_ms(MsSince(t0));
    event.ExcludeMs(response.compile_ms());
    PatchCheck check;
    if (!request.has_validate() || request.validate()) {
      auto checked = ValidatePatch(loaded, patch->get(), inputs, validation);
      if (absl::IsAborted(checked.status())) {
        id = checked.status();
        continue;
      }
      if (!checked.ok()) return checked.status();
      response.set_max_abs_diff(checked->max_abs_diff);
      if (!checked->first_mismatch.empty() && !request.force()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "validation: the patched code computes other outputs (", checked->first_mismatch,
            validation.exact ? ", exact"
                             : absl::StrCat(", rtol ", validation.rtol, ", atol ", validation.atol),
            "); set force to apply it anyway"));
      }
      // Equal outputs say nothing about a kernel that never ran (a branch no input takes).
      std::vector<std::string> idle;
      for (const auto& [kernel, calls] : PatchController::ProbeCalls(**patch)) {
        if (calls == 0) idle.push_back(kernel);
      }
      if (!idle.empty() && !request.force()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "validation: the patched kernel", idle.size() > 1 ? "s " : " ",
            absl::StrJoin(idle, ", "), " never ran", " on the ", inputs.size(),
            " validation input sets, so nothing checked it; set force to apply it anyway"));
      }
      check.validated = checked->first_mismatch.empty() && idle.empty();
      check.exact = validation.exact;
      check.rtol = validation.exact ? 0 : validation.rtol;
      check.atol = validation.exact ? 0 : validation.atol;
    }
    t0 = std::chrono::steady_clock::now();
    id = loaded.patches().CommitPatch(*patch, request.author(), check);
    response.set_switch_us(MsSince(t0) * 1000);
  }
  if (!id.ok()) {
    event.Fail(id.status());
    return id.status();
  }
  response.set_patch_id(absl::StrCat(*id));
  // Keep the history alive: a range-for over a member of a temporary would dangle.
  const std::vector<PatchRecord> patches = loaded.patches().Patches();
  if (!patches.empty()) {
    for (const auto& f : patches.back().functions) response.add_functions(f);
  }
  event.set_detail(absl::StrCat("patch ", *id, " (", kind, "), author '", request.author(),
                                "', compile ", response.compile_ms(), " ms"));
  event.Done(absl::StrJoin(response.functions(), ","));
  SyncSnapshot(snapshots_, **model);
  queue.Unlock();  // The next patch may prepare while this one's profile window runs.
  queue_held = false;
  if (kind == kPatchKindProfile && request.wait()) {
    // The window plus slack: the timer rolls the patch back at the end of it.
    loaded.patches().WaitForProfileEnd(*id, request.profile_seconds() + 30);
    auto table = loaded.patches().ProfileReport(*id);
    if (table.ok()) FillProfile(*table, response.mutable_profile());
  }
  return response;
}

absl::Status AdminOperations::ReloadVersion(const ModelVersion& version) {
  LoadRequest request;
  request.name = version.name();
  request.wait = true;
  // This version only, with the config it serves under; its other versions are left alone. The
  // old build is known to be stuck: retired at once (its stuck requests answered UNAVAILABLE).
  request.only_version = version.version();
  request.retire_timeout = absl::ZeroDuration();
  const CodeSource* source = version.loaded().source();
  // An inline model: its bytes; a repository model reloads the version's file from its folder.
  if (source != nullptr && !source->onnx_bytes.empty()) {
    request.model_bytes[version.version()] = source->onnx_bytes;
  }
  if (!google::protobuf::TextFormat::PrintToString(version.config(), &request.config_pbtxt)) {
    return absl::InternalError("cannot print the version's config");
  }
  return models_->Load(request);
}

absl::StatusOr<cuvil::admin::v1::RollbackResponse> AdminOperations::Rollback(
    const cuvil::admin::v1::RollbackRequest& request) {
  PatchEvent event(metrics_, observability::PatchKind::kRollback, request.name());
  if (absl::Status s = ValidateModelName(request.name()); !s.ok()) return s;
  auto id = ParsePatchId(request.patch_id());
  if (!id.ok()) return id.status();
  auto model =
      models_->Get(request.name(), request.version() > 0 ? absl::StrCat(request.version()) : "");
  if (!model.ok()) return model.status();
  event.set_version((*model)->version_string());
  LoadedModel& loaded = (*model)->mutable_loaded();
  cuvil::admin::v1::RollbackResponse response;
  absl::Status rolled = absl::AbortedError("not rolled back");
  // A patch committed or rolled back between the trial and the rollback moves the table on
  // (Aborted): try the new one, a few times.
  for (int attempt = 0; attempt < kPatchAttempts && absl::IsAborted(rolled); ++attempt) {
    std::optional<PatchController::RollbackTrial> trial;
    if (!request.force()) {
      auto tried = loaded.patches().TryRollback(*id);
      if (!tried.ok()) {
        event.Fail(tried.status());
        return tried.status();
      }
      if (!tried->above.empty()) {
        // The layers above it never ran on the table beneath it without it.
        std::vector<std::vector<HostTensor>> inputs =
            PatchValidationInputs(loaded, (*model)->config());
        for (std::vector<HostTensor>& served : (*model)->RecentRequests()) {
          inputs.push_back(std::move(served));
        }
        auto checked =
            ValidateRollback(loaded, *tried, inputs,
                             SchedulerOptionsFromConfig((*model)->config()).intra_op_threads);
        if (absl::IsAborted(checked.status())) {
          rolled = checked.status();
          continue;
        }
        if (!checked.ok()) {
          event.Fail(checked.status());
          return checked.status();
        }
        response.set_validated_sets(checked->input_sets);
        response.set_max_abs_diff(checked->max_abs_diff);
      }
      trial = *std::move(tried);
    }
    auto t0 = std::chrono::steady_clock::now();
    rolled = loaded.patches().Rollback(*id, 10, trial ? &*trial : nullptr);
    response.set_switch_us(MsSince(t0) * 1000);
  }
  const bool stuck = absl::IsDeadlineExceeded(rolled) ||
                     (absl::IsFailedPrecondition(rolled) && loaded.patches().has_stuck_code());
  if (stuck && request.force()) {
    // Executions stuck in the code: serve from a fresh build of the version (its remaining
    // patches come along); the old build stays alive for the stuck executions only.
    SyncSnapshot(snapshots_, **model);
    absl::Status reloaded = ReloadVersion(**model);
    if (!reloaded.ok()) {
      absl::Status failed = absl::Status(
          reloaded.code(),
          absl::StrCat(rolled.message(), "; retiring the version failed: ", reloaded.message()));
      event.Fail(failed);
      return failed;
    }
    spdlog::warn("model '{}' version {}: {}; the version was retired and loaded again",
                 request.name(), (*model)->version_string(), std::string(rolled.message()));
    response.set_retired(true);
    rolled = absl::OkStatus();
  }
  if (!rolled.ok()) {
    if (stuck) {
      rolled =
          absl::Status(rolled.code(),
                       absl::StrCat(rolled.message(),
                                    "; roll it back again with force to retire the version (a "
                                    "fresh build serves; the stuck executions keep the old one)"));
    }
    event.Fail(rolled);
    // Stuck executions keep the code alive, but the rollback itself took effect: record it.
    if (absl::IsDeadlineExceeded(rolled)) SyncSnapshot(snapshots_, **model);
    return rolled;
  }
  event.set_detail(absl::StrCat("patch ", *id));
  event.Done(PatchFunctions((*model)->loaded(), *id));
  SyncSnapshot(snapshots_, **model);
  return response;
}

absl::StatusOr<cuvil::admin::v1::ListPatchesResponse> AdminOperations::ListPatches(
    const cuvil::admin::v1::ListPatchesRequest& request) const {
  auto model =
      models_->Get(request.name(), request.version() > 0 ? absl::StrCat(request.version()) : "");
  if (!model.ok()) return model.status();
  cuvil::admin::v1::ListPatchesResponse response;
  for (const PatchRecord& r : (*model)->loaded().patches().Patches()) {
    auto* p = response.add_patches();
    p->set_patch_id(absl::StrCat(r.id));
    p->set_unix_ms(r.unix_ms);
    p->set_kind(r.kind);
    for (const auto& f : r.functions) p->add_functions(f);
    p->set_author(r.author);
    p->set_active(r.active);
    p->set_rolled_back_unix_ms(r.rolled_back_unix_ms);
    p->set_validated(r.check.validated);
    if (r.kind != kPatchKindIr) p->set_options(r.source);
    FillProfile(r.profile, p->mutable_profile());
  }
  return response;
}

absl::StatusOr<cuvil::admin::v1::SnapshotResponse> AdminOperations::Snapshot(
    const cuvil::admin::v1::SnapshotRequest& request) {
  PatchEvent event(metrics_, observability::PatchKind::kSnapshot, request.name());
  if (absl::Status s = ValidateModelName(request.name()); !s.ok()) return s;
  if (absl::Status s = AuthorizeNativeCode("a snapshot"); !s.ok()) return s;
  auto model =
      models_->Get(request.name(), request.version() > 0 ? absl::StrCat(request.version()) : "");
  if (!model.ok()) return model.status();
  event.set_version((*model)->version_string());
  auto artifact = SnapshotVersion(**model);
  if (!artifact.ok()) {
    event.Fail(artifact.status());
    return artifact.status();
  }
  cuvil::admin::v1::SnapshotResponse response;
  response.set_snapshot(*std::move(artifact));
  response.set_version((*model)->version());
  event.set_detail(absl::StrCat(response.snapshot().size(), " bytes"));
  event.Done("");
  return response;
}

absl::StatusOr<cuvil::admin::v1::RestoreSnapshotResponse> AdminOperations::RestoreSnapshot(
    const cuvil::admin::v1::RestoreSnapshotRequest& request) {
  PatchEvent event(metrics_, observability::PatchKind::kRestore, "");
  if (absl::Status s = AuthorizeNativeCode("a snapshot restore"); !s.ok()) return s;
  auto restored = RestoreSnapshots(models_, {request.snapshot()}, max_snapshot_bytes_);
  if (!restored.ok()) {
    event.Fail(restored.status());
    return restored.status();
  }
  cuvil::admin::v1::RestoreSnapshotResponse response = std::move(restored->front());
  event.set_model(response.name());
  event.set_version(absl::StrCat(response.version()));
  event.Done("");
  if (auto model = models_->Get(response.name(), absl::StrCat(response.version())); model.ok()) {
    SyncSnapshot(snapshots_, **model);
  }
  return response;
}

namespace {

// The version of `name` a sequence call addresses (0: the highest READY one), refused when it
// does not use sequence batching.
absl::StatusOr<std::shared_ptr<ModelVersion>> SequenceModel(const ModelManager& models,
                                                            const std::string& name,
                                                            int64_t version) {
  if (absl::Status s = ValidateModelName(name); !s.ok()) return s;
  if (version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("version must be positive, got ", version));
  }
  auto model = models.Get(name, version > 0 ? absl::StrCat(version) : "");
  if (!model.ok()) return model.status();
  if ((*model)->sequences() == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", name, "' does not use sequence_batching: it has no sequences"));
  }
  return model;
}

}  // namespace

absl::StatusOr<cuvil::admin::v1::ListSequencesResponse> AdminOperations::ListSequences(
    const cuvil::admin::v1::ListSequencesRequest& request) const {
  if (!request.name().empty()) {
    auto model = SequenceModel(*models_, request.name(), request.version());
    if (!model.ok()) return model.status();
  }
  cuvil::admin::v1::ListSequencesResponse response;
  for (const VersionStatus& v : models_->Index()) {
    if (!request.name().empty() && v.name != request.name()) continue;
    if (request.version() > 0 && v.version != request.version()) continue;
    if (v.model == nullptr || v.model->sequences() == nullptr) continue;
    std::vector<SequenceBatcher::SequenceInfo> open = v.model->sequences()->List();
    std::sort(open.begin(), open.end(), [](const auto& a, const auto& b) {
      return std::make_tuple(!a.string_id.empty(), a.id, a.string_id) <
             std::make_tuple(!b.string_id.empty(), b.id, b.string_id);
    });
    for (const SequenceBatcher::SequenceInfo& s : open) {
      auto* out = response.add_sequences();
      out->set_model(v.name);
      out->set_version(v.version);
      out->set_sequence_id(s.id);
      out->set_string_sequence_id(s.string_id);
      out->set_steps(s.steps);
      out->set_checkpoint_step(s.checkpoint_step);
      out->set_state_bytes(s.state_bytes);
      out->set_idle_seconds(s.idle_seconds);
      out->set_pending_steps(s.pending_steps);
      out->set_running(s.running);
    }
  }
  return response;
}

absl::StatusOr<cuvil::admin::v1::EndSequenceResponse> AdminOperations::EndSequence(
    const cuvil::admin::v1::EndSequenceRequest& request) {
  if ((request.sequence_id() == 0) == request.string_sequence_id().empty()) {
    return absl::InvalidArgumentError(
        "name the sequence with exactly one of sequence_id (non-zero) or string_sequence_id");
  }
  auto model = SequenceModel(*models_, request.name(), request.version());
  if (!model.ok()) return model.status();
  int64_t refused = 0;
  absl::StatusOr<uint64_t> steps =
      (*model)->sequences()->End(request.sequence_id(), request.string_sequence_id(), &refused);
  if (!steps.ok()) return steps.status();
  cuvil::admin::v1::EndSequenceResponse response;
  response.set_steps(*steps);
  response.set_refused_steps(refused);
  return response;
}

}  // namespace cuvil
