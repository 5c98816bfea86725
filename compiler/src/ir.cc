#include "cuvil/compiler/ir.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace cuvil::ir {

std::string TensorType::ToString(const std::string& symbol) const {
  if (!shape_known) return absl::StrCat(DTypeName(dtype), "[?]");
  return absl::StrCat(DTypeName(dtype), SymShapeToString(shape, symbol));
}

int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  if (auto* f = std::get_if<float>(&it->second)) return static_cast<int64_t>(*f);
  return fallback;
}

float Node::attr_float(const std::string& key, float fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (auto* v = std::get_if<float>(&it->second)) return *v;
  if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<float>(*i);
  return fallback;
}

std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return fallback;
}

std::vector<int64_t> Node::attr_ints(const std::string& key,
                                     const std::vector<int64_t>& fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* i = std::get_if<int64_t>(&it->second)) return {*i};
  return fallback;
}

std::vector<float> Node::attr_floats(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return {};
  if (auto* v = std::get_if<std::vector<float>>(&it->second)) return *v;
  if (auto* f = std::get_if<float>(&it->second)) return {*f};
  return {};
}

std::string Node::Describe() const {
  return absl::StrCat(op_type, " '", name, "' (opset ", opset, ")");
}

Value* Graph::NewValue(std::string name) {
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->name = std::move(name);
  values_.push_back(std::move(v));
  return values_.back().get();
}

Node* Graph::NewNode(std::string op_type, std::string name) {
  auto n = std::make_unique<Node>();
  n->op_type = std::move(op_type);
  n->name = std::move(name);
  n->opset = opset;
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

void Graph::MakeConstant(Value* value, HostTensor tensor) {
  value->type.dtype = tensor.dtype();
  value->type.shape.clear();
  for (int64_t d : tensor.shape()) value->type.shape.push_back(SymDim::Const(d));
  value->type.shape_known = true;
  value->known.reset();
  value->known_den = 1;
  if (IsInteger(tensor.dtype()) || tensor.dtype() == DType::kBool) {
    if (tensor.num_elements() <= 64) value->known = KnownFromTensor(tensor);
  } else if ((tensor.dtype() == DType::kFloat32 || tensor.dtype() == DType::kFloat64) &&
             tensor.num_elements() <= 64) {
    if (auto r = RationalKnownFromTensor(tensor)) {
      value->known = std::move(r->first);
      value->known_den = r->second;
    }
  }
  value->constant = std::move(tensor);
  value->producer = nullptr;
}

void Graph::EraseNodes(const std::vector<Node*>& dead) {
  std::unordered_set<const Node*> set(dead.begin(), dead.end());
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(),
                              [&](const std::unique_ptr<Node>& n) { return set.count(n.get()); }),
               nodes_.end());
}

void Graph::ReplaceAllUses(Value* from, Value* to) {
  for (auto& n : nodes_) {
    for (auto& in : n->inputs) {
      if (in == from) in = to;
    }
  }
  for (auto& out : outputs) {
    if (out == from) out = to;
  }
}

absl::Status ValidateTensorType(const TensorType& type, const std::string& what,
                                const std::string& symbol) {
  SymDim extent = SymDim::Const(1);
  for (const SymDim& d : type.shape) {
    if (d.coef() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a negative dimension in ", type.ToString(symbol)));
    }
    if (d.coef() == 0) continue;
    auto next = SymMulChecked(extent, d);
    if (!next) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is too large: ", type.ToString(symbol)));
    }
    extent = *next;
  }
  auto bytes = SymMulChecked(extent, SymDim::Const(static_cast<int64_t>(DTypeSize(type.dtype))));
  if (!bytes || bytes->coef() > kMaxTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is too large: ", type.ToString(symbol),
                                                   " exceeds ", kMaxTensorBytes, " bytes",
                                                   extent.IsStatic() ? "" : " per batch item"));
  }
  return absl::OkStatus();
}

std::optional<SymDim> Graph::UpperBound(const SymDim& d) const {
  DimExpr e = d.expr();
  for (const DataDependentSymbol& s : data_dependent) {
    auto replaced = DimSubstitute(e, s.id, s.upper_bound);
    if (!replaced) return std::nullopt;
    e = *std::move(replaced);
  }
  if (auto mono = ToSymDim(e)) return mono;  // Keeps the batch-monomial form plans rely on.
  return SymDim(std::move(e));
}

bool Graph::IsDataDependent(const DimExpr& e) const {
  for (int32_t id : e.Symbols()) {
    for (const DataDependentSymbol& s : data_dependent) {
      if (s.id == id) return true;
    }
  }
  return false;
}

absl::StatusOr<std::vector<int64_t>> StaticValues(const std::vector<SymDim>& values) {
  std::vector<int64_t> out;
  out.reserve(values.size());
  for (const SymDim& d : values) {
    if (!d.IsStatic()) {
      return absl::InvalidArgumentError("value depends on the symbolic dimension");
    }
    out.push_back(d.coef());
  }
  return out;
}

std::vector<SymDim> KnownFromTensor(const HostTensor& t) {
  std::vector<SymDim> out;
  out.reserve(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (t.dtype() == DType::kInt64) {
      out.push_back(SymDim::Const(t.data_as<int64_t>()[i]));
    } else {
      out.push_back(SymDim::Const(static_cast<int64_t>(t.GetAsDouble(i))));
    }
  }
  return out;
}

std::optional<std::pair<std::vector<SymDim>, int64_t>> RationalKnownFromTensor(
    const HostTensor& t) {
  constexpr double kMaxExact = 9007199254740992.0;  // 2^53
  int64_t den = 1;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = t.GetAsDouble(i);
    if (!std::isfinite(v)) return std::nullopt;
    while (std::abs(v * static_cast<double>(den)) <= kMaxExact &&
           v * static_cast<double>(den) != std::floor(v * static_cast<double>(den))) {
      if (den >= kMaxKnownDen) return std::nullopt;
      den *= 2;
    }
    if (std::abs(v * static_cast<double>(den)) > kMaxExact) return std::nullopt;
  }
  std::vector<SymDim> nums;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    nums.push_back(
        SymDim::Const(static_cast<int64_t>(t.GetAsDouble(i) * static_cast<double>(den))));
  }
  return std::make_pair(std::move(nums), den);
}

std::map<const Value*, int> UseCounts(const Graph& graph) {
  std::map<const Value*, int> uses;
  for (const auto& n : graph.nodes()) {
    for (const Value* in : n->inputs) {
      if (in != nullptr) ++uses[in];
    }
  }
  for (const Value* out : graph.outputs) ++uses[out];
  return uses;
}

bool Graph::MakesStrings() const {
  for (const auto& n : nodes_) {
    for (const Value* v : n->outputs) {
      if (v != nullptr && v->type.dtype == DType::kString) return true;
    }
  }
  return false;
}

}  // namespace cuvil::ir
