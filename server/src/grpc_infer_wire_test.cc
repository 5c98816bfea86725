#include "grpc_infer_wire.h"

#include <grpcpp/support/slice.h>
#include <sys/resource.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

// `bytes` as a gRPC buffer of slices of at most `piece` bytes, as a large message arrives.
grpc::ByteBuffer BufferOf(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

inference::ModelInferRequest SampleRequest() {
  inference::ModelInferRequest q;
  q.set_model_name("resnet");
  q.set_model_version("3");
  q.set_id("req-7");
  (*q.mutable_parameters())["priority"].set_uint64_param(2);
  for (const char* name : {"a", "b", "c"}) {
    auto* in = q.add_inputs();
    in->set_name(name);
    in->set_datatype("FP32");
    in->add_shape(1);
  }
  q.add_outputs()->set_name("y");
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  q.add_raw_input_contents(big);
  q.add_raw_input_contents("");
  q.add_raw_input_contents("xyz");
  return q;
}

TEST(GrpcInferWireTest, ReadsWhatProtobufReadsWithRawContentsApart) {
  const inference::ModelInferRequest q = SampleRequest();
  const std::string bytes = q.SerializeAsString();
  auto buffers = std::make_shared<RecycledBuffers>(4, 8 << 20);
  for (size_t piece : {size_t{1} << 30, size_t{8192}, size_t{7}}) {
    grpc::ByteBuffer wire = BufferOf(bytes, piece);
    SplitInferRequest split;
    ASSERT_TRUE(ReadModelInferRequest(wire, buffers, &split).ok()) << piece;
    inference::ModelInferRequest header = q;
    header.clear_raw_input_contents();
    EXPECT_EQ(split.header.SerializeAsString(), header.SerializeAsString());
    ASSERT_EQ(split.raw.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      const std::string& want = q.raw_input_contents(i);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(split.raw[i].data), split.raw[i].size),
                want);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(split.raw[i].data) % 64, 0u);
    }
    EXPECT_NE(split.holder, nullptr);
  }
}

// Every prefix of a request (most are truncated mid-field): read exactly when protobuf reads it,
// and then with the same raw contents.
TEST(GrpcInferWireTest, AgreesWithProtobufOnEveryTruncation) {
  inference::ModelInferRequest q = SampleRequest();
  q.mutable_raw_input_contents(0)->resize(300);
  const std::string bytes = q.SerializeAsString();
  auto buffers = std::make_shared<RecycledBuffers>(4, 1 << 20);
  int accepted = 0;
  for (size_t n = 0; n <= bytes.size(); ++n) {
    const std::string prefix = bytes.substr(0, n);
    inference::ModelInferRequest reference;
    const bool protobuf_ok = reference.ParseFromString(prefix);
    grpc::ByteBuffer wire = BufferOf(prefix.empty() ? std::string() : prefix, 64);
    SplitInferRequest split;
    absl::Status read = ReadModelInferRequest(wire, buffers, &split);
    ASSERT_EQ(read.ok(), protobuf_ok) << "prefix " << n << ": " << read;
    if (!read.ok()) {
      EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(read.message().find("malformed ModelInferRequest"), std::string::npos);
      continue;
    }
    ++accepted;
    ASSERT_EQ(split.raw.size(), static_cast<size_t>(reference.raw_input_contents_size()));
    for (size_t i = 0; i < split.raw.size(); ++i) {
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(split.raw[i].data), split.raw[i].size),
                reference.raw_input_contents(static_cast<int>(i)));
    }
  }
  EXPECT_GT(accepted, 3);  // The empty prefix and every whole-field boundary.
}

TEST(GrpcInferWireTest, ALengthPastTheEndIsRefusedBeforeAnyBufferIsTaken) {
  // Field 7, length-delimited, claiming 2^31 - 1 bytes of which 3 follow.
  const std::string bytes = std::string("\x3a\xff\xff\xff\xff\x07", 6) + "abc";
  grpc::ByteBuffer wire = BufferOf(bytes, 1024);
  auto buffers = std::make_shared<RecycledBuffers>(4, 1 << 20);
  SplitInferRequest split;
  absl::Status read = ReadModelInferRequest(wire, buffers, &split);
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(read.message().find("longer than the message"), std::string::npos) << read;
}

TEST(GrpcInferWireTest, AZeroTagIsRefusedAsProtobufRefusesIt) {
  // Found by fuzz_grpc_infer: a zero byte after the last field read as the end of the message.
  inference::ModelInferRequest q;
  q.set_model_name("mlp");
  q.add_raw_input_contents("abcd");
  const std::string bytes = q.SerializeAsString() + std::string(1, '\0');
  inference::ModelInferRequest reference;
  ASSERT_FALSE(reference.ParseFromString(bytes));
  auto buffers = std::make_shared<RecycledBuffers>(4, 1 << 20);
  grpc::ByteBuffer wire = BufferOf(bytes, 1024);
  SplitInferRequest split;
  EXPECT_EQ(ReadModelInferRequest(wire, buffers, &split).code(),
            absl::StatusCode::kInvalidArgument);
  // Also fuzz-found: a tag whose varint runs past 32 bits (CodedInputStream keeps the low bits).
  const std::string long_tag = q.SerializeAsString() + "\x8a\x80\x80\x80\x80\x01\x01x";
  ASSERT_FALSE(reference.ParseFromString(long_tag));
  grpc::ByteBuffer long_wire = BufferOf(long_tag, 1024);
  EXPECT_EQ(ReadModelInferRequest(long_wire, buffers, &split).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GrpcInferWireTest, WrittenResponseParsesWithItsRawOutputsAndReleasesThem) {
  inference::ModelInferResponse header;
  header.set_model_name("m");
  header.set_id("r1");
  header.add_outputs()->set_name("big");
  header.add_outputs()->set_name("shm");
  header.add_outputs()->set_name("small");
  auto big = std::make_shared<std::vector<uint8_t>>(100000);
  for (size_t i = 0; i < big->size(); ++i) (*big)[i] = static_cast<uint8_t>(i * 13);
  const uint8_t small[5] = {1, 2, 3, 4, 5};
  std::weak_ptr<std::vector<uint8_t>> watch = big;
  grpc::ByteBuffer wire;
  WriteModelInferResponse(header, {{big->data(), big->size()}, {}, {small, 5}}, big, &wire);
  big.reset();
  EXPECT_FALSE(watch.expired());  // The big output is referenced, not copied.
  inference::ModelInferResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(wire)));
  EXPECT_EQ(parsed.model_name(), "m");
  EXPECT_EQ(parsed.outputs_size(), 3);
  ASSERT_EQ(parsed.raw_output_contents_size(), 3);
  const std::string& got = parsed.raw_output_contents(0);
  ASSERT_EQ(got.size(), 100000u);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(static_cast<uint8_t>(got[i]), (i * 13) & 0xff);
  EXPECT_EQ(parsed.raw_output_contents(1), "");
  EXPECT_EQ(parsed.raw_output_contents(2), std::string("\x01\x02\x03\x04\x05", 5));
  wire.Clear();
  EXPECT_TRUE(watch.expired());
}

// The process's peak resident memory so far, in bytes.
size_t PeakRss() {
  struct rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) * 1024;
}

std::string Repeat(const std::string& piece, size_t n) {
  std::string out;
  out.reserve(piece.size() * n);
  for (size_t i = 0; i < n; ++i) out += piece;
  return out;
}

// The limits of a model taking one input and one output, as the service derives them.
InferWireLimitsFn OneInputModel(int* calls, InferWireCounts* seen = nullptr) {
  return [calls, seen](const InferWireCounts& counts) -> absl::StatusOr<InferWireLimits> {
    ++*calls;
    if (seen != nullptr) *seen = counts;
    InferWireLimits limits;
    limits.max_inputs = 1;
    limits.max_outputs = 1;
    limits.max_declared_bytes = 64 << 20;
    limits.what = "model 'm'";
    return limits;
  };
}

// Issue 38: 60 MiB of 1-byte raw entries took a 64-byte prefaulted slot each (1.7 GB) before
// the count was checked. Millions of them are now refused by the first pass: no buffer, no slot,
// and no growth of the process's memory beyond the message itself.
TEST(GrpcInferWireTest, MillionsOfOneByteRawEntriesAreRefusedWithoutAllocatingPerEntry) {
  inference::ModelInferRequest q;
  q.set_model_name("m");
  auto* in = q.add_inputs();
  in->set_name("x");
  in->set_datatype("UINT8");
  in->add_shape(1);
  const std::string bytes = q.SerializeAsString() + Repeat(std::string("\x3a\x01\x07", 3), 3 << 20);
  grpc::ByteBuffer wire = BufferOf(bytes, 1 << 20);
  auto buffers = std::make_shared<RecycledBuffers>(4, 8 << 20);
  const size_t peak_before = PeakRss();
  int calls = 0;
  SplitInferRequest split;
  absl::Status read = ReadModelInferRequest(wire, buffers, &split, OneInputModel(&calls));
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.message(), HasSubstr("more than 4096 raw_input_contents entries"));
  EXPECT_EQ(calls, 0);  // Stopped at the hard cap, before the model was even looked up.
  EXPECT_EQ(buffers->allocated_bytes(), 0u);
  EXPECT_EQ(split.reserved_bytes, 0u);
  EXPECT_TRUE(split.raw.empty());
  EXPECT_EQ(split.header.inputs_size(), 0);  // Nothing parsed either.
  // Before: 3M entries x (64-byte slot + 16-byte view) = 240 MB.
  EXPECT_LT(PeakRss() - peak_before, size_t{32} << 20);
}

// Below the hard cap, the model's own count decides, with a message naming both.
TEST(GrpcInferWireTest, RawEntriesAboveTheModelsInputsAreRefusedBeforeAnyBufferIsTaken) {
  inference::ModelInferRequest q;
  q.set_model_name("m");
  auto* in = q.add_inputs();
  in->set_name("x");
  in->set_datatype("UINT8");
  in->add_shape(1);
  for (int i = 0; i < 3; ++i) q.add_raw_input_contents("\x07");
  grpc::ByteBuffer wire = BufferOf(q.SerializeAsString(), 1 << 20);
  auto buffers = std::make_shared<RecycledBuffers>(4, 8 << 20);
  int calls = 0;
  InferWireCounts seen;
  SplitInferRequest split;
  absl::Status read = ReadModelInferRequest(wire, buffers, &split, OneInputModel(&calls, &seen));
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(read.message(),
            "the request has 3 raw_input_contents entries; model 'm' takes at most 1");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen.model_name, "m");
  EXPECT_EQ(seen.inputs, 1u);
  EXPECT_EQ(seen.raw_entries, 3u);
  EXPECT_EQ(seen.raw_bytes, 3u);
  EXPECT_EQ(buffers->allocated_bytes(), 0u);
}

// Issue 38: 60 MiB of empty `inputs` parsed into 6.8 GB of messages before "unknown model".
TEST(GrpcInferWireTest, MillionsOfEmptyInputsAreRefusedWithoutParsingThem) {
  const std::string bytes =
      std::string("\x0a\x04nope", 6) + Repeat(std::string("\x2a\x00", 2), 3 << 20);
  grpc::ByteBuffer wire = BufferOf(bytes, 1 << 20);
  auto buffers = std::make_shared<RecycledBuffers>(4, 8 << 20);
  const size_t peak_before = PeakRss();
  int calls = 0;
  SplitInferRequest split;
  absl::Status read = ReadModelInferRequest(
      wire, buffers, &split, [&](const InferWireCounts&) -> absl::StatusOr<InferWireLimits> {
        ++calls;
        return absl::NotFoundError("unknown model 'nope'");
      });
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.message(), HasSubstr("more than 4096 inputs"));
  EXPECT_EQ(split.header.inputs_size(), 0);
  EXPECT_LT(PeakRss() - peak_before, size_t{32} << 20);
  // Fewer of them: the model is looked up once everything is counted, and its error returned
  // before any of them is parsed.
  grpc::ByteBuffer few =
      BufferOf(std::string("\x0a\x04nope", 6) + Repeat(std::string("\x2a\x00", 2), 100), 64);
  read = ReadModelInferRequest(few, buffers, &split,
                               [&](const InferWireCounts& c) -> absl::StatusOr<InferWireLimits> {
                                 ++calls;
                                 EXPECT_EQ(c.model_name, "nope");
                                 EXPECT_EQ(c.inputs, 100u);
                                 return absl::NotFoundError("unknown model 'nope'");
                               });
  EXPECT_EQ(read.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(split.header.inputs_size(), 0);
  EXPECT_EQ(buffers->allocated_bytes(), 0u);
}

// Repeated fields nested in one input are bounded too: dims, parameters, typed contents, and
// fields protobuf would keep as unknown.
TEST(GrpcInferWireTest, NestedRepeatedFieldsAreCountedAndBounded) {
  auto buffers = std::make_shared<RecycledBuffers>(4, 8 << 20);
  auto read = [&](const inference::ModelInferRequest& q, const std::string& extra = "") {
    grpc::ByteBuffer wire = BufferOf(q.SerializeAsString() + extra, 4096);
    SplitInferRequest split;
    int calls = 0;
    return ReadModelInferRequest(wire, buffers, &split, OneInputModel(&calls));
  };
  inference::ModelInferRequest dims;
  dims.set_model_name("m");
  auto* shaped = dims.add_inputs();
  for (int i = 0; i < 1000000; ++i) shaped->add_shape(1);
  absl::Status s = read(dims);
  EXPECT_THAT(s.message(), HasSubstr("more than 64 shape dims in one input")) << s;

  inference::ModelInferRequest params;
  params.set_model_name("m");
  auto& map = *params.add_inputs()->mutable_parameters();
  for (int i = 0; i < 100000; ++i) map[std::to_string(i)].set_bool_param(true);
  s = read(params);
  EXPECT_THAT(s.message(), HasSubstr("more than 64 parameters in one tensor")) << s;

  // 8 bytes parsed per 1-byte varint: 10M of them would be 80 MB for a 10 MB message.
  inference::ModelInferRequest contents;
  contents.set_model_name("m");
  auto* in = contents.add_inputs();
  in->set_name("x");
  in->set_datatype("INT64");
  in->add_shape(10000000);
  for (int i = 0; i < 10000000; ++i) in->mutable_contents()->add_int64_contents(0);
  s = read(contents);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("typed contents take 80000000 bytes")) << s;

  inference::ModelInferRequest unknown;
  unknown.set_model_name("m");
  s = read(unknown, Repeat(std::string("\x78\x00", 2), 100000));  // Field 15, varint 0.
  EXPECT_THAT(s.message(), HasSubstr("more than 64 unknown fields")) << s;
  EXPECT_EQ(buffers->allocated_bytes(), 0u);
}

// The buffer raw entries are copied into is bounded by what the inputs declare.
TEST(GrpcInferWireTest, DeclaredShapesBoundTheRawBuffer) {
  auto buffers = std::make_shared<RecycledBuffers>(4, 8 << 20);
  int calls = 0;
  auto read = [&](const inference::ModelInferRequest& q, SplitInferRequest* split) {
    grpc::ByteBuffer wire = BufferOf(q.SerializeAsString(), 4096);
    return ReadModelInferRequest(wire, buffers, split, OneInputModel(&calls));
  };
  inference::ModelInferRequest q;
  q.set_model_name("m");
  auto* in = q.add_inputs();
  in->set_name("x");
  in->set_datatype("FP32");
  in->add_shape(4294967296);
  in->add_shape(4294967296);
  q.add_raw_input_contents(std::string(16, '\0'));
  SplitInferRequest split;
  absl::Status s = read(q, &split);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "input 'x': shape [4294967296,4294967296] of FP32 declares more than the 67108864 "
            "bytes a request may carry");
  EXPECT_EQ(split.reserved_bytes, 0u);

  in->set_shape(0, 1);
  in->set_shape(1, 2);  // 8 bytes declared, 16 sent.
  s = read(q, &split);
  EXPECT_EQ(s.message(),
            "raw_input_contents hold 16 bytes, more than the 8 bytes the inputs' shapes and "
            "datatypes declare");
  EXPECT_EQ(buffers->allocated_bytes(), 0u);

  in->set_shape(1, 4);  // Exactly what is sent: read, into one 64-byte slot.
  s = read(q, &split);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(split.reserved_bytes, 64u);
  ASSERT_EQ(split.raw.size(), 1u);
  EXPECT_EQ(split.raw[0].size, 16u);
}

}  // namespace
}  // namespace cuvil
