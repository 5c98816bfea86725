#include "infer_client.h"

#include <algorithm>

#include "grpc_client.h"
#include "http_client.h"

namespace cuvil::perf {

void RemoveSequenceTensors(const std::vector<std::string>& filled,
                           const std::vector<std::string>& state_outputs, ModelInfo* info) {
  auto drop = [](const std::vector<std::string>& names, std::vector<TensorInfo>* tensors) {
    tensors->erase(std::remove_if(tensors->begin(), tensors->end(),
                                  [&](const TensorInfo& t) {
                                    return std::find(names.begin(), names.end(), t.name) !=
                                           names.end();
                                  }),
                   tensors->end());
  };
  drop(filled, &info->inputs);
  drop(state_outputs, &info->outputs);
}

absl::StatusOr<std::unique_ptr<InferClient>> CreateClient(const ClientOptions& options) {
  switch (options.protocol) {
    case Protocol::kGrpc:
      return CreateGrpcClient(options);
    case Protocol::kHttp:
      return CreateHttpClient(options);
  }
  return absl::InvalidArgumentError("unknown protocol");
}

}  // namespace cuvil::perf
