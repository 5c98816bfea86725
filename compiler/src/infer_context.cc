#include "infer_context.h"

#include <algorithm>

#include "constant_fold.h"

namespace cuvil::ir {

void InferContext::SetOutput(size_t i, DType dtype, SymShape shape) {
  if (!has_output(i)) return;
  Value* v = node_.outputs[i];
  v->type.dtype = dtype;
  v->type.shape = std::move(shape);
  v->type.shape_known = true;
}

void InferContext::SetKnown(size_t i, std::vector<SymDim> values) {
  if (!has_output(i)) return;
  int64_t den = 1;
  if (IsFloat(node_.outputs[i]->type.dtype)) {
    bool first = true;
    for (const Value* in : node_.inputs) {
      if (in == nullptr || !in->known || !IsFloat(in->type.dtype)) continue;
      if (!first && in->known_den != den) return;
      den = in->known_den;
      first = false;
    }
  }
  SetKnownRational(i, std::move(values), den);
}

void InferContext::SetKnownRational(size_t i, std::vector<SymDim> nums, int64_t den) {
  if (!has_output(i)) return;
  Value* v = node_.outputs[i];
  // Float values only in float32/float64, where shape-sized integers are exact.
  const bool wide_float = v->type.dtype == DType::kFloat32 || v->type.dtype == DType::kFloat64;
  if (IsFloat(v->type.dtype) && !wide_float) return;
  if (den <= 0 || den > kMaxKnownDen || (den != 1 && !wide_float)) return;
  v->known = std::move(nums);
  v->known_den = den;
}

namespace {

// The first node, walking up from `v` through producers whose results are not known, all of whose
// inputs are known (or constants): where shape arithmetic leaves what inference computes. Null
// when the walk reaches a graph input or data (or gives up after 64 nodes).
const Node* WhereKnownValuesStop(const Value* v) {
  for (int steps = 0; steps < 64 && v != nullptr && v->producer != nullptr; ++steps) {
    const Value* unknown = nullptr;
    for (const Value* in : v->producer->inputs) {
      if (in != nullptr && !in->known && !in->is_constant()) {
        unknown = in;
        break;
      }
    }
    if (unknown == nullptr) return v->producer;
    v = unknown;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::vector<SymDim>> InferContext::Known(size_t i, const char* role) {
  if (!has_input(i)) return Error(absl::StrCat("missing ", role, " input"));
  Value* v = node_.inputs[i];
  if (v->known.has_value() && v->known_den == 1) return *v->known;
  RequestBindings(v);
  std::string where;
  if (const Node* stop = WhereKnownValuesStop(v)) {
    where = absl::StrCat(" (shape values stop at ", stop->Describe(),
                         ", whose result is not computed at compile time)");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      node_.Describe(), ": ", role, " input '", v->name,
      "' must be known at compile time (it determines a shape); bind it to a constant", where));
}

absl::StatusOr<std::vector<int64_t>> InferContext::StaticInts(size_t i, const char* role) {
  auto known = Known(i, role);
  if (!known.ok()) return known.status();
  auto values = StaticValues(*known);
  if (!values.ok()) {
    return absl::UnimplementedError(
        absl::StrCat(node_.Describe(), ": ", role, " depends on the symbolic dimension"));
  }
  return values;
}

absl::StatusOr<const HostTensor*> InferContext::ConstantInput(size_t i, const char* role) {
  if (!has_input(i)) return Error(absl::StrCat("missing ", role, " input"));
  Value* v = node_.inputs[i];
  if (v->constant.has_value()) return &*v->constant;
  RequestBindings(v);
  return absl::FailedPreconditionError(
      absl::StrCat(node_.Describe(), ": ", role, " input '", v->name, "' must be a constant"));
}

absl::StatusOr<SymDim> InferContext::DataDependentDim(const std::string& what,
                                                      const SymDim& upper_bound) {
  if (!graph_.allow_data_dependent) {
    return absl::UnimplementedError(
        absl::StrCat(node_.Describe(),
                     ": its output size depends on the data, which a Loop/Scan body cannot have "
                     "(its iterations share one memory plan, made before the loop runs)"));
  }
  auto bound = graph_.UpperBound(upper_bound);
  if (!bound) return Error("the upper bound of its output size is too large");
  // Symbol 0 is the batch even in a model without one (it is then 1), so the count is id >= 1.
  if (graph_.symbols.empty()) graph_.symbols.push_back("batch");
  const auto id = static_cast<int32_t>(graph_.symbols.size());
  std::string name = absl::StrCat(node_.name.empty() ? node_.op_type : node_.name, "_", what);
  while (std::find(graph_.symbols.begin(), graph_.symbols.end(), name) != graph_.symbols.end()) {
    absl::StrAppend(&name, "_");
  }
  graph_.symbols.push_back(name);
  graph_.data_dependent.push_back({id, bound->expr(), node_.Describe()});
  return SymDim::Symbol(id, name);
}

void InferContext::RequestBindings(const Value* v) {
  if (needs_binding_ == nullptr) return;
  // A graph input itself, or the graph inputs it is computed from by ops folded on the host.
  for (const std::string& name : GraphInputsBehind(v)) {
    if (std::find(needs_binding_->begin(), needs_binding_->end(), name) == needs_binding_->end()) {
      needs_binding_->push_back(name);
    }
  }
}

bool InferContext::CouldBeBound(const Value* v) const { return !GraphInputsBehind(v).empty(); }

void InferContext::TruncateInputs(size_t i) {
  if (node_.inputs.size() > i) node_.inputs.resize(i);
}

absl::Status InferContext::Error(const std::string& message) const {
  return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": ", message));
}

absl::StatusOr<int> InferContext::Axis(int64_t axis, int rank, bool allow_end) const {
  // A rank-0 tensor has no axis at all: normalising against it would index an empty shape.
  int64_t limit = allow_end ? rank : int64_t{rank} - 1;
  if (axis < -int64_t{rank} || axis > limit) {
    return Error(absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

absl::Status InferContext::ExpectInputs(size_t min, size_t max) const {
  size_t n = node_.inputs.size();
  if (n < min || n > max) {
    return Error(absl::StrCat("expects ", min, "..", max, " inputs, got ", n));
  }
  for (size_t i = 0; i < min; ++i) {
    if (node_.inputs[i] == nullptr) return Error(absl::StrCat("required input ", i, " is missing"));
  }
  return absl::OkStatus();
}

std::optional<SymShape> BroadcastShapes(const SymShape& a, const SymShape& b) {
  size_t rank = std::max(a.size(), b.size());
  SymShape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    SymDim da = i < rank - a.size() ? SymDim::Const(1) : a[i - (rank - a.size())];
    SymDim db = i < rank - b.size() ? SymDim::Const(1) : b[i - (rank - b.size())];
    if (da == SymDim::Const(1)) {
      out[i] = db;
    } else if (db == SymDim::Const(1) || da == db) {
      out[i] = da;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace cuvil::ir
