// Shape inference for string tensors: StringNormalizer, and which ops accept strings at all
// (OpDef::takes_strings): Cast and CastLike to and from STRING, StringNormalizer, and the ops that
// only move or describe elements. Every other op refuses string inputs before its shape function.
//
// Canonical form seen by code generation: StringNormalizer's "case_change_action" is one of
// NONE, LOWER, UPPER; its output's last dim is a data-dependent symbol (stopwords drop strings;
// an output with none left holds one empty string, so the bound is C + 1).
#include "absl/strings/str_cat.h"
#include "infer_context.h"

namespace cuvil::ir {
namespace {

absl::Status StringNormalizer(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  if (c.in_dtype(0) != DType::kString) return c.Error("input must be a string tensor");
  const SymShape& in = c.in_shape(0);
  if (!(in.size() == 1 || (in.size() == 2 && in[0] == SymDim::Const(1)))) {
    return c.Error("input must have shape [C] or [1, C]");
  }
  Node& n = c.node();
  const std::string action = n.attr_string("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER") {
    return c.Error(
        absl::StrCat("case_change_action must be NONE, LOWER or UPPER, not '", action, "'"));
  }
  n.attrs["case_change_action"] = action;
  if (n.has_attr("stopwords") &&
      !std::holds_alternative<std::vector<std::string>>(n.attrs.at("stopwords"))) {
    return c.Error("stopwords must be a list of strings");
  }
  auto bound = SymAdd(in.back(), SymDim::Const(1));
  if (!bound) return c.Error("input is too large");
  auto count = c.DataDependentDim("count", *bound);
  if (!count.ok()) return count.status();
  SymShape out = in;
  out.back() = *count;
  c.SetOutput(0, DType::kString, std::move(out));
  return absl::OkStatus();
}

}  // namespace

void RegisterStringShapes(OpTable& r) {
  r.DefineShape("StringNormalizer", StringNormalizer).Batch(BatchClass::kMixes);
  for (const char* op : {"StringNormalizer", "Cast", "CastLike", "Identity", "Reshape", "Flatten",
                         "Squeeze", "Unsqueeze", "Shape", "Size"}) {
    r.AllowStrings(op);
  }
}

}  // namespace cuvil::ir
