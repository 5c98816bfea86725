#include "grpc_infer_wire.h"

#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

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

}  // namespace
}  // namespace cuvil
