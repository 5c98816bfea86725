// A serialized inference::ModelInferRequest read as the gRPC front end does (its own wire reader,
// raw contents apart: grpc_infer_wire.h), checked against protobuf's parse of the same bytes, and
// validated against the example mlp (whatever model it names); requests that validate are run.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuvil/server/infer_request_builder.h"
#include "fuzz_support.h"
#include "grpc_infer_decode.h"
#include "grpc_infer_wire.h"
#include "grpc_service.pb.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cuvil::fuzz::ExampleModels();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The wire arrives in slices: cut it every 1 + size % 61 bytes so fields straddle them.
  const size_t piece = 1 + size % 61;
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < size; at += piece) {
    slices.emplace_back(data + at, std::min(piece, size - at));
  }
  grpc::ByteBuffer wire(slices.data(), slices.size());
  static auto buffers = std::make_shared<cuvil::RecycledBuffers>(4, 1 << 20);
  cuvil::SplitInferRequest split;
  const bool read = cuvil::ReadModelInferRequest(wire, buffers, &split).ok();
  // The reader accepts what protobuf accepts and reads the same raw contents. (Protobuf alone
  // takes groups in unknown fields; no KServe client sends them.)
  inference::ModelInferRequest reference;
  const bool parsed = reference.ParseFromArray(data, static_cast<int>(size));
  if (read && !parsed) __builtin_trap();
  if (!read) return 0;
  if (split.raw.size() != static_cast<size_t>(reference.raw_input_contents_size()))
    __builtin_trap();
  for (size_t i = 0; i < split.raw.size(); ++i) {
    const std::string& want = reference.raw_input_contents(static_cast<int>(i));
    if (split.raw[i].size != want.size() ||
        (want.size() != 0 && std::memcmp(split.raw[i].data, want.data(), want.size()) != 0)) {
      __builtin_trap();
    }
  }
  absl::StatusOr<std::shared_ptr<cuvil::ModelVersion>> model =
      cuvil::fuzz::ExampleModels().Get("mlp", "");
  if (!model.ok()) __builtin_trap();
  absl::StatusOr<cuvil::WireRequest> decoded =
      cuvil::DecodeModelInferRequest(split.header, &split.raw);
  if (!decoded.ok()) return 0;
  auto request = cuvil::BuildInferenceRequest(**model, *std::move(decoded));
  if (!request.ok()) return 0;
  (void)cuvil::InferBlocking(**model, *std::move(request));
  return 0;
}
