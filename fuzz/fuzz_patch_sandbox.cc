// The patch sandbox's messages (jitcache/src/patch_sandbox.h), both untrusted: the reply a child
// running hostile patch code writes to the server, and the job the child reads. The first byte
// picks the decoder, the rest is its input:
//   even  the rest is a reply: DecodeSandboxReply expecting (first byte >> 1) call counts,
//         checked against SandboxReplyBodyBytes and re-encoded when it decodes
//   odd   the rest is a serialized cuvil.jitcache.v1.SandboxJob: SandboxJobCallCounts against
//         protobuf's parse, then CheckSandboxJob (bit 1 set: with weights one byte off) and,
//         when it passes, what the child then trusts: slots in range, SandboxProbeInputs
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "fuzz_support.h"
#include "google/protobuf/stubs/logging.h"
#include "patch_sandbox.h"
#include "patch_sandbox.pb.h"

namespace {

namespace pb = ::cuvil::jitcache::v1;
namespace sandbox = ::cuvil::jitcache_internal;

void Check(bool condition) {
  if (!condition) std::abort();
}

void Reply(std::string_view bytes, size_t expected_call_counts) {
  absl::StatusOr<sandbox::SandboxResult> result =
      sandbox::DecodeSandboxReply(bytes, expected_call_counts);
  const std::optional<uint64_t> body = sandbox::SandboxReplyBodyBytes(bytes);
  // What the parent reads after the header is what the decoder wants to see.
  if (!body.has_value() || bytes.size() != sandbox::kSandboxReplyHeaderBytes + *body) {
    Check(!result.ok() && absl::IsDataLoss(result.status()));
    return;
  }
  if (!result.ok()) {
    Check(absl::IsDataLoss(result.status()) || absl::IsFailedPrecondition(result.status()));
    return;
  }
  Check(!result->object_code.empty());
  Check(result->kernel_calls.size() == expected_call_counts);
  Check(sandbox::EncodeSandboxReply(true, result->probe_code, result->object_code,
                                    result->kernel_calls) == bytes);
}

void Job(std::string_view bytes, bool weights_off) {
  const std::optional<size_t> calls = sandbox::SandboxJobCallCounts(bytes);
  pb::SandboxJob job;
  if (!job.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  // A parsed job's counts are what the child sends; the scan may refuse less than the parser.
  if (calls.has_value()) {
    Check(*calls == (job.probe_sets_size() > 0 ? static_cast<size_t>(job.patch_slots_size()) : 0));
  }
  const size_t weights = static_cast<size_t>(job.weights_bytes()) + (weights_off ? 1 : 0);
  const absl::Status status = sandbox::CheckSandboxJob(job, weights);
  if (weights_off) Check(!status.ok());
  if (!status.ok()) {
    Check(absl::IsDataLoss(status));
    return;
  }
  const int kernels = job.model().kernels_size();
  for (const pb::SandboxSlot& s : job.patch_slots()) Check(s.slot() >= 0 && s.slot() < kernels);
  for (const pb::SandboxLayer& layer : job.layers()) {
    Check(pb::SandboxLayer::Kind_IsValid(layer.kind()));
    for (const pb::SandboxSlot& s : layer.slots()) Check(s.slot() >= 0 && s.slot() < kernels);
  }
  for (const pb::SandboxInputSet& set : job.probe_sets()) {
    std::vector<cuvil::HostTensor> inputs = sandbox::SandboxProbeInputs(set);
    Check(static_cast<int>(inputs.size()) == set.tensors_size());
    for (int i = 0; i < set.tensors_size(); ++i) {
      const pb::SandboxTensor& t = set.tensors(i);
      if (inputs[i].dtype() == cuvil::DType::kString) {
        Check(inputs[i].num_elements() == t.strings_size());
      } else {
        Check(inputs[i].byte_size() == t.data().size());
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cuvil::fuzz::QuietLogs();
  google::protobuf::SetLogHandler(nullptr);  // Each job with bad UTF-8 in a string field logs.
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((mode & 1) == 0) {
    Reply(rest, mode >> 1);
  } else {
    Job(rest, (mode & 2) != 0);
  }
  return 0;
}
