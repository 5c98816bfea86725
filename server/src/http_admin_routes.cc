#include "http_admin_routes.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "http_infer_decode.h"
#include "http_response.h"
#include "nlohmann/json.hpp"

namespace cuvil {

using json = nlohmann::json;
using http_request::BoolField;
using http_request::IntField;
using http_request::ParseBody;
using http_request::StringField;
using http_response::SetError;
using http_response::SetJson;
using httplib::Response;

namespace {

// The {v} of a .../versions/{v}/... route; false after answering 400 when it is not a number.
bool VersionNumber(const std::string& text, Response& res, int64_t* version) {
  if (absl::SimpleAtoi(text, version)) return true;
  SetError(res, 400, absl::StrCat("version '", text, "' is not a number"));
  return false;
}

}  // namespace

bool HttpAdminRoutes::HandleGet(const std::vector<std::string>& p, Response& res) {
  const size_t n = p.size();
  if (n == 2 && p[0] == "admin" && p[1] == "sequences") {
    ListSequences(res, "", 0);
    return true;
  }
  if (n < 2 || p[0] != "admin" || p[1] != "models") return false;
  if (n == 2) {
    ListModels(res);
    return true;
  }
  if (n == 4 && p[3] == "sequences") {
    ListSequences(res, p[2], 0);
    return true;
  }
  if (n != 6 || p[3] != "versions" ||
      (p[5] != "functions" && p[5] != "patches" && p[5] != "sequences")) {
    return false;
  }
  int64_t version = 0;
  if (!VersionNumber(p[4], res, &version)) return true;
  if (p[5] == "functions") {
    ListFunctions(res, p[2], version);
  } else if (p[5] == "patches") {
    ListPatches(res, p[2], version);
  } else {
    ListSequences(res, p[2], version);
  }
  return true;
}

bool HttpAdminRoutes::HandlePost(const std::vector<std::string>& p, const std::string& body,
                                 Response& res) {
  const size_t n = p.size();
  if (n < 3 || p[0] != "admin") return false;
  if (p[1] == "models") {
    if (n == 3 && p[2] == "load") {
      Load(res, body);
      return true;
    }
    if (n == 4 && p[3] == "unload") {
      Unload(res, body, p[2]);
      return true;
    }
    if (n == 5 && p[3] == "sequences" && p[4] == "end") {
      EndSequence(res, body, p[2]);
      return true;
    }
    if (n == 6 && p[3] == "versions" &&
        (p[5] == "patch" || p[5] == "rollback" || p[5] == "snapshot")) {
      int64_t version = 0;
      if (!VersionNumber(p[4], res, &version)) return true;
      if (p[5] == "patch") {
        Patch(res, body, p[2], version);
      } else if (p[5] == "rollback") {
        Rollback(res, body, p[2], version);
      } else {
        Snapshot(res, p[2], version);
      }
      return true;
    }
  }
  if (n == 3 && p[1] == "snapshots" && p[2] == "restore") {
    Restore(res, body);
    return true;
  }
  return false;
}

void HttpAdminRoutes::Load(Response& res, const std::string& body) {
  absl::StatusOr<json> parsed = ParseBody(body);
  if (!parsed.ok()) return SetError(res, parsed.status());
  cuvil::admin::v1::LoadModelRequest request;
  absl::StatusOr<std::string> name = StringField(*parsed, "name");
  absl::StatusOr<std::string> config = StringField(*parsed, "config_pbtxt");
  absl::StatusOr<std::string> onnx = StringField(*parsed, "onnx_model_base64");
  absl::StatusOr<int64_t> version = IntField(*parsed, "version", 0);
  absl::StatusOr<bool> wait = BoolField(*parsed, "wait", true);  // HTTP callers expect an outcome.
  for (const absl::Status& s :
       {name.status(), config.status(), onnx.status(), version.status(), wait.status()}) {
    if (!s.ok()) return SetError(res, s);
  }
  if (name->empty()) return SetError(res, 400, "'name' is required");
  request.set_name(*name);
  request.set_config_pbtxt(*config);
  if (!onnx->empty()) {
    std::string bytes;
    if (!absl::Base64Unescape(*onnx, &bytes)) {
      return SetError(res, 400, "'onnx_model_base64' is not valid base64");
    }
    request.set_onnx_model(std::move(bytes));
  }
  request.set_version(*version);
  request.set_wait(*wait);
  absl::StatusOr<cuvil::admin::v1::LoadModelResponse> loaded = admin_->LoadModel(request);
  if (!loaded.ok()) return SetError(res, loaded.status());
  json versions = json::array();
  for (int64_t v : loaded->versions()) versions.push_back(v);
  SetJson(res, 200, json{{"name", loaded->name()}, {"versions", std::move(versions)}});
}

void HttpAdminRoutes::Unload(Response& res, const std::string& body, const std::string& name) {
  absl::StatusOr<json> parsed = ParseBody(body);
  if (!parsed.ok()) return SetError(res, parsed.status());
  absl::StatusOr<int64_t> version = IntField(*parsed, "version", 0);
  if (!version.ok()) return SetError(res, version.status());
  cuvil::admin::v1::UnloadModelRequest request;
  request.set_name(name);
  request.set_version(*version);
  absl::Status s = admin_->UnloadModel(request);
  if (!s.ok()) return SetError(res, s);
  SetJson(res, 200, json::object());
}

void HttpAdminRoutes::ListModels(Response& res) {
  cuvil::admin::v1::ListModelsResponse list = admin_->ListModels();
  json models = json::array();
  for (const auto& m : list.models()) {
    models.push_back({{"name", m.name()},
                      {"version", m.version()},
                      {"state", m.state()},
                      {"reason", m.reason()},
                      {"namespace", m.namespace_()},
                      {"compile_ms", m.compile_ms()},
                      {"weights_bytes", m.weights_bytes()},
                      {"code_bytes", m.code_bytes()},
                      {"arena_bytes_per_batch", m.arena_bytes_per_batch()},
                      {"cuvil_precision", m.cuvil_precision()}});
  }
  SetJson(res, 200, json{{"models", std::move(models)}});
}

void HttpAdminRoutes::ListFunctions(Response& res, const std::string& name, int64_t version) {
  cuvil::admin::v1::ListFunctionsRequest request;
  request.set_name(name);
  request.set_version(version);
  absl::StatusOr<cuvil::admin::v1::ListFunctionsResponse> list = admin_->ListFunctions(request);
  if (!list.ok()) return SetError(res, list.status());
  json functions = json::array();
  for (const auto& f : list->functions()) {
    functions.push_back({{"index", f.index()},
                         {"symbol", f.symbol()},
                         {"op_type", f.op_type()},
                         {"node_name", f.node_name()},
                         {"signature", f.signature()},
                         {"precision", f.precision()},
                         {"parent", f.parent()}});
  }
  SetJson(res, 200, json{{"functions", std::move(functions)}});
}

namespace {

// A profile table as JSON rows.
json ProfileJson(const google::protobuf::RepeatedPtrField<cuvil::admin::v1::KernelProfile>& table) {
  json rows = json::array();
  for (const auto& k : table) {
    rows.push_back({{"function", k.function()},
                    {"calls", k.calls()},
                    {"total_ns", k.total_ns()},
                    {"mean_ns", k.mean_ns()},
                    {"share", k.share()}});
  }
  return rows;
}

}  // namespace

// POST .../versions/{v}/patch {"kind"?: "ir"|"recompile"|"profile", "ir": TEXT (ir),
// "options"?: "opt_level=N" (recompile), "profile_seconds"?: x, "wait"?: bool (profile),
// "function"?: SYMBOL, "functions"?: [..], "validate"?: bool, "force"?: bool, "rtol"?: x,
// "atol"?: x, "exact"?: bool, "author"?: NAME}
void HttpAdminRoutes::Patch(Response& res, const std::string& body, const std::string& name,
                            int64_t version) {
  absl::StatusOr<json> parsed = ParseBody(body);
  if (!parsed.ok()) return SetError(res, parsed.status());
  absl::StatusOr<std::string> ir = StringField(*parsed, "ir");
  absl::StatusOr<std::string> function = StringField(*parsed, "function");
  absl::StatusOr<std::string> author = StringField(*parsed, "author");
  absl::StatusOr<std::string> kind = StringField(*parsed, "kind");
  absl::StatusOr<bool> validate = BoolField(*parsed, "validate", true);
  absl::StatusOr<bool> force = BoolField(*parsed, "force", false);
  absl::StatusOr<std::string> options = StringField(*parsed, "options");
  absl::StatusOr<bool> wait = BoolField(*parsed, "wait", false);
  absl::StatusOr<bool> exact = BoolField(*parsed, "exact", false);
  for (const absl::Status& s :
       {ir.status(), function.status(), author.status(), kind.status(), validate.status(),
        force.status(), options.status(), wait.status(), exact.status()}) {
    if (!s.ok()) return SetError(res, s);
  }
  cuvil::admin::v1::PatchFunctionRequest request;
  request.set_name(name);
  request.set_version(version);
  request.set_body(*ir);
  request.set_function(*function);
  request.set_author(*author);
  request.set_kind(*kind);
  request.set_validate(*validate);
  request.set_force(*force);
  request.set_options(*options);
  request.set_wait(*wait);
  request.set_exact(*exact);
  if (parsed->contains("profile_seconds")) {
    const json& x = (*parsed)["profile_seconds"];
    if (!x.is_number() || x.get<double>() < 0) {
      return SetError(res, 400, "'profile_seconds' must be a non-negative number");
    }
    request.set_profile_seconds(x.get<double>());
  }
  if (parsed->contains("functions")) {
    const json& fs = (*parsed)["functions"];
    if (!fs.is_array()) return SetError(res, 400, "'functions' must be an array of strings");
    for (const json& f : fs) {
      if (!f.is_string()) return SetError(res, 400, "'functions' must be an array of strings");
      request.add_functions(f.get<std::string>());
    }
  }
  for (const char* key : {"rtol", "atol"}) {
    if (!parsed->contains(key)) continue;
    const json& x = (*parsed)[key];
    if (!x.is_number() || x.get<double>() < 0) {
      return SetError(res, 400, absl::StrCat("'", key, "' must be a non-negative number"));
    }
    if (std::string_view(key) == "rtol") {
      request.set_rtol(x.get<double>());
    } else {
      request.set_atol(x.get<double>());
    }
  }
  auto out = admin_->PatchFunction(request);
  if (!out.ok()) return SetError(res, out.status());
  json functions = json::array();
  for (const auto& f : out->functions()) functions.push_back(f);
  SetJson(res, 200,
          json{{"patch_id", out->patch_id()},
               {"functions", std::move(functions)},
               {"max_abs_diff", out->max_abs_diff()},
               {"compile_ms", out->compile_ms()},
               {"switch_us", out->switch_us()},
               {"profile", ProfileJson(out->profile())}});
}

// POST .../versions/{v}/rollback {"patch_id": ID, "force"?: bool}
void HttpAdminRoutes::Rollback(Response& res, const std::string& body, const std::string& name,
                               int64_t version) {
  absl::StatusOr<json> parsed = ParseBody(body);
  if (!parsed.ok()) return SetError(res, parsed.status());
  absl::StatusOr<std::string> id = StringField(*parsed, "patch_id");
  if (!id.ok()) return SetError(res, id.status());
  absl::StatusOr<bool> force = BoolField(*parsed, "force", false);
  if (!force.ok()) return SetError(res, force.status());
  cuvil::admin::v1::RollbackRequest request;
  request.set_name(name);
  request.set_version(version);
  request.set_patch_id(*id);
  request.set_force(*force);
  auto out = admin_->Rollback(request);
  if (!out.ok()) return SetError(res, out.status());
  SetJson(res, 200,
          json{{"switch_us", out->switch_us()},
               {"validated_sets", out->validated_sets()},
               {"max_abs_diff", out->max_abs_diff()},
               {"retired", out->retired()}});
}

void HttpAdminRoutes::ListPatches(Response& res, const std::string& name, int64_t version) {
  cuvil::admin::v1::ListPatchesRequest request;
  request.set_name(name);
  request.set_version(version);
  auto list = admin_->ListPatches(request);
  if (!list.ok()) return SetError(res, list.status());
  json patches = json::array();
  for (const auto& p : list->patches()) {
    json functions = json::array();
    for (const auto& f : p.functions()) functions.push_back(f);
    patches.push_back({{"patch_id", p.patch_id()},
                       {"unix_ms", p.unix_ms()},
                       {"kind", p.kind()},
                       {"functions", std::move(functions)},
                       {"author", p.author()},
                       {"active", p.active()},
                       {"rolled_back_unix_ms", p.rolled_back_unix_ms()},
                       {"validated", p.validated()},
                       {"options", p.options()},
                       {"profile", ProfileJson(p.profile())}});
  }
  SetJson(res, 200, json{{"patches", std::move(patches)}});
}

// POST .../versions/{v}/snapshot -> {"snapshot": BASE64, "version": V}
void HttpAdminRoutes::Snapshot(Response& res, const std::string& name, int64_t version) {
  cuvil::admin::v1::SnapshotRequest request;
  request.set_name(name);
  request.set_version(version);
  auto out = admin_->Snapshot(request);
  if (!out.ok()) return SetError(res, out.status());
  SetJson(res, 200,
          json{{"snapshot", absl::Base64Escape(out->snapshot())}, {"version", out->version()}});
}

// POST /v2/admin/snapshots/restore {"snapshot": BASE64}
void HttpAdminRoutes::Restore(Response& res, const std::string& body) {
  absl::StatusOr<json> parsed = ParseBody(body);
  if (!parsed.ok()) return SetError(res, parsed.status());
  absl::StatusOr<std::string> encoded = StringField(*parsed, "snapshot");
  if (!encoded.ok()) return SetError(res, encoded.status());
  cuvil::admin::v1::RestoreSnapshotRequest request;
  if (!absl::Base64Unescape(*encoded, request.mutable_snapshot())) {
    return SetError(res, 400, "'snapshot' is not valid base64");
  }
  auto out = admin_->RestoreSnapshot(request);
  if (!out.ok()) return SetError(res, out.status());
  json ids = json::array();
  for (const auto& id : out->patch_ids()) ids.push_back(id);
  SetJson(res, 200,
          json{{"name", out->name()},
               {"version", out->version()},
               {"patch_ids", std::move(ids)},
               {"recompiled", out->recompiled()}});
}

// GET .../sequences -> {"sequences": [{"model", "version", "sequence_id", "steps",
// "checkpoint_step", "state_bytes", "idle_seconds", "pending_steps", "running"}]}, the id a
// number or a string as the clients send it.
void HttpAdminRoutes::ListSequences(Response& res, const std::string& name, int64_t version) {
  cuvil::admin::v1::ListSequencesRequest request;
  request.set_name(name);
  request.set_version(version);
  auto list = admin_->ListSequences(request);
  if (!list.ok()) return SetError(res, list.status());
  json sequences = json::array();
  for (const auto& s : list->sequences()) {
    sequences.push_back(
        {{"model", s.model()},
         {"version", s.version()},
         {"sequence_id",
          s.string_sequence_id().empty() ? json(s.sequence_id()) : json(s.string_sequence_id())},
         {"steps", s.steps()},
         {"checkpoint_step", s.checkpoint_step()},
         {"state_bytes", s.state_bytes()},
         {"idle_seconds", s.idle_seconds()},
         {"pending_steps", s.pending_steps()},
         {"running", s.running()}});
  }
  SetJson(res, 200, json{{"sequences", std::move(sequences)}});
}

// POST /v2/admin/models/{m}/sequences/end {"sequence_id": 7 | "abc", "version": V}
//   -> {"steps": N, "refused_steps": K}
void HttpAdminRoutes::EndSequence(Response& res, const std::string& body, const std::string& name) {
  absl::StatusOr<json> parsed = ParseBody(body);
  if (!parsed.ok()) return SetError(res, parsed.status());
  absl::StatusOr<int64_t> version = IntField(*parsed, "version", 0);
  if (!version.ok()) return SetError(res, version.status());
  cuvil::admin::v1::EndSequenceRequest request;
  request.set_name(name);
  request.set_version(*version);
  auto id = parsed->find("sequence_id");
  if (id != parsed->end() && id->is_string()) {
    request.set_string_sequence_id(id->get<std::string>());
  } else if (id != parsed->end() && id->is_number_unsigned()) {
    request.set_sequence_id(id->get<uint64_t>());
  } else {
    return SetError(res, 400, "'sequence_id' must be a positive integer or a string");
  }
  auto ended = admin_->EndSequence(request);
  if (!ended.ok()) return SetError(res, ended.status());
  SetJson(res, 200, json{{"steps", ended->steps()}, {"refused_steps", ended->refused_steps()}});
}

}  // namespace cuvil
