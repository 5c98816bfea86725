// An HTTP infer body decoded as the HTTP front end does (JSON header, Triton's binary tensor
// extension) and validated against the example mlp; requests that validate are run.
// Input: "#<value>\n" first sends <value> as Inference-Header-Content-Length and the rest is the
// body; any other input is a plain JSON body.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cuvil/server/infer_request_builder.h"
#include "fuzz_support.h"
#include "http_infer_decode.h"
#include "http_json.h"

namespace {

void Decode(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  std::string header_value;
  bool has_header = false;
  if (input.starts_with('#')) {
    size_t newline = input.find('\n');
    if (newline == std::string::npos) return;
    header_value = input.substr(1, newline - 1);
    input.erase(0, newline + 1);
    has_header = true;
  }
  auto body = std::make_shared<std::string>(std::move(input));
  absl::StatusOr<size_t> json_size =
      cuvil::http_request::JsonHeaderSize(has_header ? &header_value : nullptr, body->size());
  if (!json_size.ok()) return;
  absl::StatusOr<nlohmann::json> doc =
      cuvil::http_request::ParseBody(std::string_view(*body).substr(0, *json_size));
  if (!doc.ok()) return;
  absl::StatusOr<cuvil::http_request::DecodedInfer> decoded =
      cuvil::http_request::DecodeInferBody(*doc, body, *json_size);
  if (!decoded.ok()) return;
  absl::StatusOr<std::shared_ptr<cuvil::ModelVersion>> model =
      cuvil::fuzz::ExampleModels().Get("mlp", "");
  if (!model.ok()) __builtin_trap();
  auto request = cuvil::BuildInferenceRequest(**model, std::move(decoded->wire));
  if (!request.ok()) return;
  (void)cuvil::InferBlocking(**model, *std::move(request));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cuvil::fuzz::ExampleModels();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Decode(data, size);
  } catch (const nlohmann::json::exception&) {
    // The server answers these with 400 (HttpServiceImpl::Guard): not a finding.
  }
  return 0;
}
