#include "cuvil/server/infer_request_builder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>

#include "absl/strings/str_cat.h"
#include "cuvil/observability/probes.h"
#include "cuvil/scheduler/request_validation.h"
#include "shared_memory_registry.h"

namespace cuvil {
namespace {

observability::FailureReason ReasonFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
      return observability::FailureReason::kInvalidArgument;
    case absl::StatusCode::kNotFound:
      return observability::FailureReason::kNotFound;
    case absl::StatusCode::kUnavailable:
      return observability::FailureReason::kRejected;
    case absl::StatusCode::kResourceExhausted:
      return observability::FailureReason::kRejected;
    case absl::StatusCode::kCancelled:
      return observability::FailureReason::kCanceled;
    case absl::StatusCode::kDeadlineExceeded:
      return observability::FailureReason::kTimeout;
    default:
      return observability::FailureReason::kInternal;
  }
}

std::atomic<int64_t> next_request_number{1};

absl::StatusOr<std::unique_ptr<InferenceRequest>> Build(
    const ModelVersion& model, WireRequest wire, const SharedMemoryRegistry* shared_memory,
    std::vector<SharedMemoryOutput>* shared_memory_outputs);

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceRequest>> BuildInferenceRequest(
    const ModelVersion& model, WireRequest wire, const SharedMemoryRegistry* shared_memory,
    std::vector<SharedMemoryOutput>* shared_memory_outputs) {
  auto request = Build(model, std::move(wire), shared_memory, shared_memory_outputs);
  if (!request.ok() && model.metrics()) model.metrics()->RecordFailure(ReasonFor(request.status()));
  return request;
}

namespace {

absl::StatusOr<std::unique_ptr<InferenceRequest>> Build(
    const ModelVersion& model, WireRequest wire, const SharedMemoryRegistry* shared_memory,
    std::vector<SharedMemoryOutput>* shared_memory_outputs) {
  const auto& specs = model.executable().inputs();
  int64_t max_batch = model.config().max_batch_size();
  bool batched = max_batch > 0;
  auto request = std::make_unique<InferenceRequest>();
  request->id = std::move(wire.id);
  request->inputs.resize(specs.size());
  std::vector<bool> seen(specs.size(), false);
  std::vector<std::shared_ptr<uint8_t>> realigned;  // Copies the request's inputs point into.
  uint64_t shared_memory_bytes = 0;  // Copied in from regions so far, over all inputs.
  int64_t batch = -1;
  for (WireInput& in : wire.inputs) {
    size_t index = 0;
    while (index < specs.size() && specs[index].name != in.name) ++index;
    if (index == specs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected input '", in.name, "' for model '", model.name(), "'"));
    }
    if (seen[index])
      return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "' given twice"));
    seen[index] = true;
    const TensorSpec& spec = specs[index];
    if (in.datatype != DTypeKServeName(spec.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "': expected datatype ",
                                                     DTypeKServeName(spec.dtype), ", got ",
                                                     in.datatype));
    }
    if (in.shared_memory.has_value()) {
      if (shared_memory == nullptr) {
        return absl::UnimplementedError(
            absl::StrCat("input '", in.name, "': shared memory is not available here"));
      }
      in.data = nullptr;
      in.byte_size = in.shared_memory->byte_size;
    }
    auto rows = ValidateInputTensor(spec, batched, max_batch, in.shape, in.byte_size);
    if (!rows.ok()) return rows.status();
    if (batched) {
      if (batch >= 0 && *rows != batch) {
        return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "': batch size ", *rows,
                                                       " differs from the other inputs' ", batch));
      }
      batch = *rows;
    }
    if (in.shared_memory.has_value()) {
      // Copied now, in the front end's thread: the request never points into shared memory,
      // which the client could change or shrink while the model runs.
      const SharedMemoryRef& ref = *in.shared_memory;
      auto region = shared_memory->Find(ref.region, in.name);
      if (!region.ok()) return region.status();
      // Checked before allocating: the shape alone may describe up to kMaxTensorBytes.
      if (auto s = (*region)->CheckRange(ref.offset, ref.byte_size, in.name); !s.ok()) return s;
      const uint64_t limit = shared_memory->limits().max_request_input_bytes;
      if (ref.byte_size > limit - std::min(limit, shared_memory_bytes)) {
        return absl::ResourceExhaustedError(
            absl::StrCat("input '", in.name, "': the request's shared memory inputs exceed ", limit,
                         " bytes (max_request_bytes)"));
      }
      shared_memory_bytes += ref.byte_size;
      RecycledBuffers::Buffer copy =
          RecycledBuffers::Acquire(shared_memory->input_buffers(), in.byte_size);
      if (auto s = (*region)->Read(ref.offset, ref.byte_size, copy.get(), in.name); !s.ok())
        return s;
      in.data = copy.get();
      realigned.push_back(std::move(copy));
    } else if (reinterpret_cast<uintptr_t>(in.data) % DTypeSize(spec.dtype) != 0) {
      // Binary HTTP bodies place tensors at any offset; compiled code expects natural alignment.
      AlignedBuffer copy = AlignedAlloc(in.byte_size);
      std::memcpy(copy.get(), in.data, in.byte_size);
      in.data = copy.get();
      realigned.push_back(std::move(copy));
    }
    request->inputs[index] = InputView{in.data, in.byte_size, std::move(in.shape)};
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!seen[i]) {
      return absl::InvalidArgumentError(absl::StrCat("missing input '", specs[i].name, "'"));
    }
  }
  const auto& outs = model.executable().outputs();
  request->output_requested.assign(outs.size(), wire.requested_outputs.empty());
  for (const std::string& name : wire.requested_outputs) {
    size_t index = 0;
    while (index < outs.size() && outs[index].name != name) ++index;
    if (index == outs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown output '", name, "' requested from model '", model.name(), "'"));
    }
    request->output_requested[index] = true;
  }
  if (!wire.shared_memory_outputs.empty()) {
    if (shared_memory == nullptr || shared_memory_outputs == nullptr) {
      return absl::UnimplementedError("shared memory outputs are not available here");
    }
    shared_memory_outputs->clear();
    for (WireSharedMemoryOutput& out : wire.shared_memory_outputs) {
      if (FindSharedMemoryOutput(*shared_memory_outputs, out.name) != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("output '", out.name, "' given twice for shared memory"));
      }
      auto region = shared_memory->Find(out.ref.region, out.name);
      if (!region.ok()) return region.status();
      if (auto s = (*region)->CheckRange(out.ref.offset, out.ref.byte_size, out.name); !s.ok())
        return s;
      shared_memory_outputs->push_back(
          SharedMemoryOutput{std::move(out.name), std::move(out.ref), *std::move(region)});
    }
  }
  request->batch_size = batched ? batch : 1;
  request->priority = wire.priority;
  request->timeout_us = wire.timeout_us;
  if (realigned.empty()) {
    request->holder = std::move(wire.holder);
  } else {
    struct Holder {
      std::shared_ptr<const void> wire;
      std::vector<std::shared_ptr<uint8_t>> copies;
    };
    request->holder =
        std::make_shared<Holder>(Holder{std::move(wire.holder), std::move(realigned)});
  }
  return request;
}

}  // namespace

uint64_t CopiedInputBytes(const WireRequest& wire) {
  uint64_t bytes = 0;
  for (const WireInput& in : wire.inputs) {
    absl::StatusOr<DType> dtype = DTypeFromKServeName(in.datatype);
    if (!dtype.ok() || DTypeSize(*dtype) <= 0) continue;
    const uint64_t size = in.shared_memory.has_value() ? in.shared_memory->byte_size : in.byte_size;
    // Only an input of the size its shape declares gets that far (Build refuses the others
    // first; strings are not copied).
    if (size != SaturatingTensorBytes(in.shape, static_cast<uint64_t>(DTypeSize(*dtype)))) {
      continue;
    }
    // Read out of shared memory, or realigned (see Build).
    const bool copied = in.shared_memory.has_value() ||
                        reinterpret_cast<uintptr_t>(in.data) % DTypeSize(*dtype) != 0;
    if (copied) bytes = size > UINT64_MAX - bytes ? UINT64_MAX : bytes + size;
  }
  return bytes;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> ResolveOutputShapes(
    const ModelVersion& model, const InferenceRequest& request) {
  const Executable& executable = model.executable();
  const bool batching = model.config().max_batch_size() > 0;
  const std::vector<TensorSpec>& outputs = executable.outputs();
  std::vector<std::vector<int64_t>> dims;
  bool varying = false;
  for (const TensorSpec& out : outputs) {
    for (int64_t d : out.dims) varying |= d < 0;
  }
  if (varying) {
    // As ModelLayout::VaryingOutputDims: the executable resolves them from the inputs' dims.
    const std::vector<TensorSpec>& inputs = executable.inputs();
    std::vector<std::vector<int64_t>> input_dims;
    input_dims.reserve(request.inputs.size());
    for (size_t i = 0; i < request.inputs.size() && i < inputs.size(); ++i) {
      const std::vector<int64_t>& shape = request.inputs[i].shape;
      const size_t skip = batching && inputs[i].batched && !shape.empty() ? 1 : 0;
      input_dims.emplace_back(shape.begin() + skip, shape.end());
    }
    absl::StatusOr<std::vector<std::vector<int64_t>>> resolved = executable.OutputDims(input_dims);
    if (!resolved.ok()) return resolved.status();
    if (resolved->size() != outputs.size()) {
      return absl::InternalError("executable returned dims for the wrong number of outputs");
    }
    dims = *std::move(resolved);
  } else {
    for (const TensorSpec& out : outputs) dims.push_back(out.dims);
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    for (int64_t d : dims[o]) {
      if (d < 0) {
        return absl::InternalError(
            absl::StrCat("executable left output '", outputs[o].name, "' unresolved"));
      }
    }
    if (batching && outputs[o].batched) dims[o].insert(dims[o].begin(), request.batch_size);
  }
  return dims;
}

uint64_t SaturatingTensorBytes(const std::vector<int64_t>& shape, uint64_t bytes_per_element) {
  uint64_t bytes = bytes_per_element;
  for (int64_t d : shape) {
    if (d <= 0) return 0;
    const uint64_t n = static_cast<uint64_t>(d);
    if (bytes > UINT64_MAX / n) return UINT64_MAX;
    bytes *= n;
  }
  return bytes;
}

void InferAsync(ModelVersion& model, std::unique_ptr<InferenceRequest> request,
                std::function<void(InferenceResponse)> done) {
  const int64_t number = next_request_number.fetch_add(1, std::memory_order_relaxed);
  CUVIL_PROBE_REQUEST_START(model.name().c_str(), model.version_string().c_str(), number);
  const Clock::time_point start = request->arrival;
  const int64_t samples = request->batch_size;
  request->on_complete = [&model, number, start, samples,
                          done = std::move(done)](InferenceResponse response) {
    const uint64_t total_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
    CUVIL_PROBE_REQUEST_DONE(model.name().c_str(), model.version_string().c_str(), number,
                             static_cast<int>(response.status.code()), total_ns);
    if (const auto& m = model.metrics()) {
      if (response.status.ok()) {
        const RequestTimings& t = response.timings;
        m->RecordSuccess(samples, total_ns, t.queue_ns, t.compute_input_ns, t.compute_infer_ns,
                         t.compute_output_ns);
      } else {
        m->RecordFailure(ReasonFor(response.status));
      }
    }
    done(std::move(response));
  };
  model.Submit(std::move(request));
}

InferenceResponse InferBlocking(ModelVersion& model, std::unique_ptr<InferenceRequest> request) {
  std::promise<InferenceResponse> promise;
  std::future<InferenceResponse> future = promise.get_future();
  InferAsync(model, std::move(request),
             [&promise](InferenceResponse response) { promise.set_value(std::move(response)); });
  return future.get();
}

const SharedMemoryOutput* FindSharedMemoryOutput(const std::vector<SharedMemoryOutput>& outputs,
                                                 const std::string& name) {
  for (const SharedMemoryOutput& o : outputs) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

absl::Status WriteSharedMemoryOutputs(const std::vector<SharedMemoryOutput>& outputs,
                                      const InferenceResponse& response) {
  for (const OutputTensor& t : response.outputs) {
    const SharedMemoryOutput* o = FindSharedMemoryOutput(outputs, t.name);
    if (o == nullptr) continue;
    const uint64_t size = t.tensor.byte_size();
    if (size > o->ref.byte_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output '", t.name, "': shared memory byte size ", o->ref.byte_size, " of region '",
          o->ref.region, "' is too small for the result's ", size, " bytes"));
    }
    if (auto s = o->region->Write(o->ref.offset, t.tensor.data(), size, t.name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

int HttpStatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      return 500;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kAborted:  // A conflicting change won the race: try again.
      return 409;
    default:
      return 400;
  }
}

}  // namespace cuvil
