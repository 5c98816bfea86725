#include "batch_separability.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "internal_attrs.h"
#include "op_table.h"

namespace cuvil {
namespace {

// What a value holds with respect to the batch.
enum class Kind {
  kInvariant,  // The same for every batch item (constants, inputs without a batch dim).
  // Exactly one dim (`axis`) is coef * batch, laid out as [outer, batch, coef / outer]: item b
  // owns the indices (o * batch + b) * inner + i of that dim. PyTorch's attention merges the
  // batch with the sequence ([seq, batch*heads, d] -> [seq*batch, ...]), hence `outer`.
  kRows,
  kShape,  // Shape arithmetic on batch-dependent dims: fine as a shape operand only.
};

struct State {
  Kind kind = Kind::kInvariant;
  int axis = -1;
  int64_t coef = 0;
  int64_t outer = 1;
};

// The one batch-scaled dim of `shape` (power 1), or nullopt when there is none or it is not the
// only non-static dim.
std::optional<State> RowsOf(const SymShape& shape) {
  std::optional<State> rows;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i].IsStatic()) continue;
    if (rows.has_value() || shape[i].power() != 1 || shape[i].coef() <= 0) return std::nullopt;
    rows = State{Kind::kRows, static_cast<int>(i), shape[i].coef(), 1};
  }
  return rows;
}

// Product of the static dims shape[0..end).
std::optional<int64_t> PrefixProduct(const SymShape& shape, int end) {
  int64_t p = 1;
  for (int i = 0; i < end; ++i) {
    if (!shape[i].IsStatic() || __builtin_mul_overflow(p, shape[i].coef(), &p)) return std::nullopt;
  }
  return p;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The row's traits, or a default row (kMixes) for an op the table does not know.
const OpDef& TraitsOf(const std::string& op_type) {
  static const OpDef* unknown = [] {
    auto* d = new OpDef();
    d->batch = BatchClass::kMixes;
    return d;
  }();
  const OpDef* def = OpTable::Get().Find(op_type);
  return def != nullptr ? *def : *unknown;
}

class Analysis {
 public:
  explicit Analysis(const ir::Graph& graph) : graph_(graph) {}

  BatchSeparability Run() {
    if (graph_.symbol.empty()) return Fail("the model has no symbolic batch dimension");
    // The strings an execution makes live in its one heap, which parts cannot share.
    for (const auto& v : graph_.values()) {
      if (v->type.dtype == DType::kString) return Fail("the model has string tensors");
    }
    for (const ir::Value* in : graph_.inputs) {
      if (IsStaticShape(in->type.shape)) {
        states_[in] = State{};
        continue;
      }
      std::optional<State> rows = RowsOf(in->type.shape);
      if (!rows || rows->axis != 0) {  // outer 1: item b's elements are one contiguous run.
        return Fail(absl::StrCat("input '", in->name, "' does not have the batch as its leading ",
                                 "dimension"));
      }
      states_[in] = *rows;
    }
    for (const auto& node : graph_.nodes()) {
      if (std::string why = Visit(*node); !why.empty()) {
        std::vector<std::string> types;
        for (const ir::Value* v : node->inputs) {
          types.push_back(v == nullptr ? "none" : v->type.ToString(graph_.symbol));
        }
        return Fail(absl::StrCat(node->Describe(), ": ", why, " (inputs ",
                                 absl::StrJoin(types, ", "), ")"));
      }
    }
    for (size_t i = 0; i < graph_.outputs.size(); ++i) {
      const State s = StateOf(graph_.outputs[i]);
      if (s.kind != Kind::kRows || s.axis != 0 || s.outer != 1) {
        return Fail(absl::StrCat("output '", graph_.output_names[i],
                                 "' does not have the batch as its leading dimension"));
      }
    }
    return BatchSeparability{true, ""};
  }

 private:
  static BatchSeparability Fail(std::string why) {
    return BatchSeparability{false, std::move(why)};
  }

  State StateOf(const ir::Value* v) const {
    auto it = states_.find(v);
    return it == states_.end() ? State{} : it->second;  // Constants are invariant.
  }

  // Classifies `node`'s outputs; returns why the node mixes batch items, or "".
  std::string Visit(const ir::Node& node) {
    std::vector<State> in;
    bool any_rows = false, any_shape = false;
    for (const ir::Value* v : node.inputs) {
      in.push_back(v == nullptr ? State{} : StateOf(v));
      any_rows |= in.back().kind == Kind::kRows;
      any_shape |= in.back().kind == Kind::kShape;
    }
    if (!any_rows && !any_shape) return SetAll(node, State{}, /*allow_batch=*/false);
    const OpDef& traits = TraitsOf(node.op_type);
    if (traits.batch == BatchClass::kShapeOf) {
      return SetAll(node, State{Kind::kShape}, /*allow_batch=*/true);
    }
    if (!any_rows) return VisitShapeOnly(node, traits, in);
    for (size_t i = 0; i < in.size(); ++i) {
      const bool shape_operand = traits.batch_shape_operands_from >= 0 &&
                                 static_cast<int>(i) >= traits.batch_shape_operands_from;
      if (in[i].kind == Kind::kShape && !shape_operand) {
        return absl::StrCat("input ", i, " is a batch-dependent shape used as data");
      }
    }
    // Unless the rule says otherwise, outputs keep the layout of the first batch input.
    out_outer_ = 1;
    for (const State& s : in) {
      if (s.kind == Kind::kRows) {
        out_outer_ = s.outer;
        break;
      }
    }
    if (std::string why = CheckRule(node, traits.batch, in); !why.empty()) return why;
    for (const ir::Value* out : node.outputs) {
      if (out == nullptr) continue;
      std::optional<State> rows = RowsOf(out->type.shape);
      if (!rows) return absl::StrCat("output '", out->name, "' loses the batch dimension");
      if (rows->coef % out_outer_ != 0) return "changes the batch dimension";
      rows->outer = out_outer_;
      states_[out] = *rows;
    }
    return "";
  }

  // Every output gets `s`; with !allow_batch an output whose shape depends on the batch is an
  // error (it could only come from a shape operand).
  std::string SetAll(const ir::Node& node, State s, bool allow_batch) {
    for (const ir::Value* out : node.outputs) {
      if (out == nullptr) continue;
      if (!allow_batch && !IsStaticShape(out->type.shape)) {
        return absl::StrCat("output '", out->name, "' has a batch-dependent shape");
      }
      states_[out] = s;
    }
    return "";
  }

  // A node reading shape values but no batch rows: more shape arithmetic, or a tensor filled with
  // values that do not depend on the batch item (ConstantOfShape, Expand of a parameter).
  std::string VisitShapeOnly(const ir::Node& node, const OpDef& traits,
                             const std::vector<State>& in) {
    bool fill = traits.batch_fill;  // when every data input is invariant
    for (int i = 0; fill && i < traits.batch_shape_operands_from; ++i) {
      fill = in[i].kind == Kind::kInvariant;
    }
    if (fill) {
      std::optional<State> rows = RowsOf(node.outputs[0]->type.shape);
      if (!rows) return "its output has no single batch dimension";
      states_[node.outputs[0]] = *rows;
      return "";
    }
    for (const ir::Value* out : node.outputs) {
      if (out != nullptr && !out->known.has_value()) {
        return "a batch-dependent shape is used as data";
      }
    }
    return SetAll(node, State{Kind::kShape}, /*allow_batch=*/true);
  }

  // The rule of the op's batch class for a node with at least one kRows input.
  std::string CheckRule(const ir::Node& node, BatchClass rule, const std::vector<State>& in) {
    const std::string& op = node.op_type;
    const ir::Value* out0 = node.outputs.empty() ? nullptr : node.outputs[0];
    if (out0 == nullptr) return "has no output";
    std::optional<State> out = RowsOf(out0->type.shape);
    if (!out) return "its output loses the batch dimension";
    const State& x = in[0];
    if (rule == BatchClass::kUnary) {
      if (!OnlyInputRows(in, 0)) return "a parameter depends on the batch";
      if (x.kind != Kind::kRows || out->axis != x.axis || out->coef != x.coef) {
        return "changes the batch dimension";
      }
      return "";
    }
    if (rule == BatchClass::kBroadcast) return CheckBroadcast(node, in, *out);
    if (rule == BatchClass::kQConv) {  // fuse_qdq.cc: input 5 is a residual laid out as the output
      for (size_t i = 1; i < in.size(); ++i) {
        if (i != 5 && in[i].kind == Kind::kRows) return "a parameter depends on the batch";
      }
      if (x.kind != Kind::kRows || x.axis != 0)
        return "the batch is not the data's leading dimension";
      if (in.size() > 5 && node.inputs[5] != nullptr &&
          (in[5].kind != Kind::kRows || in[5].axis != 0 || in[5].coef != x.coef)) {
        return "the residual does not keep the batch";
      }
      if (out->axis != 0 || out->coef != x.coef) return "changes the batch dimension";
      return "";
    }
    if (rule == BatchClass::kBatchLeading) {
      if (!OnlyInputRows(in, 0) || x.kind != Kind::kRows || x.axis != 0) {
        return "the batch is not the data's leading dimension";
      }
      if (op == "BatchNormalization" &&
          (node.attr_int("training_mode", 0) != 0 || node.outputs.size() > 1)) {
        return "computes batch statistics";
      }
      if (op == "MaxPool" && node.outputs.size() > 1 && node.outputs[1] != nullptr) {
        return "its Indices output counts across the batch";
      }
      if (out->axis != 0 || out->coef != x.coef) return "changes the batch dimension";
      return "";
    }
    if (rule == BatchClass::kGemm) return CheckGemm(node, in, *out);
    if (rule == BatchClass::kMatMul) return CheckMatMul(node, in, 0, 1, *out);
    if (rule == BatchClass::kQLinearMatMul) return CheckMatMul(node, in, 0, 3, *out);
    if (rule == BatchClass::kRegroup) {
      if (!OnlyInputRows(in, 0)) return "a parameter depends on the batch";
      // Flattened, the input is [P, batch, S] with P = (dims before the axis) * outer; so is
      // the output when its dims before the batch divide P (S then matches by element count).
      auto before_in = PrefixProduct(node.inputs[0]->type.shape, x.axis);
      auto before_out = PrefixProduct(out0->type.shape, out->axis);
      int64_t p = 0;
      if (!before_in || !before_out || *before_out <= 0 ||
          __builtin_mul_overflow(*before_in, x.outer, &p) || p % *before_out != 0 ||
          out->coef % (p / *before_out) != 0) {
        return "regroups elements of different batch items";
      }
      out_outer_ = p / *before_out;
      return "";
    }
    if (rule == BatchClass::kTranspose) {
      return out->coef == x.coef ? "" : "changes the batch dimension";
    }
    if (rule == BatchClass::kReduce) {
      if (!OnlyInputRows(in, 0)) return "a parameter depends on the batch";
      if (Contains(node.attr_ints("axes"), x.axis)) return "reduces over the batch";
      return out->coef == x.coef ? "" : "changes the batch dimension";
    }
    if (rule == BatchClass::kNormalize) {
      if (!OnlyInputRows(in, 0)) return "a parameter depends on the batch";
      const int64_t begin = node.attr_int("axis", -1);
      const int64_t end = op == "LayerNormalization" ? node.inputs[0]->type.rank()
                                                     : node.attr_int(attr::kAxisEnd, begin + 1);
      if (begin < 0 || (x.axis >= begin && x.axis < end)) return "normalises over the batch";
      return out->axis == x.axis && out->coef == x.coef ? "" : "changes the batch dimension";
    }
    if (rule == BatchClass::kAlongAxis) {
      if (!OnlyInputRows(in, 0)) return "a parameter depends on the batch";
      const int64_t axis = node.attr_int("axis", -1);
      if (axis < 0 || axis == x.axis) return "works along the batch";
      return out->coef == x.coef ? "" : "changes the batch dimension";
    }
    if (rule == BatchClass::kConcat) {
      const int64_t axis = node.attr_int("axis", -1);
      for (const State& s : in) {
        if (s.kind != Kind::kRows || s.axis != x.axis || s.coef != x.coef || s.outer != x.outer) {
          return "joins tensors that differ in their batch dimension";
        }
      }
      if (axis < 0 || axis == x.axis) return "concatenates along the batch";
      return out->axis == x.axis && out->coef == x.coef ? "" : "changes the batch dimension";
    }
    if (rule == BatchClass::kMovement) return CheckMovement(node, in, *out);
    if (rule == BatchClass::kGather) return CheckGather(node, in, *out);
    if (rule == BatchClass::kPerItem) {
      if (!OnlyInputRows(in, 0)) return "a parameter depends on the batch";
      return out->coef == x.coef ? "" : "changes the batch dimension";
    }
    return absl::StrCat("op ", op, " is not known to keep batch items apart");
  }

  // True when no input but `data` is a batch tensor.
  static bool OnlyInputRows(const std::vector<State>& in, size_t data) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (i != data && in[i].kind == Kind::kRows) return false;
    }
    return true;
  }

  std::string CheckBroadcast(const ir::Node& node, const std::vector<State>& in, const State& out) {
    const int out_rank = node.outputs[0]->type.rank();
    for (size_t i = 0; i < in.size(); ++i) {
      if (node.inputs[i] == nullptr) continue;
      const SymShape& shape = node.inputs[i]->type.shape;
      const int aligned = out.axis - (out_rank - static_cast<int>(shape.size()));
      if (in[i].kind == Kind::kRows) {
        if (in[i].axis != aligned || in[i].coef != out.coef || in[i].outer != out_outer_) {
          return "broadcasts across the batch";
        }
      } else if (aligned >= 0 && !(shape[aligned].IsStatic() && shape[aligned].coef() == 1)) {
        return "broadcasts across the batch";
      }
    }
    return "";
  }

  std::string CheckGemm(const ir::Node& node, const std::vector<State>& in, const State& out) {
    const State& a = in[0];
    const int m_axis = node.attr_int("transA", 0) != 0 ? 1 : 0;
    if (a.kind != Kind::kRows || a.axis != m_axis) return "the batch is not A's row dimension";
    if (in.size() > 1 && in[1].kind == Kind::kRows) return "B depends on the batch";
    if (in.size() > 2 && node.inputs[2] != nullptr) {
      const SymShape& c = node.inputs[2]->type.shape;
      if (in[2].kind == Kind::kRows) {
        if (c.size() != 2 || in[2].axis != 0 || in[2].coef != a.coef || in[2].outer != a.outer) {
          return "C broadcasts across the batch";
        }
      } else if (c.size() == 2 && !(c[0].IsStatic() && c[0].coef() == 1)) {
        return "C broadcasts across the batch";
      }
    }
    return out.axis == 0 && out.coef == a.coef ? "" : "changes the batch dimension";
  }

  // MatMul-like with operands `ia` and `ib` (every other input a parameter).
  std::string CheckMatMul(const ir::Node& node, const std::vector<State>& in, size_t ia, size_t ib,
                          const State& out) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (i != ia && i != ib && in[i].kind == Kind::kRows)
        return "a parameter depends on the batch";
    }
    const SymShape& sa = node.inputs[ia]->type.shape;
    SymShape sb = node.inputs[ib]->type.shape;
    if (node.has_attr(attr::kPackedN)) {  // B is a constant [K, N] stored as column panels.
      sb = {SymDim::Const(node.attr_int(attr::kPackedK, 0)),
            SymDim::Const(node.attr_int(attr::kPackedN, 0))};
    }
    const int ra = static_cast<int>(sa.size()), rb = static_cast<int>(sb.size());
    const int ro = node.outputs[0]->type.rank();
    const State& a = in[ia];
    const State& b = in[ib];
    if (ra < 2 || rb < 2) return "a 1-D operand";
    // The other operand's dim broadcast against the output position `pos`: absent or 1.
    auto broadcast_one = [&](const SymShape& s, int rank, int pos) {
      const int aligned = pos - (ro - rank);
      return aligned < 0 || (s[aligned].IsStatic() && s[aligned].coef() == 1);
    };
    if (a.kind == Kind::kRows && b.kind == Kind::kRows) {
      if (a.axis >= ra - 2 || b.axis >= rb - 2 || a.axis + (ro - ra) != b.axis + (ro - rb) ||
          a.coef != b.coef || a.outer != b.outer) {
        return "multiplies across the batch";
      }
    } else if (a.kind == Kind::kRows) {
      if (a.axis == ra - 1) return "contracts over the batch";
      if (a.axis < ra - 2 && !broadcast_one(sb, rb, a.axis + (ro - ra))) {
        return "broadcasts across the batch";
      }
    } else {
      if (b.axis == rb - 2) return "contracts over the batch";
      if (b.axis < rb - 2 && !broadcast_one(sa, ra, b.axis + (ro - rb))) {
        return "broadcasts across the batch";
      }
    }
    const int64_t coef = a.kind == Kind::kRows ? a.coef : b.coef;
    return out.coef == coef ? "" : "changes the batch dimension";
  }

  std::string CheckMovement(const ir::Node& node, const std::vector<State>& in, const State& out) {
    const State& x = in[0];
    if (!OnlyInputRows(in, 0) || x.kind != Kind::kRows) return "a parameter depends on the batch";
    if (out.axis != x.axis || out.coef != x.coef) return "changes the batch dimension";
    const std::string& op = node.op_type;
    const int rank = node.inputs[0]->type.rank();
    if (op == "Slice") {
      auto starts = node.attr_ints("starts");
      auto steps = node.attr_ints(attr::kSteps);
      if (static_cast<int>(starts.size()) != rank || static_cast<int>(steps.size()) != rank ||
          starts[x.axis] != 0 || steps[x.axis] != 1) {
        return "slices the batch";
      }
    } else if (op == "Pad") {
      auto pads = node.attr_ints("pads");
      if (static_cast<int>(pads.size()) != 2 * rank || pads[x.axis] != 0 ||
          pads[x.axis + rank] != 0) {
        return "pads the batch";
      }
    } else if (op == "Tile") {
      auto repeats = node.attr_ints("repeats");
      if (static_cast<int>(repeats.size()) != rank || repeats[x.axis] != 1) {
        return "tiles the batch";
      }
    } else if (op == "Trilu") {
      if (x.axis >= rank - 2) return "the batch is one of the matrix dimensions";
    }
    return "";
  }

  std::string CheckGather(const ir::Node& node, const std::vector<State>& in, const State& out) {
    const State& data = in[0];
    const State indices = in.size() > 1 ? in[1] : State{};
    const int64_t axis = node.attr_int("axis", -1);
    if (axis < 0) return "has no canonical axis";
    if (node.op_type == "GatherElements") {
      if (data.kind != Kind::kRows || indices.kind != Kind::kRows || data.axis != indices.axis ||
          data.coef != indices.coef || data.outer != indices.outer || axis == data.axis) {
        return "gathers across the batch";
      }
      return out.coef == data.coef ? "" : "changes the batch dimension";
    }
    if (data.kind == Kind::kRows && indices.kind == Kind::kRows) return "gathers across the batch";
    if (data.kind == Kind::kRows) {
      if (axis == data.axis) return "gathers along the batch";
      return out.coef == data.coef ? "" : "changes the batch dimension";
    }
    out_outer_ = indices.outer;  // A table lookup: the indices' layout.
    return out.coef == indices.coef ? "" : "changes the batch dimension";
  }

  const ir::Graph& graph_;
  std::unordered_map<const ir::Value*, State> states_;
  int64_t out_outer_ = 1;  // The current node's output layout (see Visit).
};

}  // namespace

BatchSeparability AnalyseBatchSeparability(const ir::Graph& graph) { return Analysis(graph).Run(); }

}  // namespace cuvil
