#include "execution_context.h"

#include <cstring>

namespace cuvil {

uint8_t* ExecutionContext::Scratch::Reserve(size_t bytes) {
  if (bytes > capacity || !data) {
    // Grow by half again so slowly rising sizes (varying dims) do not reallocate every time.
    size_t grown = std::max(bytes, capacity + capacity / 2);
    // Written before it is read (inputs gathered, outputs and arena filled by the model): not
    // zeroed, so a buffer sized for the largest batch costs neither load time nor resident
    // memory until a batch that large comes.
    data = AlignedAllocUninitialized(grown);
    capacity = grown;
  }
  return data.get();
}

ExecutionContext::ExecutionContext(const Executable* executable, const ModelLayout* layout,
                                   const SchedulerClock* clock)
    : executable_(executable),
      layout_(layout),
      clock_(clock),
      inputs_(layout->num_inputs()),
      outputs_(layout->num_outputs()),
      input_ptrs_(layout->num_inputs()),
      output_ptrs_(layout->num_outputs()),
      output_row_bytes_(layout->num_outputs()),
      run_shapes_(layout->num_inputs()),
      gather_bytes_(layout->num_inputs()),
      staged_output_bytes_(layout->num_outputs()) {
  // Gather buffers for a full batch up front so the hot path does not allocate.
  const auto& specs = executable->inputs();
  for (size_t i = 0; i < specs.size(); ++i) {
    int64_t row = specs[i].RowBytes();
    if (layout->input_batched(i) && row >= 0 && layout->max_rows() > 1) {
      inputs_[i].Reserve(static_cast<size_t>(row * layout->max_rows()));
    }
  }
}

absl::Status ExecutionContext::ResolveOutputDims(const InferenceRequest& request) {
  output_dims_ = &layout_->fixed_output_dims();
  if (layout_->outputs_vary()) {
    auto dims = layout_->VaryingOutputDims(request);
    if (!dims.ok()) return dims.status();
    varying_dims_ = *std::move(dims);
    output_dims_ = &varying_dims_;
  }
  const auto& specs = executable_->outputs();
  for (size_t o = 0; o < specs.size(); ++o) {
    int64_t n = DTypeSize(specs[o].dtype);
    for (int64_t d : (*output_dims_)[o]) n *= d;
    output_row_bytes_[o] = static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::vector<int64_t> ExecutionContext::OutputShape(size_t output, int64_t rows) const {
  const std::vector<int64_t>& dims = (*output_dims_)[output];
  if (!layout_->output_batched(output)) return dims;
  std::vector<int64_t> shape;
  shape.reserve(dims.size() + 1);
  shape.push_back(rows);
  shape.insert(shape.end(), dims.begin(), dims.end());
  return shape;
}

ExecutionContext::Result ExecutionContext::Execute(std::vector<QueuedRequest>& batch,
                                                   std::vector<InferenceResponse>& responses) {
  Result result;
  const Clock::time_point start = clock_->Now();
  for (const QueuedRequest& r : batch) result.rows += r.rows;
  const InferenceRequest& first = *batch.front().request;
  const bool alone = batch.size() == 1;
  const size_t num_inputs = layout_->num_inputs();
  const size_t num_outputs = layout_->num_outputs();

  // The executable checks the batch's shapes against its code: the first request's shapes with
  // the batch dim widened to every row (requests sharing a batch agree on the other dims).
  for (size_t i = 0; i < num_inputs; ++i) {
    run_shapes_[i] = first.inputs[i].shape;
    if (layout_->input_batched(i) && !run_shapes_[i].empty()) run_shapes_[i][0] = result.rows;
  }
  result.status = ResolveOutputDims(first);
  if (!result.status.ok()) return result;

  // What this execution stages beyond the requests' own buffers: batched inputs of several
  // requests gathered into one buffer each, and outputs that are not written straight into a
  // lone request's response. Allocated only in the arena call below, once the executable has
  // checked the shapes and reserved these bytes with its scratch.
  uint64_t staged = 0;
  for (size_t i = 0; i < num_inputs; ++i) {
    gather_bytes_[i] = 0;
    if (alone || !layout_->input_batched(i)) continue;
    for (const QueuedRequest& r : batch) gather_bytes_[i] += r.request->inputs[i].byte_size;
    staged += gather_bytes_[i];
  }
  for (size_t o = 0; o < num_outputs; ++o) {
    staged_output_bytes_[o] = 0;
    if (alone && Requested(first, o)) continue;
    size_t rows = layout_->output_batched(o) ? static_cast<size_t>(result.rows) : 1;
    staged_output_bytes_[o] = output_row_bytes_[o] * rows;
    staged += staged_output_bytes_[o];
  }
  // A lone request's requested outputs are written straight into its response tensors (the
  // front end charged them when it admitted the request).
  if (alone) responses[0].outputs.reserve(num_outputs);
  for (size_t o = 0; o < num_outputs; ++o) {
    if (alone && Requested(first, o)) {
      responses[0].outputs.push_back(
          {executable_->outputs()[o].name,
           HostTensor(executable_->outputs()[o].dtype, OutputShape(o, result.rows))});
      output_ptrs_[o] = responses[0].outputs.back().tensor.data();
    } else {
      output_ptrs_[o] = nullptr;  // Staged in the arena call.
    }
  }
  Clock::time_point gathered = start;
  auto stage_and_reserve = [&](size_t bytes) -> void* {
    // Gather: one copy per request row block into the reused buffer; a lone request runs on its
    // own views.
    for (size_t i = 0; i < num_inputs; ++i) {
      if (alone || !layout_->input_batched(i)) {
        input_ptrs_[i] = first.inputs[i].data;  // Unbatched inputs are equal across the batch.
        continue;
      }
      uint8_t* dst = inputs_[i].Reserve(gather_bytes_[i]);
      for (const QueuedRequest& r : batch) {
        const InputView& view = r.request->inputs[i];
        if (view.byte_size > 0) std::memcpy(dst, view.data, view.byte_size);
        dst += view.byte_size;
      }
      input_ptrs_[i] = inputs_[i].data.get();
    }
    for (size_t o = 0; o < num_outputs; ++o) {
      if (output_ptrs_[o] == nullptr)
        output_ptrs_[o] = outputs_[o].Reserve(staged_output_bytes_[o]);
    }
    gathered = clock_->Now();
    return arena_.Reserve(bytes);
  };
  const bool sized_by_run = executable_->outputs_sized_by_run();
  result.status =
      executable_->Run(input_ptrs_.data(), run_shapes_, output_ptrs_.data(), result.rows, staged,
                       stage_and_reserve, sized_by_run ? &written_dims_ : nullptr);
  const Clock::time_point ran = clock_->Now();
  result.input_ns = NanosBetween(start, gathered);
  result.infer_ns = NanosBetween(gathered, ran);
  arena_.Trim(kKeepScratchBytes);
  for (Scratch& s : inputs_) s.Trim(kKeepScratchBytes);
  for (Scratch& s : outputs_) s.Trim(kKeepScratchBytes);
  if (!result.status.ok()) {
    responses[0].outputs.clear();
    return result;
  }

  if (sized_by_run && alone) {
    // The run decided some output sizes: keep the leading elements it wrote (such requests
    // never share an execution, see ModelLayout::CanShareBatch).
    size_t next = 0;
    for (size_t o = 0; o < num_outputs; ++o) {
      if (!Requested(first, o)) continue;
      HostTensor& had = responses[0].outputs[next++].tensor;
      const std::vector<int64_t>& dims = written_dims_[o];
      std::vector<int64_t> shape;
      if (layout_->output_batched(o)) shape.push_back(result.rows);
      shape.insert(shape.end(), dims.begin(), dims.end());
      if (shape == had.shape()) continue;
      HostTensor exact(had.dtype(), shape);
      if (exact.byte_size() > had.byte_size()) {
        result.status = absl::InternalError("an output came back larger than its upper bound");
        responses[0].outputs.clear();
        return result;
      }
      if (exact.byte_size() > 0) std::memcpy(exact.data(), had.data(), exact.byte_size());
      had = std::move(exact);
    }
  }
  // Split: each request gets its own rows of every output it asked for.
  if (!alone) {
    size_t row_offset = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      const InferenceRequest& request = *batch[b].request;
      const size_t rows = static_cast<size_t>(batch[b].rows);
      for (size_t o = 0; o < num_outputs; ++o) {
        if (!Requested(request, o)) continue;
        const TensorSpec& spec = executable_->outputs()[o];
        HostTensor tensor(spec.dtype, OutputShape(o, batch[b].rows));
        const bool batched = layout_->output_batched(o);
        const uint8_t* src =
            outputs_[o].data.get() + (batched ? row_offset * output_row_bytes_[o] : 0);
        size_t bytes = batched ? rows * output_row_bytes_[o] : output_row_bytes_[o];
        if (bytes > 0) std::memcpy(tensor.data(), src, bytes);
        responses[b].outputs.push_back({spec.name, std::move(tensor)});
      }
      row_offset += rows;
    }
  }
  result.output_ns = NanosBetween(ran, clock_->Now());
  return result;
}

}  // namespace cuvil
