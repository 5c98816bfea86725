#include "jit_executable.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/runtime/tensor_size.h"

namespace cuvil {
namespace {

// Whether `spec` describes exactly the tensor `sig` names: same dtype and rank, the batch dim
// leading when batched, every fixed dim equal and only symbolic dims left open (-1).
absl::Status CheckSpec(const char* kind, const TensorSpec& spec, const TensorSignature& sig) {
  auto mismatch = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(kind, " '", spec.name, "' [", absl::StrJoin(spec.dims, ","), "] ", why,
                     " (compiled signature ", SymShapeToString(sig.shape), ")"));
  };
  if (spec.name != sig.name) return mismatch(absl::StrCat("is not the model's '", sig.name, "'"));
  if (spec.dtype != sig.dtype) return mismatch("has another data type");
  const size_t lead = spec.batched ? 1 : 0;
  if (spec.dims.size() + lead != sig.shape.size()) return mismatch("has another rank");
  if (spec.batched && !(sig.shape[0].coef() == 1 && sig.shape[0].power() == 1)) {
    return mismatch("is batched but dim 0 is not the batch dimension");
  }
  for (size_t d = 0; d < spec.dims.size(); ++d) {
    const SymDim& m = sig.shape[d + lead];
    const bool fits = m.IsStatic() ? spec.dims[d] == m.Eval(1) : spec.dims[d] == -1;
    if (!fits) return mismatch(absl::StrCat("dim ", d, " differs from the compiled code"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<JitExecutable>> JitExecutable::Create(
    const LoadedModel* model, std::vector<TensorSpec> inputs, std::vector<TensorSpec> outputs,
    InflightBudget* scratch_budget) {
  const CompiledModel& compiled = model->model();
  if (inputs.size() != compiled.inputs.size() || outputs.size() != compiled.outputs.size()) {
    return absl::InvalidArgumentError("config tensors do not match the compiled model's");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (auto s = CheckSpec("input", inputs[i], compiled.inputs[i]); !s.ok()) return s;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (auto s = CheckSpec("output", outputs[i], compiled.outputs[i]); !s.ok()) return s;
  }
  return std::shared_ptr<JitExecutable>(
      new JitExecutable(model, std::move(inputs), std::move(outputs), scratch_budget));
}

bool JitExecutable::BindsSymbols() const {
  const CompiledModel& m = model_->model();
  // Unbatched, even a lone symbol 0 is a free dim of the request's shapes, not the rows.
  return m.symbols.size() > 1 || !m.dim_constraints.empty() || (!batched_ && !m.symbols.empty());
}

absl::StatusOr<void*> JitExecutable::ReserveArena(
    ArenaReserve arena, size_t bytes, uint64_t staged_bytes,
    absl::Span<const std::vector<int64_t>> input_shapes,
    InflightBudget::Reservation* reservation) const {
  const uint64_t total = static_cast<uint64_t>(bytes) + staged_bytes;
  if (scratch_budget_ != nullptr && total > 0) {
    // The requests hold at least their inputs for as long as this reservation lives (the shapes
    // were checked against the code, so these products are the buffers' sizes).
    uint64_t inputs_held = 0;
    for (size_t i = 0; i < input_shapes.size() && i < inputs_.size(); ++i) {
      auto held = CheckedTensorBytes(inputs_[i].dtype, input_shapes[i]);
      if (held.ok()) inputs_held += *held;
    }
    auto r = scratch_budget_->Reserve(total, "a model execution's scratch memory", inputs_held);
    if (!r.ok()) return r.status();
    *reservation = *std::move(r);
  }
  return arena(bytes);
}

absl::StatusOr<std::vector<std::vector<int64_t>>> JitExecutable::OutputDims(
    const std::vector<std::vector<int64_t>>& input_dims) const {
  const CompiledModel& m = model_->model();
  if (!BindsSymbols()) return Executable::OutputDims(input_dims);
  if (input_dims.size() != inputs_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", inputs_.size(), " inputs, got ", input_dims.size()));
  }
  // One row binds the symbols beyond the batch; batched outputs drop the batch dim again.
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < input_dims.size(); ++i) {
    std::vector<int64_t> shape;
    if (inputs_[i].batched) shape.push_back(1);
    shape.insert(shape.end(), input_dims[i].begin(), input_dims[i].end());
    shapes.push_back(std::move(shape));
  }
  auto syms = model_->ResolveSymbols(shapes);
  if (!syms.ok()) return syms.status();
  std::vector<std::vector<int64_t>> out;
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    // ResolveSymbols checked that every output shape evaluates.
    std::vector<int64_t> shape = *EvalShape(m.outputs[o].shape, *syms);
    if (outputs_[o].batched && !shape.empty()) shape.erase(shape.begin());
    out.push_back(std::move(shape));
  }
  return out;
}

absl::Status JitExecutable::Run(const void* const* inputs,
                                absl::Span<const std::vector<int64_t>> input_shapes,
                                void* const* outputs, int64_t batch, uint64_t staged_bytes,
                                ArenaReserve arena,
                                std::vector<std::vector<int64_t>>* written_dims) const {
  const CompiledModel& m = model_->model();
  if (BindsSymbols()) {
    // Binding the symbols checks every input dim, the model's constraints and the arena size.
    auto syms = model_->ResolveSymbols(input_shapes);
    if (!syms.ok()) return syms.status();
    // Symbol 0 is the code's batch: the execution's rows when the config batches, else whatever
    // free dim the shapes bound first (ssdlite's height: its batch dim is fixed at 1).
    if (batched_ && (*syms)[0] != batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("the inputs hold ", (*syms)[0], " rows, the execution ", batch));
    }
    const auto bytes = static_cast<size_t>(*m.arena.CheckedBytesForSymbols(*syms));
    InflightBudget::Reservation reservation;
    absl::StatusOr<void*> scratch =
        ReserveArena(arena, bytes, staged_bytes, input_shapes, &reservation);
    if (!scratch.ok()) return scratch.status();
    absl::Status s =
        EntryStatus(model_->Execute(inputs, outputs, (*syms)[0], *scratch, syms->data()));
    if (s.ok() && written_dims != nullptr && outputs_sized_by_run()) {
      *written_dims = model_->OutputShapesAfterRun(*syms);
      for (size_t o = 0; o < outputs_.size(); ++o) {
        auto& dims = (*written_dims)[o];
        if (outputs_[o].batched && !dims.empty()) dims.erase(dims.begin());
      }
    }
    return s;
  }
  if (auto s = model_->CheckInputShapes(input_shapes, batch); !s.ok()) return s;
  // A nonzero result is the request's data at fault (e.g. an index out of bounds).
  // Execute: one kernel table per execution, and a guard that keeps rolled-back code alive.
  const auto bytes = static_cast<size_t>(m.arena.BytesFor(batch));
  InflightBudget::Reservation reservation;
  absl::StatusOr<void*> scratch =
      ReserveArena(arena, bytes, staged_bytes, input_shapes, &reservation);
  if (!scratch.ok()) return scratch.status();
  return EntryStatus(model_->Execute(inputs, outputs, batch, *scratch));
}

}  // namespace cuvil
