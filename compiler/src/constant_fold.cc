#include "constant_fold.h"

#include <cmath>
#include <set>

#include "infer_context.h"
#include "op_table.h"

namespace cuvil {
namespace {

bool FoldableDType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64;
}

// Element `i` of `t` read at the numpy-broadcast position of output element `out_index`.
double Broadcast(const HostTensor& t, const std::vector<int64_t>& out_shape, int64_t out_index) {
  const std::vector<int64_t>& shape = t.shape();
  int64_t index = 0, stride = 1;
  int64_t rest = out_index;
  size_t rank = out_shape.size();
  for (size_t k = 0; k < rank; ++k) {
    size_t d = rank - 1 - k;
    int64_t coord = rest % out_shape[d];
    rest /= out_shape[d];
    if (k < shape.size()) {
      int64_t dim = shape[shape.size() - 1 - k];
      index += (dim == 1 ? 0 : coord) * stride;
      stride *= dim;
    }
  }
  return t.GetAsDouble(index);
}

// The op's host fold (OpDef::fold; arity 0 when it has none).
const HostFold& FoldOf(const std::string& op) {
  static const HostFold kNone;
  const OpDef* def = OpTable::Get().Find(op);
  return def != nullptr ? def->fold : kNone;
}

}  // namespace

bool IsHostFoldable(const std::string& op) { return FoldOf(op).arity != 0; }

bool TryFoldOnHost(ir::Graph& graph, ir::Node& node) {
  const HostFold& fold = FoldOf(node.op_type);
  if (fold.arity == 0 || node.outputs.size() != 1 || node.outputs[0] == nullptr ||
      node.inputs.empty()) {
    return false;
  }
  ir::Value* out = node.outputs[0];
  bool to_bool = fold.to_bool && out->type.dtype == DType::kBool;
  if (!IsStaticShape(out->type.shape) || !(FoldableDType(out->type.dtype) || to_bool)) {
    return false;
  }
  std::vector<int64_t> shape;
  int64_t n = 1;
  for (const SymDim& d : out->type.shape) {
    shape.push_back(d.coef());
    n *= d.coef();
    if (n > kMaxHostFoldElements) return false;
  }
  for (const ir::Value* in : node.inputs) {
    if (in == nullptr || !in->is_constant() || !FoldableDType(in->constant->dtype())) return false;
  }
  // Max/Min/Add... take any number of inputs only in some forms: the fold's arity only; and
  // some folds only for float results (integer Div rounds differently across runtimes).
  const bool unary = fold.arity == 1;
  if (node.inputs.size() != static_cast<size_t>(fold.arity)) return false;
  if (fold.floats_only && !IsFloat(out->type.dtype)) return false;
  HostTensor result(out->type.dtype, shape);
  for (int64_t i = 0; i < n; ++i) {
    double a = Broadcast(*node.inputs[0]->constant, shape, i);
    double b = unary ? 0 : Broadcast(*node.inputs[1]->constant, shape, i);
    double r = fold.fn(a, b);
    switch (out->type.dtype) {
      case DType::kFloat32:
        result.data_as<float>()[i] = static_cast<float>(r);
        break;
      case DType::kFloat64:
        result.data_as<double>()[i] = r;
        break;
      case DType::kBool:
        result.SetFromInt64(i, r != 0 ? 1 : 0);  // NaN casts to true, as in ONNX.
        break;
      default: {
        // Integers: exact only within 2^53, and a float → int Cast truncates toward zero.
        double t = std::trunc(r);
        if (!std::isfinite(t) || std::fabs(t) > 9007199254740992.0) return false;
        if (out->type.dtype == DType::kInt32 && (t > 2147483647.0 || t < -2147483648.0)) {
          return false;
        }
        result.SetFromInt64(i, static_cast<int64_t>(t));
      }
    }
  }
  bool integer = !IsFloat(out->type.dtype);
  graph.MakeConstant(out, std::move(result));
  if (integer) out->known = ir::KnownFromTensor(*out->constant);
  return true;
}

std::vector<std::string> GraphInputsBehind(const ir::Value* v) {
  std::vector<std::string> inputs;
  std::vector<const ir::Value*> stack = {v};
  std::set<const ir::Value*> seen;
  while (!stack.empty()) {
    const ir::Value* x = stack.back();
    stack.pop_back();
    if (x == nullptr || !seen.insert(x).second || x->is_constant() || x->known.has_value()) {
      continue;
    }
    if (x->is_graph_input) {
      inputs.push_back(x->name);
      continue;
    }
    if (x->producer == nullptr || !IsHostFoldable(x->producer->op_type) || seen.size() > 256) {
      return {};
    }
    for (const ir::Value* in : x->producer->inputs) stack.push_back(in);
  }
  return inputs;
}

}  // namespace cuvil
