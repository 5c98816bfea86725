#include "commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "admin.grpc.pb.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "output.h"

namespace cuvil::admin_cli {
namespace {

namespace av1 = cuvil::admin::v1;

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path));
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The server compares the first line of its token file, so the client sends the same.
absl::StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::InvalidArgumentError(absl::StrCat("cannot read token file ", path));
  std::string token;
  std::getline(f, token);
  if (!token.empty() && token.back() == '\r') token.pop_back();
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  return token;
}

absl::Status FromGrpc(const grpc::Status& s, const char* rpc, const std::string& url) {
  if (s.ok()) return absl::OkStatus();
  std::string message = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    message = absl::StrCat(rpc, " to ", url, ": ", message);
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), message);
}

// One call context: deadline and the bearer token.
class Call {
 public:
  Call(const AdminArgs& args, const std::string& token) {
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(args.timeout_s * 1e6)));
    if (!token.empty()) ctx_.AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
  grpc::ClientContext* ctx() { return &ctx_; }

 private:
  grpc::ClientContext ctx_;
};

std::shared_ptr<grpc::Channel> Connect(const std::string& url) {
  grpc::ChannelArguments channel_args;
  // Inline models and snapshots can be large; the server enforces its own limit.
  channel_args.SetMaxReceiveMessageSize(-1);
  channel_args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(url, grpc::InsecureChannelCredentials(), channel_args);
}

}  // namespace

absl::Status RunCommand(const AdminArgs& args, std::string* out) {
  std::string token;
  if (!args.token_file.empty()) {
    auto t = ReadToken(args.token_file);
    if (!t.ok()) return t.status();
    token = *std::move(t);
  }
  auto channel = Connect(args.url);
  auto admin = av1::ModelAdmin::NewStub(channel);
  Call call(args, token);
  auto render = [&](const google::protobuf::Message& m, std::string text) {
    absl::StrAppend(out, args.json ? RenderJson(m) : std::move(text));
  };
  switch (args.verb) {
    case Verb::kLoad: {
      av1::LoadModelRequest q;
      q.set_name(args.model);
      q.set_wait(args.wait);
      q.set_version(args.version);
      if (!args.config_file.empty()) {
        auto config = ReadFile(args.config_file, "config file");
        if (!config.ok()) return config.status();
        q.set_config_pbtxt(*config);
      }
      if (!args.onnx_file.empty()) {
        auto onnx = ReadFile(args.onnx_file, "ONNX file");
        if (!onnx.ok()) return onnx.status();
        q.set_onnx_model(*std::move(onnx));
      }
      av1::LoadModelResponse r;
      auto s = FromGrpc(admin->LoadModel(call.ctx(), q, &r), "LoadModel", args.url);
      if (!s.ok()) return s;
      render(r, RenderLoad(r));
      return absl::OkStatus();
    }
    case Verb::kUnload: {
      av1::UnloadModelRequest q;
      q.set_name(args.model);
      av1::UnloadModelResponse r;
      auto s = FromGrpc(admin->UnloadModel(call.ctx(), q, &r), "UnloadModel", args.url);
      if (!s.ok()) return s;
      render(r, absl::StrCat("model ", args.model, " unloaded\n"));
      return absl::OkStatus();
    }
    case Verb::kList: {
      av1::ListModelsResponse r;
      auto s = FromGrpc(admin->ListModels(call.ctx(), av1::ListModelsRequest(), &r), "ListModels",
                        args.url);
      if (!s.ok()) return s;
      render(r, RenderModels(r));
      return absl::OkStatus();
    }
    case Verb::kIndex: {
      auto stub = inference::GRPCInferenceService::NewStub(channel);
      inference::RepositoryIndexResponse r;
      auto s = FromGrpc(stub->RepositoryIndex(call.ctx(), inference::RepositoryIndexRequest(), &r),
                        "RepositoryIndex", args.url);
      if (!s.ok()) return s;
      render(r, RenderIndex(r));
      return absl::OkStatus();
    }
    case Verb::kFunctions: {
      av1::ListFunctionsRequest q;
      q.set_name(args.model);
      q.set_version(args.version);
      av1::ListFunctionsResponse r;
      auto s = FromGrpc(admin->ListFunctions(call.ctx(), q, &r), "ListFunctions", args.url);
      if (!s.ok()) return s;
      render(r, RenderFunctions(r));
      return absl::OkStatus();
    }
    case Verb::kPatch: {
      av1::PatchFunctionRequest q;
      q.set_name(args.model);
      q.set_version(args.version);
      q.set_kind(args.kind);
      if (!args.ir_file.empty()) {
        auto ir = ReadFile(args.ir_file, "IR file");
        if (!ir.ok()) return ir.status();
        q.set_body(*std::move(ir));
      } else if (!args.recompile_options.empty()) {
        q.set_options(args.recompile_options);
      } else {
        q.set_profile_seconds(*args.profile_seconds);
        q.set_wait(args.wait);
      }
      for (const std::string& f : args.functions) q.add_functions(f);
      q.set_author(args.author);
      q.set_force(args.force);
      q.set_validate(args.validate);
      if (args.rtol > 0) q.set_rtol(args.rtol);  // 0: the server's default.
      if (args.atol > 0) q.set_atol(args.atol);
      av1::PatchFunctionResponse r;
      auto s = FromGrpc(admin->PatchFunction(call.ctx(), q, &r), "PatchFunction", args.url);
      if (!s.ok()) return s;
      render(r, RenderPatch(r));
      return absl::OkStatus();
    }
    case Verb::kRollback: {
      av1::RollbackRequest q;
      q.set_name(args.model);
      q.set_version(args.version);
      q.set_patch_id(args.patch_id);
      q.set_force(args.force);
      av1::RollbackResponse r;
      auto s = FromGrpc(admin->Rollback(call.ctx(), q, &r), "Rollback", args.url);
      if (!s.ok()) return s;
      render(r, absl::StrCat("patch ", args.patch_id, " rolled back (switch ", r.switch_us(), " us",
                             r.validated_sets() > 0
                                 ? absl::StrCat("; the stack left checked on ", r.validated_sets(),
                                                " input sets, max abs diff ", r.max_abs_diff())
                                 : "",
                             ")\n"));
      return absl::OkStatus();
    }
    case Verb::kPatches: {
      av1::ListPatchesRequest q;
      q.set_name(args.model);
      q.set_version(args.version);
      av1::ListPatchesResponse r;
      auto s = FromGrpc(admin->ListPatches(call.ctx(), q, &r), "ListPatches", args.url);
      if (!s.ok()) return s;
      render(r, RenderPatches(r));
      return absl::OkStatus();
    }
    case Verb::kSnapshot: {
      av1::SnapshotRequest q;
      q.set_name(args.model);
      q.set_version(args.version);
      // Streamed in chunks: a big model's artifact exceeds any single message limit.
      // Temporary file + rename: an interrupted write never leaves a truncated artifact.
      const std::string tmp = args.out_file + ".tmp";
      uint64_t written = 0;
      {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        auto reader = admin->SnapshotStream(call.ctx(), q);
        av1::SnapshotChunk chunk;
        int64_t total = -1;
        while (reader->Read(&chunk)) {
          if (total < 0) total = chunk.total_bytes();
          f.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
          written += chunk.data().size();
        }
        auto s = FromGrpc(reader->Finish(), "SnapshotStream", args.url);
        if (!s.ok()) {
          f.close();
          std::remove(tmp.c_str());
          return s;
        }
        if (total < 0 || written != static_cast<uint64_t>(total)) {
          f.close();
          std::remove(tmp.c_str());
          return absl::DataLossError(
              absl::StrCat("the snapshot stream ended after ", written, " of ", total, " bytes"));
        }
        if (!f.flush()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
      }
      if (std::rename(tmp.c_str(), args.out_file.c_str()) != 0) {
        return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", args.out_file));
      }
      if (args.json) {
        absl::StrAppend(out, "{\"file\":\"", args.out_file, "\",\"bytes\":", written, "}\n");
      } else {
        absl::StrAppend(out, "snapshot of ", args.model, " written to ", args.out_file, " (",
                        HumanBytes(written), ")\n");
      }
      return absl::OkStatus();
    }
    case Verb::kRestore: {
      auto bytes = ReadFile(args.in_file, "snapshot file");
      if (!bytes.ok()) return bytes.status();
      av1::RestoreSnapshotResponse r;
      // In chunks far below the server's message limit (see Snapshot above).
      constexpr size_t kChunk = size_t{1} << 20;
      auto writer = admin->RestoreSnapshotStream(call.ctx(), &r);
      av1::SnapshotChunk chunk;
      for (size_t offset = 0; offset < bytes->size(); offset += kChunk) {
        chunk.set_data(bytes->data() + offset, std::min(kChunk, bytes->size() - offset));
        if (!writer->Write(chunk)) break;  // The server answered early; Finish says why.
      }
      writer->WritesDone();
      auto s = FromGrpc(writer->Finish(), "RestoreSnapshotStream", args.url);
      if (!s.ok()) return s;
      render(r, absl::StrCat("snapshot ", args.in_file, " restored\n"));
      return absl::OkStatus();
    }
    case Verb::kSequences: {
      if (args.sequence_action == "list") {
        av1::ListSequencesRequest q;
        q.set_name(args.model);
        q.set_version(args.version);
        av1::ListSequencesResponse r;
        auto s = FromGrpc(admin->ListSequences(call.ctx(), q, &r), "ListSequences", args.url);
        if (!s.ok()) return s;
        render(r, RenderSequences(r));
        return absl::OkStatus();
      }
      av1::EndSequenceRequest q;
      q.set_name(args.model);
      q.set_version(args.version);
      uint64_t id = 0;
      if (!args.string_id && absl::SimpleAtoi(args.sequence_id, &id)) {
        q.set_sequence_id(id);
      } else {
        q.set_string_sequence_id(args.sequence_id);
      }
      av1::EndSequenceResponse r;
      auto s = FromGrpc(admin->EndSequence(call.ctx(), q, &r), "EndSequence", args.url);
      if (!s.ok()) return s;
      render(r, absl::StrCat("sequence ", args.sequence_id, " of ", args.model, " ended after ",
                             r.steps(), " step(s)",
                             r.refused_steps() > 0
                                 ? absl::StrCat("; ", r.refused_steps(), " queued step(s) refused")
                                 : "",
                             "\n"));
      return absl::OkStatus();
    }
    case Verb::kNone:
      break;
  }
  return absl::InvalidArgumentError("no verb given");
}

}  // namespace cuvil::admin_cli
