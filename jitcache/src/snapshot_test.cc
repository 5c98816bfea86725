// Context snapshots: a restored version computes what the original did, patches included and
// under the same ids; damaged, truncated or foreign artifacts are refused.
#include "cuvil/jitcache/snapshot.h"

#include <sys/mman.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/code_source.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "patch_test_models.h"
#include "snapshot.pb.h"

namespace cuvil {
namespace {

constexpr int64_t kWidth = 4;

// y = x * 3 + 1 over float32[batch, 4]: a Mul kernel and an Add kernel.
std::string MulAdd() { return testing::TwoBinaryOps("mul_add", kWidth, "Mul", 3.0f, "Add", 1.0f); }

// A kernel that writes 2 * (a + b) (the Add kernel, doubled).
std::string DoubledAdd(const std::string& name) { return testing::ScaledAddIr(name, kWidth, 2.0f); }

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    bytes_ = MulAdd();
    auto compiled = CompileOnnxBytes(bytes_);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    auto loaded = engine_->Load("mul_add/1", std::move(*compiled));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    model_ = std::move(*loaded);
    CodeSource source;
    source.onnx_bytes = bytes_;
    model_->set_source(std::make_shared<const CodeSource>(source));
    for (const KernelFunction& k : model_->model().kernels) {
      if (k.op_type == "Add") add_ = k.symbol;
    }
    ASSERT_FALSE(add_.empty());
  }

  static std::vector<float> Outputs(const LoadedModel& m) {
    HostTensor x(DType::kFloat32, {2, kWidth});
    for (int i = 0; i < 2 * kWidth; ++i) x.data_as<float>()[i] = static_cast<float>(i);
    auto out = m.Run({x});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
    const float* y = (*out)[0].data_as<float>();
    return std::vector<float>(y, y + 2 * kWidth);
  }

  // Encodes the version with a doubling IR patch and a rolled-back recompile patch on it.
  std::string PatchedArtifact(uint64_t* ir_id) {
    auto recompiled = CompileOnnxBytes(bytes_);
    EXPECT_TRUE(recompiled.ok());
    auto re = model_->patches().PrepareRecompilePatch(*recompiled, {}, "opt_level=3");
    EXPECT_TRUE(re.ok()) << re.status();
    auto re_id = model_->patches().CommitPatch(*re, "tier");
    EXPECT_TRUE(re_id.ok());
    auto ir = model_->patches().PrepareIrPatch(DoubledAdd(add_), {add_});
    EXPECT_TRUE(ir.ok()) << ir.status();
    auto id = model_->patches().CommitPatch(*ir, "alice");
    EXPECT_TRUE(id.ok());
    *ir_id = *id;
    EXPECT_TRUE(model_->patches().Rollback(*re_id).ok());
    auto artifact = EncodeSnapshot(*model_, "mul_add", 1, "name: \"mul_add\"");
    EXPECT_TRUE(artifact.ok()) << artifact.status();
    return artifact.ok() ? *artifact : "";
  }

  std::unique_ptr<JitEngine> engine_;
  std::unique_ptr<LoadedModel> model_;
  std::string bytes_;
  std::string add_;
};

TEST_F(SnapshotTest, RestoreEqualsOriginalIncludingPatches) {
  const std::vector<float> plain = Outputs(*model_);
  EXPECT_EQ(plain[1], 4.0f);  // 1*3 + 1
  uint64_t ir_id = 0;
  const std::string artifact = PatchedArtifact(&ir_id);
  const std::vector<float> patched = Outputs(*model_);
  EXPECT_EQ(patched[1], 8.0f);

  auto snapshot = DecodeSnapshot(artifact);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->model_name, "mul_add");
  EXPECT_EQ(snapshot->version, 1);
  EXPECT_EQ(snapshot->config_text, "name: \"mul_add\"");
  EXPECT_TRUE(snapshot->host_matches);
  EXPECT_EQ(snapshot->model_hash.size(), 32u);
  ASSERT_EQ(snapshot->patches.size(), 2u);

  // A fresh engine (another process, in effect) restores without compiling.
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  const uint64_t before = TotalCompilations();
  bool recompiled = true;
  auto code = SnapshotCode(*snapshot, &recompiled);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_FALSE(recompiled);
  EXPECT_EQ(TotalCompilations(), before);
  const ArenaPlan& made = model_->model().arena;
  EXPECT_EQ(code->arena.per_batch_bytes, made.per_batch_bytes);
  EXPECT_EQ(code->arena.fixed_bytes, made.fixed_bytes);
  EXPECT_EQ(code->arena.live_per_batch_bytes, made.live_per_batch_bytes);
  EXPECT_EQ(code->arena.live_fixed_bytes, made.live_fixed_bytes);
  auto restored = (*engine)->Load("mul_add/1", *std::move(code));
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(Outputs(**restored), plain);
  ASSERT_TRUE(RestorePatches(**restored, *snapshot).ok());
  EXPECT_EQ(Outputs(**restored), patched);
  std::vector<PatchRecord> patches = (*restored)->patches().Patches();
  ASSERT_EQ(patches.size(), 1u);  // The active ones.
  EXPECT_EQ(patches[0].id, ir_id);
  EXPECT_EQ(patches[0].author, "alice");
  EXPECT_EQ(patches[0].kind, kPatchKindIr);
  // The restored patch rolls back like the original, and new ids do not collide.
  auto more = (*restored)->patches().PrepareIrPatch(DoubledAdd(add_), {});
  ASSERT_TRUE(more.ok());
  auto more_id = (*restored)->patches().CommitPatch(*more, "bob");
  ASSERT_TRUE(more_id.ok());
  EXPECT_GT(*more_id, ir_id);
  ASSERT_TRUE((*restored)->patches().Rollback(ir_id).ok());
  ASSERT_TRUE((*restored)->patches().Rollback(*more_id).ok());
  EXPECT_EQ(Outputs(**restored), plain);
}

using ::testing::HasSubstr;

TEST_F(SnapshotTest, APatchTheSandboxRefusesIsLeftOutAndTheRestGoOn) {
  uint64_t ir_id = 0;
  const std::string artifact = PatchedArtifact(&ir_id);
  const std::vector<float> patched = Outputs(*model_);
  auto snapshot = DecodeSnapshot(artifact);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  // A snapshot written before the sandbox existed, holding a patch that crashes on first run.
  PatchRecord hostile;
  hostile.id = ir_id + 1000;
  hostile.kind = kPatchKindIr;
  hostile.author = "mallory";
  hostile.functions = {add_};
  hostile.source = absl::StrCat("define i32 @", add_,
                                "(ptr %args, i64 %batch) {\n  store volatile i32 1, ptr null\n"
                                "  ret i32 0\n}\n");
  snapshot->patches.insert(snapshot->patches.begin(), hostile);
  HostTensor x(DType::kFloat32, {1, kWidth});
  std::memset(x.data(), 0, x.byte_size());
  const std::vector<HostTensor> probe = {x};
  {
    auto code = SnapshotCode(*snapshot, nullptr);
    ASSERT_TRUE(code.ok());
    auto restored = engine_->Load("mul_add/strict", *std::move(code));
    ASSERT_TRUE(restored.ok());
    absl::Status s = RestorePatches(**restored, *snapshot, probe);
    EXPECT_THAT(s.message(), HasSubstr("mallory"));  // Without `refused`: the first error.
  }
  auto code = SnapshotCode(*snapshot, nullptr);
  ASSERT_TRUE(code.ok());
  auto restored = engine_->Load("mul_add/lenient", *std::move(code));
  ASSERT_TRUE(restored.ok());
  std::vector<std::string> refused;
  ASSERT_TRUE(RestorePatches(**restored, *snapshot, probe, &refused).ok());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(refused[0], HasSubstr("signal 11"));
  EXPECT_EQ(Outputs(**restored), patched);  // The good patch is back.
  ASSERT_EQ((*restored)->patches().Patches().size(), 1u);
  EXPECT_EQ((*restored)->patches().Patches()[0].id, ir_id);
}

// An active recompile patch travels with its code: restoring it on the same CPU compiles nothing.
// A patch on a subgraph kernel comes back with the subgraph kernels' parents.
TEST(SubgraphSnapshotTest, PatchedBranchKernelIsRestoredWithItsParent) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string bytes = testing::IfOfTwoAdds(kWidth, 1.0f, 10.0f);
  auto compiled = CompileOnnxBytes(bytes);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto loaded = (*engine)->Load("if/1", std::move(*compiled));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  CodeSource source;
  source.onnx_bytes = bytes;
  (*loaded)->set_source(std::make_shared<const CodeSource>(source));
  const std::vector<KernelFunction> kernels = (*loaded)->model().kernels;
  ASSERT_EQ(kernels.size(), 3u);
  auto then_add = std::find_if(kernels.begin(), kernels.end(), [](const KernelFunction& k) {
    return k.symbol.find("then") != std::string::npos;
  });
  ASSERT_NE(then_add, kernels.end());
  auto patch =
      (*loaded)->patches().PrepareIrPatch(testing::ScaledAddIr(then_add->symbol, kWidth, 2.0f), {});
  ASSERT_TRUE(patch.ok()) << patch.status();
  ASSERT_TRUE((*loaded)->patches().CommitPatch(*patch, "alice").ok());
  auto run = [](const LoadedModel& m) {
    HostTensor x(DType::kFloat32, {1, kWidth});
    std::memset(x.data(), 0, x.byte_size());
    HostTensor c(DType::kBool, {});
    c.data()[0] = 1;
    auto out = m.Run({x, c});
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? (*out)[0].data_as<float>()[0] : -1.0f;
  };
  EXPECT_EQ(run(**loaded), 2.0f);
  auto artifact = EncodeSnapshot(**loaded, "if", 1, "name: \"if\"");
  ASSERT_TRUE(artifact.ok()) << artifact.status();

  auto snapshot = DecodeSnapshot(*artifact);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  auto other = JitEngine::Create();
  ASSERT_TRUE(other.ok());
  bool recompiled = true;
  auto code = SnapshotCode(*snapshot, &recompiled);
  ASSERT_TRUE(code.ok()) << code.status();
  ASSERT_EQ(code->kernels.size(), kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_EQ(code->kernels[i].symbol, kernels[i].symbol);
    EXPECT_EQ(code->kernels[i].parent, kernels[i].parent) << kernels[i].symbol;
  }
  auto restored = (*other)->Load("if/1", *std::move(code));
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(run(**restored), 1.0f);
  ASSERT_TRUE(RestorePatches(**restored, *snapshot).ok());
  EXPECT_EQ(run(**restored), 2.0f);
}

TEST_F(SnapshotTest, ActiveRecompilePatchIsRestoredWithoutCompiling) {
  CompileOptions o1;
  o1.opt_level = 1;
  auto recompiled = CompileOnnxBytes(bytes_, o1);
  ASSERT_TRUE(recompiled.ok());
  auto re = model_->patches().PrepareRecompilePatch(*recompiled, {}, "opt_level=1");
  ASSERT_TRUE(re.ok()) << re.status();
  auto re_id = model_->patches().CommitPatch(*re, "tier");
  ASSERT_TRUE(re_id.ok());
  auto ir = model_->patches().PrepareIrPatch(DoubledAdd(add_), {add_});
  ASSERT_TRUE(ir.ok());
  ASSERT_TRUE(model_->patches().CommitPatch(*ir, "alice").ok());
  auto artifact = EncodeSnapshot(*model_, "mul_add", 1, "");
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  auto snapshot = DecodeSnapshot(*artifact);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_EQ(snapshot->patch_objects.count(*re_id), 1u);

  const uint64_t before = TotalCompilations();
  auto code = SnapshotCode(*snapshot, nullptr);
  ASSERT_TRUE(code.ok());
  auto restored = engine_->Load("mul_add/1#3", *std::move(code));
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(RestorePatches(**restored, *snapshot).ok());
  EXPECT_EQ(TotalCompilations(), before);
  EXPECT_EQ(Outputs(**restored), Outputs(*model_));
  std::vector<PatchRecord> patches = (*restored)->patches().Patches();
  ASSERT_EQ(patches.size(), 2u);
  EXPECT_EQ(patches[0].id, *re_id);
  EXPECT_EQ(patches[0].kind, kPatchKindRecompile);
  EXPECT_EQ(patches[1].kind, kPatchKindIr);
}

TEST_F(SnapshotTest, ForeignCodeIsRebuiltFromTheSource) {
  uint64_t ir_id = 0;
  auto snapshot = DecodeSnapshot(PatchedArtifact(&ir_id));
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  snapshot->host_matches = false;  // As if written on another CPU.
  bool recompiled = false;
  auto code = SnapshotCode(*snapshot, &recompiled);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_TRUE(recompiled);
  auto restored = engine_->Load("mul_add/1#2", *std::move(code));
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(RestorePatches(**restored, *snapshot).ok());
  EXPECT_EQ(Outputs(**restored), Outputs(*model_));
}

TEST_F(SnapshotTest, DamagedTruncatedAndForeignArtifactsAreRefused) {
  uint64_t ir_id = 0;
  const std::string artifact = PatchedArtifact(&ir_id);
  ASSERT_TRUE(DecodeSnapshot(artifact).ok());
  auto refused = [](const std::string& bytes, const std::string& what) {
    auto s = DecodeSnapshot(bytes);
    EXPECT_FALSE(s.ok()) << what;
    if (!s.ok()) {
      EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << what << ": " << s.status();
    }
  };
  // A flipped byte anywhere: the first 128 bytes one by one, then every ~1/300 of the file and
  // the last bytes.
  std::vector<size_t> offsets;
  for (size_t i = 0; i < std::min<size_t>(128, artifact.size()); ++i) offsets.push_back(i);
  for (size_t i = 128; i < artifact.size(); i += std::max<size_t>(artifact.size() / 300, 1)) {
    offsets.push_back(i);
  }
  for (size_t i = artifact.size() - std::min<size_t>(32, artifact.size()); i < artifact.size();
       ++i) {
    offsets.push_back(i);
  }
  for (size_t off : offsets) {
    std::string bad = artifact;
    bad[off] = static_cast<char>(bad[off] ^ 0x5a);
    refused(bad, absl::StrCat("flipped byte at ", off, " of ", artifact.size()));
  }
  for (size_t len : {size_t{0}, size_t{1}, size_t{10}, artifact.size() / 3, artifact.size() / 2,
                     artifact.size() - 17, artifact.size() - 1}) {
    refused(artifact.substr(0, len), absl::StrCat("truncated to ", len));
  }
  refused("not a snapshot at all", "text");
  // A well-formed artifact of an unknown format version.
  cuvil::jitcache::v1::SnapshotArtifact future;
  ASSERT_TRUE(future.ParseFromString(artifact));
  future.set_format_version(kSnapshotFormatVersion + 1);
  refused(future.SerializeAsString(), "future format");
  future.set_format_version(kSnapshotFormatVersion);
  future.set_magic("cuvil.jit_cache");
  refused(future.SerializeAsString(), "foreign magic");
}

// Issue 38 part 4: an artifact of 2-4 GiB wrapped to a negative int before parsing, and protobuf's
// FatalException then killed the server. Sizes are checked before a byte is read (this one is
// never touched: a reserved, unbacked mapping).
TEST(SnapshotSizeTest, ArtifactsAboveTheLimitsAreRefusedBeforeParsing) {
  const size_t huge = (size_t{5} << 29);  // 2.5 GiB.
  void* p = mmap(nullptr, huge, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const std::string_view view(static_cast<const char*>(p), huge);
  for (uint64_t max : {kDefaultMaxSnapshotBytes, ~uint64_t{0}}) {
    auto s = DecodeSnapshot(view, max);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
    EXPECT_NE(s.status().message().find("no snapshot may exceed"), std::string::npos) << s.status();
  }
  // Within INT_MAX but above the server's limit: ResourceExhausted naming the flag.
  auto s = DecodeSnapshot(view.substr(0, (size_t{1} << 30) + 1));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("--max-snapshot-bytes"), std::string::npos);
  munmap(p, huge);
}

TEST_F(SnapshotTest, TheLimitIsTheCallers) {
  uint64_t ir_id = 0;
  const std::string artifact = PatchedArtifact(&ir_id);
  EXPECT_TRUE(DecodeSnapshot(artifact, artifact.size()).ok());
  auto s = DecodeSnapshot(artifact, artifact.size() - 1);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(s.status())) << s.status();
}

// `artifact` with its body changed by `edit` and its checksum made right again.
std::string Rewritten(const std::string& artifact,
                      const std::function<void(cuvil::jitcache::v1::SnapshotBody*)>& edit) {
  cuvil::jitcache::v1::SnapshotArtifact a;
  EXPECT_TRUE(a.ParseFromString(artifact));
  cuvil::jitcache::v1::SnapshotBody b;
  EXPECT_TRUE(b.ParseFromString(a.body()));
  edit(&b);
  a.set_body(b.SerializeAsString());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(a.body().data(), a.body().size()));
  a.set_checksum(std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest));
  return a.SerializeAsString();
}

// Issue 37 finding 6: a snapshot of an older build (same kCompilerVersion, another compiler build
// or runtime ABI) loaded its object code into the new build. Now only this build's code loads;
// any other is compiled again from the recorded ONNX source and its patches re-applied.
TEST_F(SnapshotTest, ObjectCodeOfAnotherBuildIsNeverLoaded) {
  uint64_t ir_id = 0;
  const std::string artifact = PatchedArtifact(&ir_id);
  auto same = DecodeSnapshot(artifact);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->host_matches) << same->host_mismatch;
  const std::vector<float> want = Outputs(*model_);
  struct Case {
    const char* what;
    std::function<void(cuvil::jitcache::v1::SnapshotBody*)> edit;
    const char* reason;
  };
  const Case cases[] = {
      {"another compiler build",
       [](auto* b) {
         b->mutable_identity()->set_build_identity(b->identity().build_identity() + "-older");
       },
       "another build"},
      {"another runtime ABI",
       [](auto* b) {
         std::string id = b->identity().build_identity();
         const size_t at = id.find("+abi");
         ASSERT_NE(at, std::string::npos) << id;
         id.insert(at + 4, "9");
         b->mutable_identity()->set_build_identity(id);
       },
       "another build"},
      {"no build identity", [](auto* b) { b->clear_identity(); }, "another build"},
      {"other CPU features",
       [](auto* b) {
         b->mutable_identity()->set_cpu_features(b->identity().cpu_features() + ",+fake");
       },
       "CPU features"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto snapshot = DecodeSnapshot(Rewritten(artifact, c.edit));
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    EXPECT_FALSE(snapshot->host_matches);
    EXPECT_NE(snapshot->host_mismatch.find(c.reason), std::string::npos) << snapshot->host_mismatch;
    bool recompiled = false;
    auto code = SnapshotCode(*snapshot, &recompiled);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_TRUE(recompiled);
    auto restored = engine_->Load(absl::StrCat("mul_add/1#", c.reason), *std::move(code));
    ASSERT_TRUE(restored.ok()) << restored.status();
    ASSERT_TRUE(RestorePatches(**restored, *snapshot).ok());
    EXPECT_EQ(Outputs(**restored), want);
  }
}

// Issue 43: snapshots written before the compiled-model format moved to compiled_model.proto
// (format 1) are read for their ONNX source, kernel names and patches only: the version is
// compiled again and its patches re-applied; its object code is never read.
TEST_F(SnapshotTest, AFormatOneSnapshotIsCompiledAgainFromItsSource) {
  uint64_t ir_id = 0;
  const std::string artifact = PatchedArtifact(&ir_id);
  const std::vector<float> want = Outputs(*model_);
  cuvil::jitcache::v1::SnapshotArtifact a;
  ASSERT_TRUE(a.ParseFromString(artifact));
  cuvil::jitcache::v1::SnapshotBody now;
  ASSERT_TRUE(now.ParseFromString(a.body()));
  // As the format-1 writer laid it out (snapshot.proto's SnapshotBodyV1), with its object code
  // (field 27) replaced by bytes that are no code at all.
  cuvil::jitcache::v1::SnapshotBodyV1 old;
  old.set_model_name(now.model_name());
  old.set_version(now.version());
  old.set_created_unix_ms(now.created_unix_ms());
  old.set_model_hash(now.model_hash());
  old.set_config_text(now.config_text());
  old.set_opt_level(now.opt_level());
  old.set_compiler_version("0.9-older");
  old.set_build_identity("0.9-older+abi1");
  old.set_onnx_model(now.onnx_model());
  for (const auto& k : now.model().kernels()) {
    auto* f = old.add_functions();
    f->set_index(k.index());
    f->set_symbol(k.symbol());
    f->set_op_type(k.op_type());
    f->set_node_name(k.node_name());
    f->set_signature(k.signature());
  }
  *old.mutable_patches() = now.patches();
  old.GetReflection()->MutableUnknownFields(&old)->AddLengthDelimited(27, "not object code");
  a.set_format_version(1);
  a.set_body(old.SerializeAsString());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(a.body().data(), a.body().size()));
  a.set_checksum(std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest));

  auto snapshot = DecodeSnapshot(a.SerializeAsString());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_FALSE(snapshot->host_matches);
  EXPECT_THAT(snapshot->host_mismatch, ::testing::HasSubstr("snapshot format 1"));
  EXPECT_TRUE(snapshot->compiled.object_code.empty());
  EXPECT_TRUE(snapshot->patch_objects.empty());
  ASSERT_EQ(snapshot->patches.size(), 2u);
  bool recompiled = false;
  const uint64_t before = TotalCompilations();
  auto code = SnapshotCode(*snapshot, &recompiled);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_TRUE(recompiled);
  EXPECT_GT(TotalCompilations(), before);
  auto restored = engine_->Load("mul_add/1#format1", *std::move(code));
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(RestorePatches(**restored, *snapshot).ok());
  EXPECT_EQ(Outputs(**restored), want);

  // A damaged format-1 body is refused like any other.
  a.set_checksum(std::string(16, '\0'));
  auto damaged = DecodeSnapshot(a.SerializeAsString());
  ASSERT_FALSE(damaged.ok());
  EXPECT_THAT(damaged.status().message(), ::testing::HasSubstr("checksum"));
}
}  // namespace
}  // namespace cuvil
