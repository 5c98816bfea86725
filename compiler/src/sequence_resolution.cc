#include "sequence_resolution.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/compiler/ir.h"
#include "infer_context.h"
#include "onnx_tensor.h"

namespace cuvil {
namespace {

// A Loop or SequenceMap unrolled further than this is refused (the graph would explode).
constexpr int64_t kMaxUnrolledIterations = 4096;
// Nor may unrolling and mapping together inline more body nodes than this.
constexpr int64_t kMaxInlinedNodes = 1 << 18;
// Constants this pass reads (positions, trip counts, conditions) are tiny; larger ones are not
// tracked.
constexpr int64_t kMaxTrackedElements = 64;

bool IsStructuredOp(const std::string& op) {
  static const std::set<std::string> kOps = {
      "SequenceConstruct", "SequenceEmpty",  "SequenceInsert",     "SequenceErase",
      "SequenceAt",        "SequenceLength", "SplitToSequence",    "ConcatFromSequence",
      "SequenceMap",       "Optional",       "OptionalHasElement", "OptionalGetElement"};
  return kOps.count(op) != 0;
}

bool IsStructuredType(const onnx::TypeProto& t) {
  return t.has_sequence_type() || t.has_optional_type();
}

bool UsesStructuredIo(const onnx::GraphProto& g);
bool GraphUses(const onnx::GraphProto& g);

// A sequence or optional value known at compile time, as the final names of its tensors.
struct Structured {
  bool optional = false;          // An optional (else a sequence).
  bool present = true;            // Optionals: false when empty.
  bool payload_sequence = false;  // Optionals: the payload is a sequence (else one tensor).
  std::vector<std::string> elements;

  static Structured Sequence(std::vector<std::string> elements) {
    Structured s;
    s.elements = std::move(elements);
    return s;
  }
  bool is_sequence() const { return !optional; }
  bool SameStructure(const Structured& o) const {
    return optional == o.optional && present == o.present &&
           payload_sequence == o.payload_sequence && elements.size() == o.elements.size();
  }
  std::string Describe() const {
    if (!optional) return absl::StrCat("a sequence of ", elements.size(), " tensors");
    if (!present) return "an empty optional";
    return payload_sequence ? absl::StrCat("an optional sequence of ", elements.size(), " tensors")
                            : "an optional tensor";
  }
};

// A value while rewriting: a tensor (its final name) or a compile-time sequence / optional.
struct Val {
  std::string tensor;
  std::optional<Structured> structured;
};

// What is known about values of one graph scope (and, through the parent, of enclosing scopes),
// keyed by final names. Not thread-safe.
class Facts {
 public:
  explicit Facts(const Facts* parent) : parent_(parent) {}

  // The structured value `name` stands for, or null for a tensor.
  const Structured* FindStructured(const std::string& name) const {
    for (const Facts* f = this; f != nullptr; f = f->parent_) {
      if (auto it = f->structured_.find(name); it != f->structured_.end()) return &it->second;
    }
    return nullptr;
  }
  // The small constant tensor `name` holds, or null when not known.
  const HostTensor* FindConstant(const std::string& name) const {
    for (const Facts* f = this; f != nullptr; f = f->parent_) {
      if (auto it = f->constants_.find(name); it != f->constants_.end()) return &it->second;
    }
    return nullptr;
  }
  void SetStructured(const std::string& name, Structured s) { structured_[name] = std::move(s); }
  void SetConstant(const std::string& name, HostTensor t) {
    if (t.num_elements() <= kMaxTrackedElements) constants_[name] = std::move(t);
  }

 private:
  const Facts* parent_;
  std::map<std::string, Structured> structured_;
  std::map<std::string, HostTensor> constants_;
};

// Name translation of an inlined body: every name the body defines maps to a fresh final name;
// names it does not define resolve in the enclosing context. Not thread-safe.
struct Renames {
  const Renames* parent = nullptr;
  std::map<std::string, std::string> names;
  std::string prefix;  // Prepended to node names of this inlined copy ("" at the top level).

  std::string Translate(const std::string& n) const {
    if (n.empty()) return n;
    for (const Renames* r = this; r != nullptr; r = r->parent) {
      if (auto it = r->names.find(n); it != r->names.end()) return it->second;
    }
    return n;
  }
};

// Every name `g` defines, in it and in its subgraphs (ONNX names never shadow outer ones).
void CollectDefinedNames(const onnx::GraphProto& g, std::set<std::string>* out) {
  for (const auto& i : g.input()) out->insert(i.name());
  for (const auto& i : g.initializer()) out->insert(i.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) {
      if (!o.empty()) out->insert(o);
    }
    for (const auto& a : n.attribute()) {
      if (a.has_g()) CollectDefinedNames(a.g(), out);
      for (const auto& sg : a.graphs()) CollectDefinedNames(sg, out);
    }
  }
}

// Every name `g` reads, in it and in its subgraphs.
void CollectUsedNames(const onnx::GraphProto& g, std::set<std::string>* out) {
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) {
      if (!i.empty()) out->insert(i);
    }
    for (const auto& a : n.attribute()) {
      if (a.has_g()) CollectUsedNames(a.g(), out);
      for (const auto& sg : a.graphs()) CollectUsedNames(sg, out);
    }
  }
  for (const auto& o : g.output()) out->insert(o.name());
}

const onnx::GraphProto* GraphAttr(const onnx::NodeProto& np, const std::string& name) {
  for (const auto& a : np.attribute()) {
    if (a.name() == name && a.has_g()) return &a.g();
  }
  return nullptr;
}

std::optional<int64_t> IntAttr(const onnx::NodeProto& np, const std::string& name) {
  for (const auto& a : np.attribute()) {
    if (a.name() == name && a.type() == onnx::AttributeProto::INT) return a.i();
  }
  return std::nullopt;
}

// The element tensor type of a sequence, optional tensor or optional sequence type.
const onnx::TypeProto::Tensor* ElementTensorType(const onnx::TypeProto& t) {
  const onnx::TypeProto* e = &t;
  if (e->has_optional_type()) e = &e->optional_type().elem_type();
  if (e->has_sequence_type()) e = &e->sequence_type().elem_type();
  return e->has_tensor_type() ? &e->tensor_type() : nullptr;
}

std::string KindName(IoKind kind) {
  switch (kind) {
    case IoKind::kTensor:
      return "tensor";
    case IoKind::kSequence:
      return "sequence";
    case IoKind::kOptionalTensor:
      return "optional tensor";
    case IoKind::kOptionalSequence:
      return "optional sequence";
  }
  return "value";
}

// The one integer (or bool) element of `t`, if it has exactly one.
std::optional<int64_t> ScalarInt(const HostTensor& t) {
  if (t.num_elements() != 1 || IsFloat(t.dtype())) return std::nullopt;
  std::vector<SymDim> v = ir::KnownFromTensor(t);
  if (v.size() != 1 || !v[0].IsStatic()) return std::nullopt;
  return v[0].coef();
}

HostTensor ScalarTensor(DType dtype, int64_t v) {
  HostTensor t(dtype, {});
  t.SetFromInt64(0, v);
  return t;
}

// Rewrites a model's sequence and optional values away (see sequence_resolution.h).
// Not thread-safe: one rewrite at a time.
class Resolver {
 public:
  Resolver(const ImportOptions& options, const std::vector<std::optional<MovedRawData>>& raw_data)
      : options_(options), raw_data_(raw_data) {}

  absl::Status Run(onnx::ModelProto* model, std::vector<OutputLayout>* layout) {
    for (const auto& op : model->opset_import()) {
      if (op.domain().empty() || op.domain() == "ai.onnx") opset_ = op.version();
    }
    onnx::GraphProto& g = *model->mutable_graph();
    CollectDefinedNames(g, &taken_);
    CollectUsedNames(g, &taken_);
    Facts facts(nullptr);
    std::set<std::string> initializers;
    for (int i = 0; i < g.initializer_size(); ++i) {
      const onnx::TensorProto& init = g.initializer(i);
      initializers.insert(init.name());
      if (!IsSmall(init)) continue;
      const MovedRawData* moved =
          static_cast<size_t>(i) < raw_data_.size() && raw_data_[i] ? &*raw_data_[i] : nullptr;
      auto t = TensorFromProto(init, "", moved);
      if (t.ok()) facts.SetConstant(init.name(), std::move(*t));
    }

    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs, outputs;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    inputs.Swap(g.mutable_input());
    outputs.Swap(g.mutable_output());
    nodes.Swap(g.mutable_node());
    for (const auto& in : inputs) {
      if (auto s = AddGraphInput(in, initializers, facts, &g); !s.ok()) return s;
    }
    Renames top;
    for (const auto& np : nodes) {
      if (auto s = RewriteNode(np, top, facts, &g); !s.ok()) return s;
    }
    layout->clear();
    size_t next = 0;
    for (const auto& out : outputs) {
      auto kind = IoKindOf(out.type(), absl::StrCat("graph output '", out.name(), "'"));
      if (!kind.ok()) return kind.status();
      const Structured* s = facts.FindStructured(out.name());
      OutputLayout entry{out.name(), *kind, true, next, 1};
      if (*kind == IoKind::kTensor) {
        if (s != nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(
              "graph output '", out.name(), "' is declared a tensor but holds ", s->Describe()));
        }
        *g.add_output() = out;
      } else {
        if (!options_.allow_structured_io) return StructuredIoError("output", out.name(), *kind);
        if (s == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat("graph output '", out.name(),
                                                         "' is declared a ", KindName(*kind),
                                                         " but holds a tensor"));
        }
        entry.present = s->present;
        entry.count = s->elements.size();
        const onnx::TypeProto::Tensor* et = ElementTensorType(out.type());
        for (size_t k = 0; k < s->elements.size(); ++k) {
          std::string name = Fresh(absl::StrCat(out.name(), "[", k, "]"));
          EmitIdentity(s->elements[k], name, &g);
          onnx::ValueInfoProto* vi = g.add_output();
          vi->set_name(name);
          if (et != nullptr && et->elem_type() != 0) {
            vi->mutable_type()->mutable_tensor_type()->set_elem_type(et->elem_type());
          }
        }
      }
      next += entry.count;
      layout->push_back(std::move(entry));
    }
    if (g.output_size() == 0 && !outputs.empty()) {
      return absl::InvalidArgumentError(
          "every graph output is an empty sequence or optional: there is nothing to compute");
    }
    return absl::OkStatus();
  }

 private:
  static bool IsSmall(const onnx::TensorProto& t) {
    int64_t n = 1;
    for (int64_t d : t.dims()) {
      if (d < 0 || d > kMaxTrackedElements) return false;
      n *= d;
      if (n > kMaxTrackedElements) return false;
    }
    return n <= kMaxTrackedElements;
  }

  absl::Status StructuredIoError(const char* what, const std::string& name, IoKind kind) const {
    return absl::UnimplementedError(absl::StrCat(
        "graph ", what, " '", name, "' is a ", KindName(kind),
        ": sequence and optional graph inputs and outputs are not supported (KServe requests "
        "carry tensors only; sequences inside the graph are fine)"));
  }

  // A fresh final name based on `base` (unique in the whole model).
  std::string Fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; taken_.count(name); ++i) name = absl::StrCat(base, "#", i);
    taken_.insert(name);
    return name;
  }

  // "SequenceAt 'name' (opset 11)", naming the node by its first output when it has no name.
  std::string Describe(const onnx::NodeProto& np, const Renames& rn) const {
    std::string name =
        np.name().empty()
            ? absl::StrCat("producing '", np.output_size() > 0 ? rn.Translate(np.output(0)) : "",
                           "'")
            : absl::StrCat("'", rn.prefix, np.name(), "'");
    return absl::StrCat(np.op_type(), " ", name, " (opset ", opset_, ")");
  }

  onnx::NodeProto* Emit(const std::string& op, std::vector<std::string> ins,
                        std::vector<std::string> outs, onnx::GraphProto* out) {
    onnx::NodeProto* n = out->add_node();
    n->set_op_type(op);
    for (auto& i : ins) n->add_input(std::move(i));
    for (auto& o : outs) n->add_output(std::move(o));
    return n;
  }
  void EmitIdentity(const std::string& from, const std::string& to, onnx::GraphProto* out) {
    Emit("Identity", {from}, {to}, out);
  }
  void EmitConstant(const HostTensor& t, const std::string& to, onnx::GraphProto* out) {
    onnx::NodeProto* n = Emit("Constant", {}, {to}, out);
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    TensorToProto(t, a->mutable_t());
  }
  // A Constant holding int64 `values` (1-D), for the axes / split inputs of emitted nodes.
  std::string EmitInts(const std::vector<int64_t>& values, const std::string& base, Facts& facts,
                       onnx::GraphProto* out) {
    HostTensor t(DType::kInt64, {static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) t.data_as<int64_t>()[i] = values[i];
    std::string name = Fresh(base);
    EmitConstant(t, name, out);
    facts.SetConstant(name, std::move(t));
    return name;
  }

  // Binds `v` to the final name `name`: a structured value is recorded, a tensor aliased.
  void Bind(const Val& v, const std::string& name, Facts& facts, onnx::GraphProto* out) {
    if (name.empty()) return;
    if (v.structured.has_value()) {
      facts.SetStructured(name, *v.structured);
      return;
    }
    EmitIdentity(v.tensor, name, out);
    if (const HostTensor* c = facts.FindConstant(v.tensor)) facts.SetConstant(name, *c);
  }

  Val ValueOf(const std::string& name, const Facts& facts) const {
    Val v;
    if (const Structured* s = facts.FindStructured(name)) {
      v.structured = *s;
    } else {
      v.tensor = name;
    }
    return v;
  }

  // Graph input `in` of the top-level graph, expanded to its element tensors when structured.
  absl::Status AddGraphInput(const onnx::ValueInfoProto& in, const std::set<std::string>& inits,
                             Facts& facts, onnx::GraphProto* g) {
    const std::string& name = in.name();
    if (inits.count(name)) {  // An initializer listed as an input (IR < 4).
      *g->add_input() = in;
      return absl::OkStatus();
    }
    auto kind = IoKindOf(in.type(), absl::StrCat("graph input '", name, "'"));
    if (!kind.ok()) return kind.status();
    if (*kind == IoKind::kTensor) {
      *g->add_input() = in;
      if (auto it = options_.bound_inputs.find(name); it != options_.bound_inputs.end()) {
        facts.SetConstant(name, it->second);
      } else {
        bindable_.insert(name);
      }
      return absl::OkStatus();
    }
    if (!options_.allow_structured_io) return StructuredIoError("input", name, *kind);
    auto it = options_.structured_inputs.find(name);
    if (it == options_.structured_inputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", name, "' is a ", KindName(*kind),
                       ": its structure (length, element shapes) must be given at compile time"));
    }
    const StructuredInput& given = it->second;
    const onnx::TypeProto::Tensor* et = ElementTensorType(in.type());
    if (et == nullptr || et->elem_type() == 0) {
      return absl::UnimplementedError(
          absl::StrCat("graph input '", name, "': the element type must be a tensor type"));
    }
    Structured s;
    s.optional = *kind == IoKind::kOptionalTensor || *kind == IoKind::kOptionalSequence;
    s.payload_sequence = *kind == IoKind::kOptionalSequence;
    s.present = !s.optional || given.present;
    std::vector<std::vector<int64_t>> shapes = given.element_shapes;
    if (*kind == IoKind::kOptionalTensor && s.present && shapes.empty()) {
      if (!et->has_shape()) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph input '", name, "': the optional tensor's shape is not known"));
      }
      std::vector<int64_t> dims;
      for (const auto& d : et->shape().dim()) {
        if (!d.has_dim_value()) {
          return absl::InvalidArgumentError(
              absl::StrCat("graph input '", name, "': the optional tensor's shape must be given"));
        }
        dims.push_back(d.dim_value());
      }
      shapes.push_back(dims);
    }
    if (!s.present) shapes.clear();
    if (*kind == IoKind::kOptionalTensor && s.present && shapes.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", name, "': an optional tensor has one shape"));
    }
    for (size_t k = 0; k < shapes.size(); ++k) {
      const std::vector<int64_t>& dims = shapes[k];
      if (et->has_shape()) {
        bool ok = et->shape().dim_size() == static_cast<int>(dims.size());
        for (int d = 0; ok && d < et->shape().dim_size(); ++d) {
          const auto& dim = et->shape().dim(d);
          ok = !dim.has_dim_value() || dim.dim_value() == dims[d];
        }
        if (!ok) {
          return absl::InvalidArgumentError(
              absl::StrCat("graph input '", name, "' element ", k, " has shape [",
                           absl::StrJoin(dims, ","), "], which the model's element type refuses"));
        }
      }
      std::string elem = Fresh(absl::StrCat(name, "[", k, "]"));
      onnx::ValueInfoProto* vi = g->add_input();
      vi->set_name(elem);
      auto* tt = vi->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(et->elem_type());
      auto* shape = tt->mutable_shape();
      for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
      s.elements.push_back(elem);
    }
    facts.SetStructured(name, std::move(s));
    return absl::OkStatus();
  }

  // The integer value of the scalar (or one-element) input `name`, which must be a compile-time
  // constant; otherwise FailedPrecondition naming the node, and a binding request when a graph
  // input would fix it.
  absl::StatusOr<int64_t> KnownInt(const onnx::NodeProto& np, const Renames& rn,
                                   const std::string& name, const Facts& facts,
                                   const std::string& role) {
    if (const HostTensor* c = facts.FindConstant(name)) {
      if (auto v = ScalarInt(*c)) return *v;
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(np, rn), ": ", role, " input '", name, "' must hold one integer"));
    }
    if (bindable_.count(name) && options_.needs_binding != nullptr) {
      auto& nb = *options_.needs_binding;
      if (std::find(nb.begin(), nb.end(), name) == nb.end()) nb.push_back(name);
    }
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(np, rn), ": ", role, " input '", name,
        "' must be known at compile time (sequences and optionals are resolved at compile "
        "time); bind it to a constant"));
  }

  absl::StatusOr<const Structured*> RequireSequence(const onnx::NodeProto& np, const Renames& rn,
                                                    const std::string& name, const Facts& facts) {
    const Structured* s = name.empty() ? nullptr : facts.FindStructured(name);
    if (s == nullptr || !s->is_sequence()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(np, rn), ": input '", name, "' is not a sequence"));
    }
    return s;
  }

  // Normalises position `p` of a sequence of `n` elements into [0, n) (or [0, n] with
  // `allow_end`, for SequenceInsert).
  absl::StatusOr<size_t> Position(const onnx::NodeProto& np, const Renames& rn, int64_t p, size_t n,
                                  bool allow_end) {
    int64_t len = static_cast<int64_t>(n);
    int64_t hi = allow_end ? len : len - 1;
    if (p < -len || p > hi) {
      return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": position ", p,
                                                     " is outside a sequence of ", n, " tensors"));
    }
    return static_cast<size_t>(p < 0 ? p + len : p);
  }

  absl::Status RewriteNode(const onnx::NodeProto& np, const Renames& rn, Facts& facts,
                           onnx::GraphProto* out) {
    std::vector<std::string> ins, outs;
    for (const auto& i : np.input()) ins.push_back(rn.Translate(i));
    for (const auto& o : np.output()) outs.push_back(rn.Translate(o));
    const std::string& op = np.op_type();
    bool onnx_domain = np.domain().empty() || np.domain() == "ai.onnx";
    auto out0 = [&]() -> const std::string& {
      static const std::string kNone;
      return outs.empty() ? kNone : outs[0];
    };
    if (onnx_domain && IsStructuredOp(op) && op != "SequenceMap" && outs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": expected one output"));
    }
    if (onnx_domain) {
      if (op == "SequenceEmpty") {
        facts.SetStructured(out0(), Structured::Sequence({}));
        return absl::OkStatus();
      }
      if (op == "SequenceConstruct") {
        std::vector<std::string> elems;
        for (const std::string& i : ins) {
          if (i.empty() || facts.FindStructured(i) != nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat(Describe(np, rn), ": input '", i, "' is not a tensor"));
          }
          elems.push_back(i);
        }
        facts.SetStructured(out0(), Structured::Sequence(std::move(elems)));
        return absl::OkStatus();
      }
      if (op == "SequenceInsert" || op == "SequenceErase" || op == "SequenceAt") {
        auto seq = RequireSequence(np, rn, ins.empty() ? "" : ins[0], facts);
        if (!seq.ok()) return seq.status();
        Structured s = **seq;
        size_t pos_input = op == "SequenceInsert" ? 2 : 1;
        bool has_pos = ins.size() > pos_input && !ins[pos_input].empty();
        if (op == "SequenceAt" && !has_pos) {
          return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": no position"));
        }
        int64_t p = op == "SequenceInsert" ? static_cast<int64_t>(s.elements.size()) : -1;
        if (has_pos) {
          auto known = KnownInt(np, rn, ins[pos_input], facts, "position");
          if (!known.ok()) return known.status();
          p = *known;
        }
        if (op == "SequenceInsert") {
          if (ins.size() < 2 || ins[1].empty() || facts.FindStructured(ins[1]) != nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat(Describe(np, rn), ": the inserted value must be a tensor"));
          }
          auto at = Position(np, rn, p, s.elements.size(), /*allow_end=*/true);
          if (!at.ok()) return at.status();
          s.elements.insert(s.elements.begin() + static_cast<std::ptrdiff_t>(*at), ins[1]);
          facts.SetStructured(out0(), std::move(s));
          return absl::OkStatus();
        }
        auto at = Position(np, rn, p, s.elements.size(), /*allow_end=*/false);
        if (!at.ok()) return at.status();
        if (op == "SequenceAt") {
          Bind(ValueOf(s.elements[*at], facts), out0(), facts, out);
        } else {
          s.elements.erase(s.elements.begin() + static_cast<std::ptrdiff_t>(*at));
          facts.SetStructured(out0(), std::move(s));
        }
        return absl::OkStatus();
      }
      if (op == "SequenceLength") {
        auto seq = RequireSequence(np, rn, ins.empty() ? "" : ins[0], facts);
        if (!seq.ok()) return seq.status();
        HostTensor n = ScalarTensor(DType::kInt64, static_cast<int64_t>((*seq)->elements.size()));
        EmitConstant(n, out0(), out);
        facts.SetConstant(out0(), std::move(n));
        return absl::OkStatus();
      }
      if (op == "ConcatFromSequence") return ConcatFromSequence(np, rn, ins, out0(), facts, out);
      if (op == "SplitToSequence") return SplitToSequence(np, rn, ins, outs, facts, out);
      if (op == "Optional") {
        Structured s;
        s.optional = true;
        if (!ins.empty() && !ins[0].empty()) {
          if (const Structured* in = facts.FindStructured(ins[0])) {
            if (!in->is_sequence()) {
              return absl::UnimplementedError(
                  absl::StrCat(Describe(np, rn), ": optionals of optionals are not supported"));
            }
            s.payload_sequence = true;
            s.elements = in->elements;
          } else {
            s.elements = {ins[0]};
          }
        } else {
          s.present = false;
          for (const auto& a : np.attribute()) {
            if (a.name() == "type" && a.has_tp()) s.payload_sequence = a.tp().has_sequence_type();
          }
        }
        facts.SetStructured(out0(), std::move(s));
        return absl::OkStatus();
      }
      if (op == "OptionalHasElement") {
        bool has = false;
        if (!ins.empty() && !ins[0].empty()) {
          const Structured* s = facts.FindStructured(ins[0]);
          has = s == nullptr || s->present;  // A tensor or sequence (opset 18) is present.
        }
        HostTensor t = ScalarTensor(DType::kBool, has ? 1 : 0);
        EmitConstant(t, out0(), out);
        facts.SetConstant(out0(), std::move(t));
        return absl::OkStatus();
      }
      if (op == "OptionalGetElement") {
        if (ins.empty() || ins[0].empty()) {
          return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": no input"));
        }
        const Structured* s = facts.FindStructured(ins[0]);
        if (s == nullptr || s->is_sequence()) {  // Opset 18: a tensor or sequence passes through.
          Bind(ValueOf(ins[0], facts), out0(), facts, out);
          return absl::OkStatus();
        }
        if (!s->present) {
          return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": input '", ins[0],
                                                         "' is an empty optional (known at compile "
                                                         "time), which has no element"));
        }
        if (s->payload_sequence) {
          facts.SetStructured(out0(), Structured::Sequence(s->elements));
        } else {
          Bind(ValueOf(s->elements[0], facts), out0(), facts, out);
        }
        return absl::OkStatus();
      }
      if (op == "SequenceMap") return SequenceMap(np, rn, ins, outs, facts, out);
      if (op == "Identity" && !ins.empty() && facts.FindStructured(ins[0]) != nullptr) {
        facts.SetStructured(out0(), *facts.FindStructured(ins[0]));
        return absl::OkStatus();
      }
      if (op == "If") {
        if (auto handled = RewriteIf(np, rn, ins, outs, facts, out); !handled.ok() || *handled) {
          return handled.status();
        }
      }
      if (op == "Loop") {
        if (auto handled = UnrollLoop(np, rn, ins, outs, facts, out); !handled.ok() || *handled) {
          return handled.status();
        }
      }
    }
    return CopyNode(np, rn, ins, outs, facts, out);
  }

  // Copies a tensor node with translated names and rewritten subgraphs, folding the few
  // constants conditions and positions are computed with.
  absl::Status CopyNode(const onnx::NodeProto& np, const Renames& rn,
                        const std::vector<std::string>& ins, const std::vector<std::string>& outs,
                        Facts& facts, onnx::GraphProto* out) {
    for (const std::string& i : ins) {
      if (const Structured* s = i.empty() ? nullptr : facts.FindStructured(i)) {
        return absl::UnimplementedError(absl::StrCat(Describe(np, rn), ": input '", i, "' is ",
                                                     s->Describe(), ", which ", np.op_type(),
                                                     " does not take"));
      }
    }
    onnx::NodeProto* n = out->add_node();
    *n = np;
    if (!np.name().empty()) n->set_name(absl::StrCat(rn.prefix, np.name()));
    for (size_t i = 0; i < ins.size(); ++i) n->set_input(static_cast<int>(i), ins[i]);
    for (size_t i = 0; i < outs.size(); ++i) n->set_output(static_cast<int>(i), outs[i]);
    for (auto& a : *n->mutable_attribute()) {
      if (a.has_g()) {
        auto g = RewriteSubgraph(a.g(), rn, facts, /*expand_outputs=*/false, nullptr);
        if (!g.ok()) return Nest(np, rn, a.name(), g.status());
        *a.mutable_g() = std::move(*g);
      }
      for (auto& sg : *a.mutable_graphs()) {
        auto g = RewriteSubgraph(sg, rn, facts, /*expand_outputs=*/false, nullptr);
        if (!g.ok()) return Nest(np, rn, a.name(), g.status());
        sg = std::move(*g);
      }
    }
    Fold(np, ins, outs, facts);
    return absl::OkStatus();
  }

  absl::Status Nest(const onnx::NodeProto& np, const Renames& rn, const std::string& attr,
                    const absl::Status& s) const {
    return absl::Status(s.code(),
                        absl::StrCat(Describe(np, rn), ": attribute '", attr, "': ", s.message()));
  }

  void Fold(const onnx::NodeProto& np, const std::vector<std::string>& ins,
            const std::vector<std::string>& outs, Facts& facts) {
    if (outs.size() != 1 || outs[0].empty() || !(np.domain().empty() || np.domain() == "ai.onnx"))
      return;
    const std::string& op = np.op_type();
    if (op == "Constant") {
      for (const auto& a : np.attribute()) {
        if (a.name() == "value" && a.has_t() && IsSmall(a.t())) {
          auto t = TensorFromProto(a.t(), "");
          if (t.ok()) facts.SetConstant(outs[0], std::move(*t));
        } else if (a.name() == "value_int") {
          facts.SetConstant(outs[0], ScalarTensor(DType::kInt64, a.i()));
        }
      }
      return;
    }
    std::vector<const HostTensor*> c;
    for (const std::string& i : ins) {
      const HostTensor* t = i.empty() ? nullptr : facts.FindConstant(i);
      if (t == nullptr) return;
      c.push_back(t);
    }
    if (op == "Identity" && c.size() == 1) {
      facts.SetConstant(outs[0], *c[0]);
    } else if (op == "Not" && c.size() == 1 && c[0]->dtype() == DType::kBool) {
      HostTensor t = *c[0];
      for (int64_t i = 0; i < t.num_elements(); ++i) t.SetFromInt64(i, t.GetAsDouble(i) == 0);
      facts.SetConstant(outs[0], std::move(t));
    } else if ((op == "Add" || op == "Sub") && c.size() == 2 && c[0]->dtype() == c[1]->dtype() &&
               c[0]->shape() == c[1]->shape()) {
      auto a = ScalarInt(*c[0]), b = ScalarInt(*c[1]);
      if (!a || !b) return;
      auto r = op == "Add" ? ir::CheckedAdd(*a, *b) : ir::CheckedSub(*a, *b);
      if (!r) return;
      HostTensor t = *c[0];
      t.SetFromInt64(0, *r);
      if (ScalarInt(t) == r) facts.SetConstant(outs[0], std::move(t));
    }
  }

  absl::Status ConcatFromSequence(const onnx::NodeProto& np, const Renames& rn,
                                  const std::vector<std::string>& ins, const std::string& result,
                                  Facts& facts, onnx::GraphProto* out) {
    auto seq = RequireSequence(np, rn, ins.empty() ? "" : ins[0], facts);
    if (!seq.ok()) return seq.status();
    std::vector<std::string> elems = (*seq)->elements;
    if (elems.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(np, rn), ": the sequence is empty (known at compile time)"));
    }
    std::optional<int64_t> axis = IntAttr(np, "axis");
    if (!axis) return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": no axis"));
    if (IntAttr(np, "new_axis").value_or(0) != 0) {
      // Unsqueeze's axis counts in the output rank, as ConcatFromSequence's does here.
      for (std::string& e : elems) {
        std::string u = Fresh(absl::StrCat(result, "/unsqueezed"));
        onnx::NodeProto* n;
        if (opset_ >= 13) {
          n = Emit("Unsqueeze", {e, EmitInts({*axis}, result + "/axes", facts, out)}, {u}, out);
        } else {
          n = Emit("Unsqueeze", {e}, {u}, out);
          onnx::AttributeProto* a = n->add_attribute();
          a->set_name("axes");
          a->set_type(onnx::AttributeProto::INTS);
          a->add_ints(*axis);
        }
        e = u;
      }
    }
    onnx::NodeProto* n = Emit("Concat", elems, {result}, out);
    if (!np.name().empty()) n->set_name(absl::StrCat(rn.prefix, np.name()));
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(*axis);
    return absl::OkStatus();
  }

  absl::Status SplitToSequence(const onnx::NodeProto& np, const Renames& rn,
                               const std::vector<std::string>& ins,
                               const std::vector<std::string>& outs, Facts& facts,
                               onnx::GraphProto* out) {
    if (outs.size() != 1 || ins.empty() || ins[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(np, rn), ": expected an input and one output"));
    }
    const HostTensor* split =
        ins.size() > 1 && !ins[1].empty() ? facts.FindConstant(ins[1]) : nullptr;
    if (split == nullptr || split->shape().size() != 1) {
      if (ins.size() > 1 && !ins[1].empty() && split == nullptr) {
        auto known = KnownInt(np, rn, ins[1], facts, "split");
        if (!known.ok()) return known.status();
      }
      return absl::UnimplementedError(absl::StrCat(
          Describe(np, rn),
          ": only a constant 1-D 'split' is supported (the number of pieces must not depend on "
          "the input's shape)"));
    }
    std::vector<SymDim> sizes = ir::KnownFromTensor(*split);
    std::vector<std::string> pieces;
    for (size_t k = 0; k < sizes.size(); ++k) {
      pieces.push_back(Fresh(absl::StrCat(outs[0], "[", k, "]")));
    }
    if (pieces.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": 'split' is empty"));
    }
    onnx::NodeProto* n = Emit(
        "Split",
        opset_ >= 13 ? std::vector<std::string>{ins[0], ins[1]} : std::vector<std::string>{ins[0]},
        pieces, out);
    if (!np.name().empty()) n->set_name(absl::StrCat(rn.prefix, np.name()));
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(IntAttr(np, "axis").value_or(0));
    if (opset_ < 13) {
      onnx::AttributeProto* s = n->add_attribute();
      s->set_name("split");
      s->set_type(onnx::AttributeProto::INTS);
      for (const SymDim& d : sizes) s->add_ints(d.coef());
    }
    facts.SetStructured(outs[0], Structured::Sequence(std::move(pieces)));
    return absl::OkStatus();
  }

  // True when `g` involves structured values: it declares or makes them, or reads one from an
  // enclosing scope.
  bool Involves(const onnx::GraphProto& g, const Renames& rn, const Facts& facts) const {
    if (GraphUses(g)) return true;
    std::set<std::string> used;
    CollectUsedNames(g, &used);
    for (const std::string& n : used) {
      if (facts.FindStructured(rn.Translate(n)) != nullptr) return true;
    }
    return false;
  }

  // Inlines `body` with its formal inputs bound to `inputs`, appending its nodes to `out`;
  // `results` receives its outputs. Every name the body defines gets a fresh final name.
  absl::Status Inline(const onnx::GraphProto& body, const std::vector<Val>& inputs,
                      const Renames& rn, const std::string& prefix, Facts& facts,
                      onnx::GraphProto* out, std::vector<Val>* results) {
    Renames inner;
    inner.parent = &rn;
    inner.prefix = prefix;
    std::set<std::string> defined;
    CollectDefinedNames(body, &defined);
    for (const std::string& d : defined) inner.names[d] = Fresh(prefix + d);
    if (static_cast<size_t>(body.input_size()) != inputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("the body '", body.name(), "' has ",
                                                     body.input_size(), " inputs, given ",
                                                     inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string& formal = body.input(static_cast<int>(i)).name();
      if (inputs[i].structured.has_value()) {
        facts.SetStructured(inner.names[formal], *inputs[i].structured);
      } else {
        inner.names[formal] = inputs[i].tensor;
      }
    }
    for (const auto& init : body.initializer()) {
      auto t = TensorFromProto(init, "");
      if (!t.ok()) return t.status();
      std::string name = inner.Translate(init.name());
      EmitConstant(*t, name, out);
      facts.SetConstant(name, std::move(*t));
    }
    inlined_nodes_ += body.node_size();
    if (inlined_nodes_ > kMaxInlinedNodes) {
      return absl::UnimplementedError(
          absl::StrCat("resolving sequences at compile time would inline more than ",
                       kMaxInlinedNodes, " nodes (loops or maps over long sequences)"));
    }
    for (const auto& np : body.node()) {
      if (auto s = RewriteNode(np, inner, facts, out); !s.ok()) return s;
    }
    results->clear();
    for (const auto& o : body.output())
      results->push_back(ValueOf(inner.Translate(o.name()), facts));
    return absl::OkStatus();
  }

  // Rewrites a subgraph that stays one (a branch or body the compiler runs itself). With
  // `expand_outputs`, a structured output becomes its element tensors (described in
  // `structure`, one entry per declared output, nullopt for a tensor); otherwise it is an error.
  absl::StatusOr<onnx::GraphProto> RewriteSubgraph(
      const onnx::GraphProto& g, const Renames& rn, const Facts& outer, bool expand_outputs,
      std::vector<std::optional<Structured>>* structure) {
    onnx::GraphProto ng;
    ng.set_name(g.name());
    Facts facts(&outer);
    for (const auto& init : g.initializer()) {
      onnx::TensorProto* t = ng.add_initializer();
      *t = init;
      t->set_name(rn.Translate(init.name()));
    }
    for (const auto& in : g.input()) {
      if (in.has_type() && IsStructuredType(in.type())) {
        return absl::UnimplementedError(absl::StrCat(
            "subgraph '", g.name(), "' input '", in.name(),
            "' is a sequence or optional; only loops that are unrolled at compile time may "
            "carry them"));
      }
      onnx::ValueInfoProto* vi = ng.add_input();
      *vi = in;
      vi->set_name(rn.Translate(in.name()));
    }
    for (const auto& np : g.node()) {
      if (auto s = RewriteNode(np, rn, facts, &ng); !s.ok()) return s;
    }
    for (const auto& o : g.output()) {
      std::string name = rn.Translate(o.name());
      const Structured* s = facts.FindStructured(name);
      if (s == nullptr) {
        onnx::ValueInfoProto* vi = ng.add_output();
        *vi = o;
        vi->set_name(name);
        if (vi->has_type() && !vi->type().has_tensor_type()) vi->clear_type();
        if (structure != nullptr) structure->push_back(std::nullopt);
        continue;
      }
      if (!expand_outputs) {
        return absl::UnimplementedError(absl::StrCat(
            "subgraph '", g.name(), "' output '", o.name(), "' is ", s->Describe(),
            "; only If branches and unrolled loops may produce sequences or optionals"));
      }
      for (size_t k = 0; k < s->elements.size(); ++k) {
        std::string elem = Fresh(absl::StrCat(name, "[", k, "]"));
        EmitIdentity(s->elements[k], elem, &ng);
        ng.add_output()->set_name(elem);
      }
      structure->push_back(*s);
    }
    return ng;
  }

  // An If producing or reading structured values. Returns false when it does not (copied as is).
  absl::StatusOr<bool> RewriteIf(const onnx::NodeProto& np, const Renames& rn,
                                 const std::vector<std::string>& ins,
                                 const std::vector<std::string>& outs, Facts& facts,
                                 onnx::GraphProto* out) {
    const onnx::GraphProto* then_g = GraphAttr(np, "then_branch");
    const onnx::GraphProto* else_g = GraphAttr(np, "else_branch");
    if (then_g == nullptr || else_g == nullptr || ins.empty()) return false;
    if (!Involves(*then_g, rn, facts) && !Involves(*else_g, rn, facts)) return false;
    std::string prefix = absl::StrCat(rn.prefix, np.name().empty() ? out0Name(outs) : np.name());
    if (const HostTensor* c = facts.FindConstant(ins[0])) {
      auto v = ScalarInt(*c);
      if (!v) {
        return absl::InvalidArgumentError(
            absl::StrCat(Describe(np, rn), ": the condition must hold one bool"));
      }
      const onnx::GraphProto& taken = *v != 0 ? *then_g : *else_g;
      std::vector<Val> results;
      auto s = Inline(taken, {}, rn, absl::StrCat(prefix, *v != 0 ? "/then/" : "/else/"), facts,
                      out, &results);
      if (!s.ok()) return Nest(np, rn, *v != 0 ? "then_branch" : "else_branch", s);
      if (results.size() != outs.size()) {
        return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": the branch has ",
                                                       results.size(), " outputs, the node ",
                                                       outs.size()));
      }
      for (size_t j = 0; j < outs.size(); ++j) Bind(results[j], outs[j], facts, out);
      return true;
    }
    // The condition is only known at run time: both branches must have the same structure, and
    // the If then selects between their element tensors.
    std::vector<std::optional<Structured>> st, se;
    auto tg = RewriteSubgraph(*then_g, rn, facts, /*expand_outputs=*/true, &st);
    if (!tg.ok()) return Nest(np, rn, "then_branch", tg.status());
    auto eg = RewriteSubgraph(*else_g, rn, facts, /*expand_outputs=*/true, &se);
    if (!eg.ok()) return Nest(np, rn, "else_branch", eg.status());
    if (st.size() != outs.size() || se.size() != outs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(np, rn), ": the branches' output counts differ from the node's"));
    }
    std::vector<std::string> expanded;
    for (size_t j = 0; j < outs.size(); ++j) {
      bool same = st[j].has_value() == se[j].has_value() &&
                  (!st[j].has_value() || st[j]->SameStructure(*se[j]));
      if (!same) {
        if (bindable_.count(ins[0]) && options_.needs_binding != nullptr) {
          auto& nb = *options_.needs_binding;
          if (std::find(nb.begin(), nb.end(), ins[0]) == nb.end()) nb.push_back(ins[0]);
        }
        return absl::FailedPreconditionError(absl::StrCat(
            Describe(np, rn), ": output ", j, " is ",
            st[j] ? st[j]->Describe() : std::string("a tensor"), " in the then branch but ",
            se[j] ? se[j]->Describe() : std::string("a tensor"),
            " in the else branch, so the condition '", ins[0],
            "' must be known at compile time; bind it to a constant"));
      }
      if (!st[j].has_value()) {
        expanded.push_back(outs[j]);
        continue;
      }
      Structured s = *st[j];
      for (size_t k = 0; k < s.elements.size(); ++k) {
        s.elements[k] = Fresh(absl::StrCat(outs[j], "[", k, "]"));
        expanded.push_back(s.elements[k]);
      }
      facts.SetStructured(outs[j], std::move(s));
    }
    onnx::NodeProto* n = Emit("If", {ins[0]}, expanded, out);
    if (!np.name().empty()) n->set_name(absl::StrCat(rn.prefix, np.name()));
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = std::move(*tg);
    a = n->add_attribute();
    a->set_name("else_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = std::move(*eg);
    return true;
  }

  absl::Status TooManyIterations(const onnx::NodeProto& np, const Renames& rn) const {
    return absl::UnimplementedError(
        absl::StrCat(Describe(np, rn),
                     ": a loop over sequences is unrolled at compile time, and this one runs "
                     "more than ",
                     kMaxUnrolledIterations, " iterations"));
  }

  static std::string out0Name(const std::vector<std::string>& outs) {
    return outs.empty() ? std::string("node") : outs[0];
  }

  // A Loop carrying or reading structured values, unrolled (its trip count and conditions must
  // be known at compile time). Returns false when the Loop involves none (copied as is).
  absl::StatusOr<bool> UnrollLoop(const onnx::NodeProto& np, const Renames& rn,
                                  const std::vector<std::string>& ins,
                                  const std::vector<std::string>& outs, Facts& facts,
                                  onnx::GraphProto* out) {
    const onnx::GraphProto* body = GraphAttr(np, "body");
    if (body == nullptr || ins.size() < 2) return false;
    // Carrying a structured value forces unrolling; a body that only reads or makes them
    // inside stays a loop unless its trip count and condition are known anyway.
    bool carries = UsesStructuredIo(*body);
    for (size_t i = 2; i < ins.size(); ++i) {
      carries |= !ins[i].empty() && facts.FindStructured(ins[i]) != nullptr;
    }
    if (!carries) {
      if (!Involves(*body, rn, facts)) return false;
      bool known = (ins[0].empty() || facts.FindConstant(ins[0]) != nullptr) &&
                   (ins[1].empty() || facts.FindConstant(ins[1]) != nullptr) &&
                   !(ins[0].empty() && ins[1].empty());
      if (!known) return false;
    }
    std::optional<int64_t> trips;
    if (!ins[0].empty()) {
      auto m = KnownInt(np, rn, ins[0], facts, "trip count");
      if (!m.ok()) return m.status();
      trips = *m;
      if (*trips > kMaxUnrolledIterations) return TooManyIterations(np, rn);
    }
    bool cond = true;
    if (!ins[1].empty()) {
      auto c = KnownInt(np, rn, ins[1], facts, "condition");
      if (!c.ok()) return c.status();
      cond = *c != 0;
    }
    size_t carried = ins.size() - 2;
    if (static_cast<size_t>(body->output_size()) < 1 + carried ||
        static_cast<size_t>(body->input_size()) != 2 + carried) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(np, rn), ": the body's inputs and outputs do not match the node"));
    }
    size_t scans = body->output_size() - 1 - carried;
    std::vector<Val> values;
    for (size_t i = 2; i < ins.size(); ++i) {
      if (ins[i].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Describe(np, rn), ": loop-carried input ", i, " is missing"));
      }
      values.push_back(ValueOf(ins[i], facts));
    }
    std::vector<std::vector<std::string>> parts(scans);
    std::string prefix = absl::StrCat(rn.prefix, np.name().empty() ? out0Name(outs) : np.name());
    for (int64_t i = 0; cond && (!trips || i < *trips); ++i) {
      if (i >= kMaxUnrolledIterations) return TooManyIterations(np, rn);
      std::string iter_prefix = absl::StrCat(prefix, "/", i, "/");
      std::vector<Val> inputs(2);
      inputs[0].tensor = Fresh(iter_prefix + "iteration");
      HostTensor it = ScalarTensor(DType::kInt64, i);
      EmitConstant(it, inputs[0].tensor, out);
      facts.SetConstant(inputs[0].tensor, std::move(it));
      inputs[1].tensor = Fresh(iter_prefix + "condition");
      HostTensor ct = ScalarTensor(DType::kBool, 1);
      EmitConstant(ct, inputs[1].tensor, out);
      facts.SetConstant(inputs[1].tensor, std::move(ct));
      inputs.insert(inputs.end(), values.begin(), values.end());
      std::vector<Val> results;
      if (auto s = Inline(*body, inputs, rn, iter_prefix, facts, out, &results); !s.ok()) {
        return Nest(np, rn, "body", s);
      }
      const HostTensor* c = results[0].structured ? nullptr : facts.FindConstant(results[0].tensor);
      std::optional<int64_t> next = c == nullptr ? std::nullopt : ScalarInt(*c);
      if (!next) {
        return absl::FailedPreconditionError(
            absl::StrCat(Describe(np, rn),
                         ": the condition the body computes must be known at compile time "
                         "(a loop over sequences is unrolled at compile time)"));
      }
      cond = *next != 0;
      values.assign(results.begin() + 1,
                    results.begin() + 1 + static_cast<std::ptrdiff_t>(carried));
      for (size_t k = 0; k < scans; ++k) {
        const Val& v = results[1 + carried + k];
        if (v.structured) {
          return absl::UnimplementedError(
              absl::StrCat(Describe(np, rn), ": scan outputs must be tensors"));
        }
        parts[k].push_back(v.tensor);
      }
    }
    for (size_t j = 0; j < carried && j < outs.size(); ++j) Bind(values[j], outs[j], facts, out);
    for (size_t k = 0; k < scans && carried + k < outs.size(); ++k) {
      const std::string& result = outs[carried + k];
      if (result.empty()) continue;
      if (parts[k].empty()) {
        return absl::UnimplementedError(absl::StrCat(
            Describe(np, rn), ": the unrolled loop runs zero times, so its scan output '", result,
            "' has no known shape"));
      }
      std::vector<std::string> rows;
      for (const std::string& p : parts[k]) {
        std::string u = Fresh(absl::StrCat(result, "/row"));
        onnx::NodeProto* n;
        if (opset_ >= 13) {
          n = Emit("Unsqueeze", {p, EmitInts({0}, result + "/axes", facts, out)}, {u}, out);
        } else {
          n = Emit("Unsqueeze", {p}, {u}, out);
          onnx::AttributeProto* a = n->add_attribute();
          a->set_name("axes");
          a->set_type(onnx::AttributeProto::INTS);
          a->add_ints(0);
        }
        rows.push_back(u);
      }
      onnx::NodeProto* n = Emit("Concat", rows, {result}, out);
      onnx::AttributeProto* a = n->add_attribute();
      a->set_name("axis");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(0);
    }
    return true;
  }

  // SequenceMap: the body inlined once per element.
  absl::Status SequenceMap(const onnx::NodeProto& np, const Renames& rn,
                           const std::vector<std::string>& ins,
                           const std::vector<std::string>& outs, Facts& facts,
                           onnx::GraphProto* out) {
    const onnx::GraphProto* body = GraphAttr(np, "body");
    if (body == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": no body"));
    auto first = RequireSequence(np, rn, ins.empty() ? "" : ins[0], facts);
    if (!first.ok()) return first.status();
    size_t n = (*first)->elements.size();
    if (static_cast<int64_t>(n) > kMaxUnrolledIterations) {
      return absl::UnimplementedError(
          absl::StrCat(Describe(np, rn), ": the sequence is too long to map at compile time"));
    }
    for (const std::string& i : ins) {
      const Structured* s = i.empty() ? nullptr : facts.FindStructured(i);
      if (s != nullptr && (!s->is_sequence() || s->elements.size() != n)) {
        return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": input '", i, "' is ",
                                                       s->Describe(), ", input '", ins[0], "' has ",
                                                       n, " tensors"));
      }
    }
    std::vector<std::vector<std::string>> parts(outs.size());
    std::string prefix = absl::StrCat(rn.prefix, np.name().empty() ? out0Name(outs) : np.name());
    for (size_t e = 0; e < n; ++e) {
      std::vector<Val> inputs;
      for (const std::string& i : ins) {
        const Structured* s = i.empty() ? nullptr : facts.FindStructured(i);
        Val v;
        v.tensor = s != nullptr ? s->elements[e] : i;
        inputs.push_back(std::move(v));
      }
      std::vector<Val> results;
      auto s = Inline(*body, inputs, rn, absl::StrCat(prefix, "/", e, "/"), facts, out, &results);
      if (!s.ok()) return Nest(np, rn, "body", s);
      if (results.size() != outs.size()) {
        return absl::InvalidArgumentError(absl::StrCat(Describe(np, rn), ": the body has ",
                                                       results.size(), " outputs, the node ",
                                                       outs.size()));
      }
      for (size_t j = 0; j < outs.size(); ++j) {
        if (results[j].structured) {
          return absl::UnimplementedError(
              absl::StrCat(Describe(np, rn), ": body outputs must be tensors"));
        }
        parts[j].push_back(results[j].tensor);
      }
    }
    for (size_t j = 0; j < outs.size(); ++j) {
      if (!outs[j].empty()) facts.SetStructured(outs[j], Structured::Sequence(parts[j]));
    }
    return absl::OkStatus();
  }

  const ImportOptions& options_;
  const std::vector<std::optional<MovedRawData>>& raw_data_;
  int64_t opset_ = 0;
  int64_t inlined_nodes_ = 0;       // Body nodes inlined so far (bounded by kMaxInlinedNodes).
  std::set<std::string> taken_;     // Every name in use, original or fresh.
  std::set<std::string> bindable_;  // Tensor graph inputs a binding could make constant.
};

bool UsesStructuredIo(const onnx::GraphProto& g) {
  for (const auto& v : g.input()) {
    if (IsStructuredType(v.type())) return true;
  }
  for (const auto& v : g.output()) {
    if (IsStructuredType(v.type())) return true;
  }
  return false;
}

bool GraphUses(const onnx::GraphProto& g) {
  if (UsesStructuredIo(g)) return true;
  for (const auto& n : g.node()) {
    if ((n.domain().empty() || n.domain() == "ai.onnx") && IsStructuredOp(n.op_type())) return true;
    for (const auto& a : n.attribute()) {
      if (a.has_g() && GraphUses(a.g())) return true;
      for (const auto& sg : a.graphs()) {
        if (GraphUses(sg)) return true;
      }
    }
  }
  return false;
}

}  // namespace

bool UsesSequencesOrOptionals(const onnx::GraphProto& graph) { return GraphUses(graph); }

absl::StatusOr<IoKind> IoKindOf(const onnx::TypeProto& type, const std::string& what) {
  if (type.has_tensor_type() || type.value_case() == onnx::TypeProto::VALUE_NOT_SET) {
    return IoKind::kTensor;
  }
  auto tensor_elements = [](const onnx::TypeProto& t) {
    return t.has_sequence_type() && t.sequence_type().elem_type().has_tensor_type();
  };
  if (tensor_elements(type)) return IoKind::kSequence;
  if (type.has_optional_type()) {
    const onnx::TypeProto& e = type.optional_type().elem_type();
    if (e.has_tensor_type()) return IoKind::kOptionalTensor;
    if (tensor_elements(e)) return IoKind::kOptionalSequence;
  }
  return absl::UnimplementedError(absl::StrCat(
      what, " has an unsupported type (maps, sparse tensors and nested sequences are not)"));
}

absl::Status ResolveSequences(onnx::ModelProto* model, const ImportOptions& options,
                              const std::vector<std::optional<MovedRawData>>& raw_data,
                              std::vector<OutputLayout>* layout) {
  return Resolver(options, raw_data).Run(model, layout);
}

std::vector<OutputLayout> TensorOutputLayout(const onnx::GraphProto& graph) {
  std::vector<OutputLayout> layout;
  for (int i = 0; i < graph.output_size(); ++i) {
    layout.push_back({graph.output(i).name(), IoKind::kTensor, true, static_cast<size_t>(i), 1});
  }
  return layout;
}

}  // namespace cuvil
