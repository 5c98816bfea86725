// The patch sandbox's messages as pure functions: the parent's decoding of the child's reply and
// the child's checks of its job hold against damaged, truncated and hostile bytes
// (fuzz/fuzz_patch_sandbox.cc drives the same functions with arbitrary ones).
#include "patch_sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/runtime/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model_format.h"
#include "patch_sandbox.pb.h"
#include "patch_test_models.h"

namespace cuvil::jitcache_internal {
namespace {

namespace pb = ::cuvil::jitcache::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Header field offsets (patch_sandbox.h).
constexpr size_t kMagicAt = 0;
constexpr size_t kOkAt = 4;
constexpr size_t kCallCountsAt = 12;
constexpr size_t kPayloadBytesAt = 16;

template <typename T>
void Poke(std::string* bytes, size_t at, T value) {
  std::memcpy(bytes->data() + at, &value, sizeof(value));
}

TEST(PatchSandboxReplyTest, AnOkReplyDecodes) {
  const std::string reply = EncodeSandboxReply(true, 1,
                                               "\x7f"
                                               "ELF object",
                                               {3, 0});
  ASSERT_EQ(reply.size(), kSandboxReplyHeaderBytes + 11 + 16);
  auto result = DecodeSandboxReply(reply, 2);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->object_code,
            "\x7f"
            "ELF object");
  EXPECT_EQ(result->probe_code, 1);
  EXPECT_THAT(result->kernel_calls, ElementsAre(3u, 0u));
  EXPECT_EQ(SandboxReplyBodyBytes(reply), 11u + 16u);
  // Without probes: no counts.
  auto unprobed = DecodeSandboxReply(EncodeSandboxReply(true, 0, "obj"), 0);
  ASSERT_TRUE(unprobed.ok()) << unprobed.status();
  EXPECT_TRUE(unprobed->kernel_calls.empty());
}

TEST(PatchSandboxReplyTest, ARefusalIsTheChildsMessage) {
  auto result = DecodeSandboxReply(EncodeSandboxReply(false, 0, "does not parse: oops"), 2);
  EXPECT_TRUE(absl::IsFailedPrecondition(result.status())) << result.status();
  EXPECT_EQ(result.status().message(), "patch refused by the sandbox: does not parse: oops");
  // A refusal carries no counts.
  auto counted = DecodeSandboxReply(EncodeSandboxReply(false, 0, "no", {1}), 1);
  EXPECT_TRUE(absl::IsDataLoss(counted.status()))
      << counted.status();  // A huge reason is cut to what a response and a log line can carry.
  auto huge = DecodeSandboxReply(EncodeSandboxReply(false, 0, std::string(1 << 20, 'x')), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(huge.status())) << huge.status().code();
  EXPECT_LT(huge.status().message().size(), 17u << 10);
  EXPECT_THAT(std::string(huge.status().message()), ::testing::HasSubstr("more bytes)"));
}

TEST(PatchSandboxReplyTest, ATruncatedHeaderIsDamaged) {
  const std::string reply = EncodeSandboxReply(true, 0, "obj");
  for (size_t n = 0; n < kSandboxReplyHeaderBytes; ++n) {
    auto result = DecodeSandboxReply(reply.substr(0, n), 0);
    EXPECT_TRUE(absl::IsDataLoss(result.status())) << n << ": " << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("truncated"));
    EXPECT_EQ(SandboxReplyBodyBytes(reply.substr(0, n)), std::nullopt);
  }
}

TEST(PatchSandboxReplyTest, ABadMagicOrOkIsDamaged) {
  std::string reply = EncodeSandboxReply(true, 0, "obj");
  Poke<uint32_t>(&reply, kMagicAt, 0x53565544);
  auto result = DecodeSandboxReply(reply, 0);
  EXPECT_TRUE(absl::IsDataLoss(result.status())) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("magic"));
  EXPECT_EQ(SandboxReplyBodyBytes(reply), std::nullopt);

  reply = EncodeSandboxReply(true, 0, "obj");
  Poke<int32_t>(&reply, kOkAt, 2);
  EXPECT_TRUE(absl::IsDataLoss(DecodeSandboxReply(reply, 0).status()));
}

TEST(PatchSandboxReplyTest, APayloadLongerThanTheDataOrTheCapIsDamaged) {
  std::string reply = EncodeSandboxReply(true, 0, "obj");
  Poke<uint64_t>(&reply, kPayloadBytesAt, 4);  // One byte more than sent.
  auto result = DecodeSandboxReply(reply, 0);
  EXPECT_TRUE(absl::IsDataLoss(result.status())) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("its header declares"));
  // The body is cut short: the reader would wait for the missing byte.
  EXPECT_EQ(SandboxReplyBodyBytes(reply), 4u);
  EXPECT_TRUE(absl::IsDataLoss(DecodeSandboxReply(reply + "xy", 0).status()));  // And longer.

  for (uint64_t declared : {kSandboxMaxPayloadBytes + 1, std::numeric_limits<uint64_t>::max()}) {
    Poke<uint64_t>(&reply, kPayloadBytesAt, declared);
    result = DecodeSandboxReply(reply, 0);
    EXPECT_TRUE(absl::IsDataLoss(result.status())) << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("at most"));
    EXPECT_EQ(SandboxReplyBodyBytes(reply), std::nullopt);
  }
  reply = EncodeSandboxReply(true, 0, "obj");
  Poke<uint32_t>(&reply, kCallCountsAt, kSandboxMaxCallCounts + 1);
  EXPECT_EQ(SandboxReplyBodyBytes(reply), std::nullopt);
  EXPECT_THAT(DecodeSandboxReply(reply, 0).status().message(), HasSubstr("at most"));
}

TEST(PatchSandboxReplyTest, CallCountsMustMatchTheProbedKernels) {
  const std::string reply = EncodeSandboxReply(true, 0, "obj", {1, 2, 3});
  EXPECT_TRUE(DecodeSandboxReply(reply, 3).ok());
  for (size_t expected : {0u, 2u, 4u}) {
    auto result = DecodeSandboxReply(reply, expected);
    EXPECT_TRUE(absl::IsDataLoss(result.status())) << expected << ": " << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("call counts"));
  }
  // A count cut in half.
  EXPECT_TRUE(absl::IsDataLoss(DecodeSandboxReply(reply.substr(0, reply.size() - 4), 3).status()));
}

TEST(PatchSandboxReplyTest, AnOkReplyWithoutObjectCodeIsDamaged) {
  auto result = DecodeSandboxReply(EncodeSandboxReply(true, 0, ""), 0);
  EXPECT_TRUE(absl::IsDataLoss(result.status())) << result.status();
}

// ---- The job ----

// A small job as the server builds it, on a hand-written model header of two kernels.
pb::SandboxJob SmallJob() {
  pb::SandboxJob job;
  pb::CompiledModelHeader* model = job.mutable_model();
  model->set_name("two_adds");
  model->set_symbol("two_adds");
  pb::TensorSignature* in = model->add_inputs();
  in->set_name("x");
  in->set_dtype(static_cast<int32_t>(DType::kFloat32));
  pb::SymDim* batch = in->add_shape();
  batch->set_coef(1);
  batch->set_power(1);
  in->add_shape()->set_coef(2);
  for (int i = 0; i < 2; ++i) {
    pb::KernelFunction* k = model->add_kernels();
    k->set_index(i);
    k->set_symbol(absl::StrCat("k", i));
  }
  job.set_object_code("base object code");
  job.set_weights_bytes(64);
  pb::SandboxLayer* layer = job.add_layers();
  layer->set_kind(pb::SandboxLayer::OBJECT);
  layer->set_code("layer object code");
  pb::SandboxSlot* layer_slot = layer->add_slots();
  layer_slot->set_slot(0);
  layer_slot->set_symbol("k0.patch1");
  job.set_patch_ir("define i32 @k1.patch2(ptr %args, i64 %batch) { ret i32 0 }");
  pb::SandboxSlot* slot = job.add_patch_slots();
  slot->set_slot(1);
  slot->set_symbol("k1.patch2");
  pb::SandboxTensor* t = job.add_probe_sets()->add_tensors();
  t->set_dtype(static_cast<int32_t>(DType::kFloat32));
  t->add_shape(3);
  t->add_shape(2);
  t->set_data(std::string(3 * 2 * sizeof(float), '\0'));
  return job;
}

pb::SandboxTensor* ProbeTensor(pb::SandboxJob* job) {
  return job->mutable_probe_sets(0)->mutable_tensors(0);
}

void ExpectDamaged(const pb::SandboxJob& job, const std::string& message) {
  absl::Status s = CheckSandboxJob(job, job.weights_bytes());
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(message));
}

TEST(PatchSandboxJobTest, ASoundJobPasses) {
  const pb::SandboxJob job = SmallJob();
  EXPECT_TRUE(CheckSandboxJob(job, 64).ok()) << CheckSandboxJob(job, 64);
  std::vector<HostTensor> inputs = SandboxProbeInputs(job.probe_sets(0));
  ASSERT_EQ(inputs.size(), 1u);
  EXPECT_EQ(inputs[0].TypeString(), "float32[3,2]");
  EXPECT_EQ(SandboxJobCallCounts(job.SerializeAsString()), 1u);

  // String tensors and scalars too.
  pb::SandboxJob strings = SmallJob();
  pb::SandboxTensor* s = ProbeTensor(&strings);
  s->set_dtype(static_cast<int32_t>(DType::kString));
  s->clear_data();
  s->clear_shape();
  s->add_shape(2);
  s->add_strings("a");
  s->add_strings("");
  pb::SandboxTensor* scalar = strings.mutable_probe_sets(0)->add_tensors();
  scalar->set_dtype(static_cast<int32_t>(DType::kInt64));
  scalar->set_data(std::string(8, '\x01'));
  pb::SandboxTensor* empty = strings.mutable_probe_sets(0)->add_tensors();
  empty->set_dtype(static_cast<int32_t>(DType::kFloat32));
  empty->add_shape(0);
  empty->add_shape(int64_t{1} << 62);
  ASSERT_TRUE(CheckSandboxJob(strings, 64).ok()) << CheckSandboxJob(strings, 64);
  inputs = SandboxProbeInputs(strings.probe_sets(0));
  ASSERT_EQ(inputs.size(), 3u);
  EXPECT_EQ(inputs[0].strings(), (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(inputs[1].TypeString(), "int64[]");
  EXPECT_EQ(inputs[2].byte_size(), 0u);
}

TEST(PatchSandboxJobTest, AJobAsTheServerBuildsItPasses) {
  auto compiled = CompileOnnxBytes(testing::TwoBinaryOps("two_adds", 8, "Add", 1.0f, "Add", 2.0f));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  pb::SandboxJob job = SmallJob();
  *job.mutable_model() = EncodeModelHeader(*compiled);
  job.set_object_code(compiled->object_code);
  EXPECT_TRUE(CheckSandboxJob(job, 64).ok()) << CheckSandboxJob(job, 64);
}

TEST(PatchSandboxJobTest, ASlotOutOfRangeIsRefused) {
  for (int32_t slot : {2, -1, std::numeric_limits<int32_t>::max()}) {
    pb::SandboxJob job = SmallJob();
    job.mutable_patch_slots(0)->set_slot(slot);
    ExpectDamaged(job, "the sandbox's job names a kernel slot out of range");
    job = SmallJob();
    job.mutable_layers(0)->mutable_slots(0)->set_slot(slot);
    ExpectDamaged(job, "the sandbox's job names a kernel slot out of range");
  }
  pb::SandboxJob twice = SmallJob();
  twice.add_patch_slots()->set_slot(1);
  ExpectDamaged(twice, "twice");
  pb::SandboxJob none = SmallJob();
  none.clear_patch_slots();
  ExpectDamaged(none, "names no kernel slot");
}

TEST(PatchSandboxJobTest, AShapeWhoseSizeOverflowsIsRefused) {
  pb::SandboxJob job = SmallJob();
  pb::SandboxTensor* t = ProbeTensor(&job);
  t->clear_shape();
  t->add_shape(int64_t{1} << 32);
  t->add_shape(int64_t{1} << 32);
  ExpectDamaged(job, "overflows");
  // A later zero does not save it: the child multiplies in order.
  t->add_shape(0);
  ExpectDamaged(job, "overflows");
  // Nor does the element size: 2^61 float32 elements are 2^63 bytes.
  t->clear_shape();
  t->add_shape(int64_t{1} << 61);
  ExpectDamaged(job, "data bytes for");
}

TEST(PatchSandboxJobTest, DataShorterOrLongerThanTheShapeIsRefused) {
  pb::SandboxJob job = SmallJob();
  ProbeTensor(&job)->mutable_data()->pop_back();
  ExpectDamaged(job, "the sandbox's probe input is damaged: set 0, tensor 0: 23 data bytes");
  ProbeTensor(&job)->mutable_data()->append("xy");
  ExpectDamaged(job, "25 data bytes");
}

TEST(PatchSandboxJobTest, ANegativeDimIsRefused) {
  pb::SandboxJob job = SmallJob();
  pb::SandboxTensor* t = ProbeTensor(&job);
  t->clear_shape();
  t->add_shape(-3);
  t->add_shape(-2);  // Whose product would match the data.
  ExpectDamaged(job, "negative dim -3");
}

TEST(PatchSandboxJobTest, AnUnknownDtypeIsRefused) {
  for (int32_t dtype : {0, 14, 15, 17, -1}) {
    pb::SandboxJob job = SmallJob();
    ProbeTensor(&job)->set_dtype(dtype);
    ExpectDamaged(job, absl::StrCat("unknown dtype ", dtype));
  }
}

TEST(PatchSandboxJobTest, StringsOnlyInStringTensors) {
  pb::SandboxJob job = SmallJob();
  ProbeTensor(&job)->add_strings("x");
  ExpectDamaged(job, "strings in a float32 tensor");

  job = SmallJob();
  pb::SandboxTensor* t = ProbeTensor(&job);
  t->set_dtype(static_cast<int32_t>(DType::kString));
  ExpectDamaged(job, "a string tensor with numeric data");
  t->clear_data();
  t->add_strings("only one");
  ExpectDamaged(job, "1 strings for 6 elements");
}

TEST(PatchSandboxJobTest, AnUnknownLayerKindIsRefused) {
  pb::SandboxJob job = SmallJob();
  job.mutable_layers(0)->set_kind(static_cast<pb::SandboxLayer::Kind>(7));
  ExpectDamaged(job, "the sandbox's job is damaged: layer 0 has the unknown kind 7");
}

TEST(PatchSandboxJobTest, TheWeightsMustBeTheSizeTheJobNames) {
  const pb::SandboxJob job = SmallJob();
  absl::Status s = CheckSandboxJob(job, 63);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("the sandbox could not read the version's weights"));
}

TEST(PatchSandboxJobTest, ADamagedModelHeaderIsRefused) {
  pb::SandboxJob job = SmallJob();
  job.mutable_model()->mutable_kernels(1)->set_index(5);
  ExpectDamaged(job, "the sandbox's job is damaged: kernel table out of order");
  job = SmallJob();
  job.clear_object_code();
  ExpectDamaged(job, "the sandbox's job is damaged: no object code");
}

TEST(PatchSandboxJobTest, CallCountsFollowTheProbedSlots) {
  pb::SandboxJob job = SmallJob();
  job.add_patch_slots()->set_slot(0);
  EXPECT_EQ(SandboxJobCallCounts(job.SerializeAsString()), 2u);
  job.clear_probe_sets();
  EXPECT_EQ(SandboxJobCallCounts(job.SerializeAsString()), 0u);
  EXPECT_EQ(SandboxJobCallCounts(""), 0u);
  // Not a message: a length running past the end.
  EXPECT_EQ(SandboxJobCallCounts(std::string("\x32\x05\x08", 3)), std::nullopt);
  // A field 6 of another wire type is an unknown field, as the parser reads it.
  const std::string varint6("\x30\x01\x3a\x00", 4);
  pb::SandboxJob parsed;
  ASSERT_TRUE(parsed.ParseFromString(varint6));
  EXPECT_EQ(parsed.patch_slots_size(), 0);
  EXPECT_EQ(SandboxJobCallCounts(varint6), 0u);
}

// ---- RunInSandbox against a stand-in child ----

// RunInSandbox with $CUVIL_PATCH_SANDBOX a shell script that writes given bytes to the reply
// descriptor and exits with a given status, as a child whose patch wrote them would.
class PatchSandboxRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/cuvil-fake-sandbox-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    unsetenv("CUVIL_PATCH_SANDBOX");
    for (const char* f : {"/reply", "/child"}) unlink((dir_ + f).c_str());
    rmdir(dir_.c_str());
  }

  absl::StatusOr<SandboxResult> Run(const std::string& reply, int exit_status,
                                    const pb::SandboxJob& job) {
    std::ofstream(dir_ + "/reply", std::ios::binary) << reply;
    const std::string child = dir_ + "/child";
    std::ofstream(child) << "#!/bin/sh\ncat '" << dir_ << "/reply' >&5\nexit " << exit_status
                         << "\n";
    chmod(child.c_str(), 0700);
    setenv("CUVIL_PATCH_SANDBOX", child.c_str(), 1);
    SandboxJob sandbox_job;
    sandbox_job.job = job.SerializeAsString();
    sandbox_job.timeout_seconds = 20;
    return RunInSandbox(sandbox_job);
  }

  std::string dir_;
};

TEST_F(PatchSandboxRunTest, AnOkReplyIsTheResult) {
  auto result = Run(EncodeSandboxReply(true, 1, "object code", {7}), 0, SmallJob());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->object_code, "object code");
  EXPECT_EQ(result->probe_code, 1);
  EXPECT_THAT(result->kernel_calls, ElementsAre(7u));
  EXPECT_GT(result->child_ms, 0);
  // Without probe sets the reply carries no counts.
  pb::SandboxJob unprobed = SmallJob();
  unprobed.clear_probe_sets();
  result = Run(EncodeSandboxReply(true, 0, "object code"), 0, unprobed);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->kernel_calls.empty());
}

TEST_F(PatchSandboxRunTest, ARefusalIsTheChildsMessage) {
  auto result = Run(EncodeSandboxReply(false, 0, "does not parse"), 0, SmallJob());
  EXPECT_TRUE(absl::IsFailedPrecondition(result.status())) << result.status();
  EXPECT_EQ(result.status().message(), "patch refused by the sandbox: does not parse");
}

TEST_F(PatchSandboxRunTest, ADamagedReplyIsRefusedNamingTheDamage) {
  auto result = Run("not a reply, but long enough for a header", 0, SmallJob());
  EXPECT_TRUE(absl::IsFailedPrecondition(result.status())) << result.status();
  EXPECT_THAT(result.status().message(),
              HasSubstr("patch refused by the sandbox: the child exited with status 0 after a "
                        "damaged reply (the sandbox's reply has a bad magic number"));
  // One probed kernel, no count.
  result = Run(EncodeSandboxReply(true, 0, "object code"), 0, SmallJob());
  EXPECT_TRUE(absl::IsFailedPrecondition(result.status())) << result.status();
  EXPECT_THAT(result.status().message(),
              HasSubstr("after a damaged reply (the sandbox's reply carries 0 call counts for 1 "
                        "probed kernels)"));
}

TEST_F(PatchSandboxRunTest, AReplyCutShortIsTheChildsExit) {
  const std::string reply = EncodeSandboxReply(true, 0, "object code", {7});
  auto result = Run(reply.substr(0, reply.size() - 1), 3, SmallJob());
  EXPECT_TRUE(absl::IsFailedPrecondition(result.status())) << result.status();
  EXPECT_EQ(result.status().message(),
            "patch refused by the sandbox: the child exited with status 3");
  result = Run("", 4, SmallJob());
  EXPECT_EQ(result.status().message(),
            "patch refused by the sandbox: the child exited with status 4");
}

}  // namespace
}  // namespace cuvil::jitcache_internal
