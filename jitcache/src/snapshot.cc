#include "cuvil/jitcache/snapshot.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/code_source.h"
#include "cuvil/jitcache/object_cache.h"
#include "cuvil/runtime/status_macros.h"
#include "model_format.h"
#include "snapshot.pb.h"

namespace cuvil {
namespace {

namespace pb = cuvil::jitcache::v1;

// XXH3-128, canonical (big-endian) bytes.
std::string Digest(const void* data, size_t size) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, size));
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
}
std::string Digest(std::string_view s) { return Digest(s.data(), s.size()); }

// The lowered model's structure: interface, kernels and memory plan (what the IR became).
std::string IrDigest(const pb::CompiledModelHeader& h) {
  pb::CompiledModelHeader shape;
  shape.set_symbol(h.symbol());
  *shape.mutable_symbols() = h.symbols();
  *shape.mutable_arena_bytes_program() = h.arena_bytes_program();
  *shape.mutable_inputs() = h.inputs();
  *shape.mutable_outputs() = h.outputs();
  shape.set_arena_per_batch_bytes(h.arena_per_batch_bytes());
  shape.set_arena_fixed_bytes(h.arena_fixed_bytes());
  shape.set_arena_max_shards(h.arena_max_shards());
  *shape.mutable_kernels() = h.kernels();
  std::string bytes;
  shape.SerializeToString(&bytes);  // Deterministic enough: same writer, fields in order.
  return Digest(bytes);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::FailedPreconditionError(absl::StrCat("cannot read ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status Refuse(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("not a usable Cuvil snapshot: ", why));
}

}  // namespace

absl::StatusOr<std::string> EncodeSnapshot(const LoadedModel& loaded, const std::string& model_name,
                                           int64_t version, const std::string& config_text) {
  static const CodeSource kUnknown;
  const CodeSource& source = loaded.source() != nullptr ? *loaded.source() : kUnknown;
  std::string onnx = source.onnx_bytes;
  if (onnx.empty()) {
    if (source.onnx_path.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(loaded.namespace_name(), " has no recorded ONNX source to snapshot"));
    }
    auto read = ReadFile(source.onnx_path);
    if (!read.ok()) return read.status();
    onnx = std::move(*read);
  }
  const CompiledModel& m = loaded.model();
  pb::SnapshotBody b;
  b.set_model_name(model_name);
  b.set_version(version);
  b.set_created_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
  b.set_config_text(config_text);
  b.set_opt_level(source.options.opt_level);
  *b.mutable_identity() = jitcache_internal::ThisBuildIdentity();
  *b.mutable_model() = EncodeModelHeader(m);
  b.set_object_code(m.object_code);
  b.set_weights(static_cast<const char*>(loaded.weights_data()), loaded.weights_bytes());
  b.set_model_hash(Digest(onnx));
  b.set_onnx_model(std::move(onnx));
  b.set_code_hash(Digest(m.object_code));

  // The table executions use now: every active patch's functions over the version's own code.
  const std::vector<PatchRecord> patches = loaded.patches().Patches();
  std::map<std::string, const PatchRecord*> provider;
  for (const PatchRecord& r : patches) {
    if (!r.active) continue;
    for (const std::string& f : r.functions) provider[f] = &r;
  }
  for (const KernelFunction& k : m.kernels) {
    pb::SnapshotFunction* f = b.add_functions();
    f->set_index(k.index);
    auto it = provider.find(k.symbol);
    if (it == provider.end()) {
      f->set_code_hash(b.code_hash());
    } else {
      f->set_patch_id(it->second->id);
      f->set_code_hash(Digest(absl::StrCat(it->second->kind, "\n", it->second->source)));
    }
  }
  b.set_ir_digest(IrDigest(b.model()));
  for (const PatchRecord& r : patches) {
    pb::SnapshotPatch* p = b.add_patches();
    p->set_id(r.id);
    p->set_unix_ms(r.unix_ms);
    p->set_kind(r.kind);
    for (const auto& f : r.functions) p->add_functions(f);
    p->set_author(r.author);
    p->set_active(r.active);
    p->set_rolled_back_unix_ms(r.rolled_back_unix_ms);
    p->set_source(r.source);
    p->mutable_check()->set_validated(r.check.validated);
    p->mutable_check()->set_exact(r.check.exact);
    p->mutable_check()->set_rtol(r.check.rtol);
    p->mutable_check()->set_atol(r.check.atol);
    if (r.active && r.kind == kPatchKindRecompile) {
      auto code = loaded.patches().PatchObjectCode(r.id);
      if (code.ok()) p->set_object_code(*std::move(code));
    }
    for (const KernelProfile& k : r.profile) {
      auto* row = p->add_profile();
      row->set_function(k.function);
      row->set_calls(k.calls);
      row->set_total_ns(k.total_ns);
    }
  }
  // The SnapshotArtifact's wire format written around the body serialized in place: a message
  // holding the body would be one more copy of the weights and source, and its serialization
  // another.
  const size_t body_size = b.ByteSizeLong();
  if (body_size > kMaxSnapshotBytesLimit - 1024) {
    return absl::InternalError(
        absl::StrCat("the snapshot would be ", body_size, " bytes, more than any reader accepts"));
  }
  pb::SnapshotArtifact head;
  head.set_magic(kSnapshotMagic);
  head.set_format_version(kSnapshotFormatVersion);
  std::string out;
  out.reserve(body_size + 128);
  if (!head.AppendToString(&out)) return absl::InternalError("cannot serialise the snapshot");
  auto append_varint = [&out](uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  };
  append_varint((3 << 3) | 2);  // body, length-delimited.
  append_varint(body_size);
  const size_t body_at = out.size();
  if (!b.AppendToString(&out) || out.size() - body_at != body_size) {
    return absl::InternalError("cannot serialise the snapshot");
  }
  b.Clear();
  const std::string checksum = Digest(std::string_view(out).substr(body_at));
  append_varint((4 << 3) | 2);  // checksum.
  append_varint(checksum.size());
  out += checksum;
  return out;
}

namespace {

// The fields of a serialized SnapshotArtifact, the body a view into the artifact's own bytes (a
// parse into the message would copy the whole body, weights and source, once more).
struct ArtifactView {
  std::string_view magic;
  uint64_t format_version = 0;
  std::string_view body;
  std::string_view checksum;
};

// Walks the artifact's wire format (snapshot.proto: fields 1, 3, 4 length-delimited, 2 a varint;
// others skipped). False when it is not well formed.
bool ParseArtifact(std::string_view bytes, ArtifactView* out) {
  size_t p = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && p < bytes.size(); shift += 7) {
      const auto b = static_cast<uint8_t>(bytes[p++]);
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  };
  while (p < bytes.size()) {
    uint64_t tag, v;
    if (!varint(&tag) || (tag >> 3) == 0) return false;
    switch (tag & 7) {
      case 0:
        if (!varint(&v)) return false;
        if ((tag >> 3) == 2) out->format_version = v;
        break;
      case 1:
        if (bytes.size() - p < 8) return false;
        p += 8;
        break;
      case 5:
        if (bytes.size() - p < 4) return false;
        p += 4;
        break;
      case 2: {
        if (!varint(&v) || v > bytes.size() - p) return false;
        const std::string_view field = bytes.substr(p, v);
        if ((tag >> 3) == 1) out->magic = field;
        if ((tag >> 3) == 3) out->body = field;
        if ((tag >> 3) == 4) out->checksum = field;
        p += v;
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

// The patch history (format 1 and 2 share the message) into `s`; the object code of recompile
// patches only when `with_objects`.
absl::Status ReadPatches(const google::protobuf::RepeatedPtrField<pb::SnapshotPatch>& patches,
                         bool with_objects, VersionSnapshot* s) {
  for (const pb::SnapshotPatch& p : patches) {
    PatchRecord r;
    r.id = p.id();
    r.unix_ms = p.unix_ms();
    r.kind = p.kind();
    r.functions.assign(p.functions().begin(), p.functions().end());
    r.author = p.author();
    r.active = p.active();
    r.rolled_back_unix_ms = p.rolled_back_unix_ms();
    r.source = p.source();
    r.check.validated = p.check().validated();
    r.check.exact = p.check().exact();
    r.check.rtol = p.check().rtol();
    r.check.atol = p.check().atol();
    if (r.id == 0 ||
        (r.kind != kPatchKindIr && r.kind != kPatchKindRecompile && r.kind != kPatchKindProfile)) {
      return Refuse(absl::StrCat("patch ", r.id, " has unknown kind '", r.kind, "'"));
    }
    for (const auto& row : p.profile()) {
      KernelProfile k;
      k.function = row.function();
      k.calls = row.calls();
      k.total_ns = row.total_ns();
      k.mean_ns = k.calls ? static_cast<double>(k.total_ns) / static_cast<double>(k.calls) : 0;
      r.profile.push_back(std::move(k));
    }
    if (with_objects && !p.object_code().empty()) {
      s->patch_objects[r.id] = p.object_code();  // Small.
    }
    s->patches.push_back(std::move(r));
  }
  return absl::OkStatus();
}

// The fields every format has, checked alike.
template <typename Body>
absl::Status ReadCommon(Body& b, VersionSnapshot* s) {
  if (b.model_name().empty() || b.version() <= 0) return Refuse("no model name or version");
  if (b.onnx_model().empty()) return Refuse("no source");
  if (b.model_hash() != Digest(b.onnx_model())) return Refuse("model hash mismatch");
  if (b.opt_level() < 0 || b.opt_level() > 3) return Refuse("bad opt_level");
  s->model_name = b.model_name();
  s->version = b.version();
  s->created_unix_ms = b.created_unix_ms();
  s->config_text = b.config_text();
  s->opt_level = b.opt_level();
  s->onnx_model = std::move(*b.mutable_onnx_model());
  s->model_hash = absl::BytesToHexString(b.model_hash());
  return absl::OkStatus();
}

// A format-1 body (before compiled_model.proto): its source, kernel names and patches are read,
// nothing of its compiled model; SnapshotCode compiles the source again.
absl::StatusOr<VersionSnapshot> DecodeFormat1(std::string_view body) {
  pb::SnapshotBodyV1 b;
  if (!b.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return Refuse("the body does not parse");
  }
  VersionSnapshot s;
  CUVIL_RETURN_IF_ERROR(ReadCommon(b, &s));
  s.host_matches = false;
  s.host_mismatch =
      absl::StrCat("written in snapshot format 1 by an older Cuvil (", b.compiler_version(), ")");
  for (const pb::SnapshotFunctionV1& f : b.functions()) {
    if (f.index() != static_cast<int32_t>(s.compiled.kernels.size())) {
      return Refuse("function table order");
    }
    s.compiled.kernels.push_back({f.index(), f.symbol(), f.op_type(), f.node_name(), f.signature(),
                                  f.has_parent() ? f.parent() : -1});
  }
  CUVIL_RETURN_IF_ERROR(ReadPatches(b.patches(), /*with_objects=*/false, &s));
  return s;
}

absl::StatusOr<VersionSnapshot> DecodeSnapshotOrThrow(std::string_view bytes, uint64_t max_bytes) {
  if (bytes.empty()) return Refuse("the artifact is empty");
  if (bytes.size() > kMaxSnapshotBytesLimit) {
    return Refuse(absl::StrCat("it is ", bytes.size(), " bytes; no snapshot may exceed ",
                               kMaxSnapshotBytesLimit, " bytes"));
  }
  if (bytes.size() > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("the snapshot is ", bytes.size(),
                                                     " bytes, larger than the server's limit of ",
                                                     max_bytes, " bytes (--max-snapshot-bytes)"));
  }
  ArtifactView artifact;
  if (!ParseArtifact(bytes, &artifact)) {
    return Refuse("the artifact does not parse (truncated or not a snapshot)");
  }
  if (artifact.magic != kSnapshotMagic) {
    return Refuse("wrong magic (not a snapshot, or damaged)");
  }
  if (artifact.format_version != kSnapshotFormatVersion && artifact.format_version != 1) {
    return Refuse(absl::StrCat("format version ", artifact.format_version,
                               " is not supported (this server reads version ",
                               kSnapshotFormatVersion, ", and version 1 for its source)"));
  }
  if (artifact.checksum != Digest(artifact.body)) {
    return Refuse("checksum mismatch (the artifact is damaged or truncated)");
  }
  // The body is at most the artifact's size, itself at most INT_MAX: no int wrap.
  if (artifact.format_version == 1) return DecodeFormat1(artifact.body);
  pb::SnapshotBody b;
  if (!b.ParseFromArray(artifact.body.data(), static_cast<int>(artifact.body.size()))) {
    return Refuse("the body does not parse");
  }
  if (b.object_code().empty()) return Refuse("no code");
  if (b.code_hash() != Digest(b.object_code())) return Refuse("code hash mismatch");
  if (b.ir_digest() != IrDigest(b.model())) return Refuse("IR digest mismatch");
  if (b.functions_size() != b.model().kernels_size()) return Refuse("function table size");

  VersionSnapshot s;
  CUVIL_RETURN_IF_ERROR(ReadCommon(b, &s));
  s.ir_digest = absl::BytesToHexString(b.ir_digest());
  s.code_hash = absl::BytesToHexString(b.code_hash());
  s.host_mismatch = jitcache_internal::IdentityMismatch(b.identity());
  s.host_matches = s.host_mismatch.empty();
  // The parsed bytes themselves, moved (a copy into a tensor would be one more copy of them all).
  auto weights = std::make_shared<const std::string>(std::move(*b.mutable_weights()));
  auto model = DecodeModelHeader(
      b.model(), b.object_code(),
      WeightsBlob(weights, reinterpret_cast<const uint8_t*>(weights->data()), weights->size(),
                  /*read_only=*/false));
  if (!model.ok()) return Refuse(std::string(model.status().message()));
  s.compiled = *std::move(model);
  for (int i = 0; i < b.functions_size(); ++i) {
    if (b.functions(i).index() != i) return Refuse("function table order");
  }
  CUVIL_RETURN_IF_ERROR(ReadPatches(b.patches(), /*with_objects=*/true, &s));
  return s;
}

}  // namespace

absl::StatusOr<VersionSnapshot> DecodeSnapshot(std::string_view bytes, uint64_t max_bytes) {
  try {
    return DecodeSnapshotOrThrow(bytes, max_bytes);
  } catch (const std::exception& e) {  // Protobuf's FatalException, bad_alloc: never terminate.
    return Refuse(absl::StrCat("decoding failed: ", e.what()));
  } catch (...) {
    return Refuse("decoding failed");
  }
}

absl::StatusOr<CompiledModel> SnapshotCode(const VersionSnapshot& snapshot, bool* recompiled) {
  if (snapshot.host_matches) {
    if (recompiled != nullptr) *recompiled = false;
    return snapshot.compiled;
  }
  if (recompiled != nullptr) *recompiled = true;
  CompileOptions options;
  options.opt_level = snapshot.opt_level;
  absl::StatusOr<CompiledModel> compiled;
  try {
    compiled = CompileOnnxBytes(snapshot.onnx_model, options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("compiling the snapshot's model: ", e.what()));
  }
  if (!compiled.ok()) return compiled.status();
  if (compiled->kernels.size() != snapshot.compiled.kernels.size()) {
    return absl::FailedPreconditionError(
        "the snapshot's model compiles to other kernels here; its patches cannot be restored");
  }
  return compiled;
}

absl::Status RestorePatches(LoadedModel& loaded, const VersionSnapshot& snapshot,
                            const std::vector<HostTensor>& probe,
                            std::vector<std::string>* refused) {
  for (const PatchRecord& r : snapshot.patches) {
    if (!r.active || r.kind == kPatchKindProfile) continue;
    absl::StatusOr<std::shared_ptr<PreparedPatch>> patch;
    if (r.kind == kPatchKindIr) {
      // Checked, compiled and first run on `probe` in the sandbox like a new patch.
      patch = loaded.patches().PrepareIrPatch(r.source, r.functions, probe);
    } else {
      auto options = ParseRecompileOptions(r.source);
      absl::StatusOr<CompiledModel> recompiled = absl::UnknownError("not compiled");
      if (!options.ok()) {
        recompiled = options.status();
      } else {
        if (auto code = snapshot.patch_objects.find(r.id);
            snapshot.host_matches && code != snapshot.patch_objects.end()) {
          recompiled = snapshot.compiled;  // The same model: only the code differs.
          recompiled->object_code = code->second;
        } else {
          CompileOptions compile;
          compile.opt_level = options->opt_level;
          recompiled = CompileOnnxBytes(snapshot.onnx_model, compile);
        }
      }
      patch = recompiled.ok()
                  ? loaded.patches().PrepareRecompilePatch(*recompiled, r.functions, r.source)
                  : absl::StatusOr<std::shared_ptr<PreparedPatch>>(recompiled.status());
    }
    absl::Status status = patch.status();
    if (status.ok()) status = loaded.patches().CommitRestoredPatch(*std::move(patch), r).status();
    if (status.ok()) continue;
    status =
        absl::Status(status.code(), absl::StrCat("restoring patch ", r.id, " (", r.kind,
                                                 ", author '", r.author, "'): ", status.message()));
    if (refused == nullptr) return status;
    refused->push_back(std::string(status.message()));
  }
  return absl::OkStatus();
}

}  // namespace cuvil
