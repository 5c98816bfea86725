// Shape inference for Einsum: the equation is parsed once into label numbers.
//
// Canonical form seen by code generation: attr "labels_<i>" (one label number per axis of input
// i, an ellipsis expanded into its axes) and "labels_out" (the output's labels, explicit or the
// implicit sorted form); every label names one dimension size, which all uses agree on.
#include <algorithm>
#include <map>

#include "infer_context.h"
#include "internal_attrs.h"

namespace cuvil::ir {
namespace {

// Ellipsis axes get labels 100, 101, ... (letters are 0..51), right-aligned so that broadcasting
// "..." terms of different ranks share their trailing axes.
constexpr int64_t kEllipsisBase = 100;

// One equation term: its letters as label numbers (A..Z = 0..25, a..z = 26..51, so the implicit
// output's label order is numpy's character order) with -1 where
// "..." stands; InvalidArgument on other characters or a second ellipsis.
absl::StatusOr<std::vector<int64_t>> Letters(InferContext& c, const std::string& term) {
  std::vector<int64_t> out;
  bool dots = false;
  for (size_t i = 0; i < term.size(); ++i) {
    char ch = term[i];
    if (ch == ' ') continue;
    if (ch == '.') {
      if (term.compare(i, 3, "...") != 0 || dots) return c.Error("bad ellipsis in equation");
      dots = true;
      out.push_back(-1);
      i += 2;
    } else if (ch >= 'A' && ch <= 'Z') {
      out.push_back(ch - 'A');
    } else if (ch >= 'a' && ch <= 'z') {
      out.push_back(26 + ch - 'a');
    } else {
      return c.Error(std::string("bad character in equation: ") + ch);
    }
  }
  return out;
}

// Replaces the ellipsis of `letters` by `dots` labels, right-aligned against `width`.
std::vector<int64_t> Expand(const std::vector<int64_t>& letters, int dots, int width) {
  std::vector<int64_t> out;
  for (int64_t l : letters) {
    if (l >= 0) {
      out.push_back(l);
      continue;
    }
    for (int e = 0; e < dots; ++e) out.push_back(kEllipsisBase + (width - dots) + e);
  }
  return out;
}

absl::Status Einsum(InferContext& c) {
  Node& n = c.node();
  if (c.num_inputs() < 1) return c.Error("needs at least one input");
  std::string eq = n.attr_string("equation", "");
  std::string lhs = eq, rhs;
  bool explicit_out = false;
  if (size_t arrow = eq.find("->"); arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    rhs = eq.substr(arrow + 2);
    explicit_out = true;
  }
  std::vector<std::vector<int64_t>> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    auto letters = Letters(c, lhs.substr(start, comma - start));
    if (!letters.ok()) return letters.status();
    terms.push_back(*letters);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != c.num_inputs()) return c.Error("equation and input count differ");
  std::vector<int> dots(terms.size(), 0);
  int width = 0;  // the widest ellipsis
  for (size_t i = 0; i < terms.size(); ++i) {
    bool has = std::find(terms[i].begin(), terms[i].end(), -1) != terms[i].end();
    int named = static_cast<int>(terms[i].size()) - (has ? 1 : 0);
    dots[i] = c.in_rank(i) - named;
    if (has ? dots[i] < 0 : dots[i] != 0) {
      return c.Error("equation term " + std::to_string(i) + " does not match its input's rank");
    }
    width = std::max(width, dots[i]);
  }
  std::map<int64_t, SymDim> dims;
  std::map<int64_t, int> uses;
  for (size_t i = 0; i < terms.size(); ++i) {
    if (c.in_dtype(i) != c.in_dtype(0)) return c.Error("inputs must share one type");
    std::vector<int64_t> labels = Expand(terms[i], dots[i], width);
    n.attrs[attr::EinsumLabels(i)] = labels;
    for (size_t a = 0; a < labels.size(); ++a) {
      const SymDim& d = c.in_shape(i)[a];
      ++uses[labels[a]];
      auto [it, fresh] = dims.emplace(labels[a], d);
      if (fresh || it->second == d || d == SymDim::Const(1)) continue;
      if (it->second == SymDim::Const(1)) {
        it->second = d;
        continue;
      }
      return c.Error("label sizes disagree in equation " + eq);
    }
  }
  std::vector<int64_t> out;
  if (explicit_out) {
    auto letters = Letters(c, rhs);
    if (!letters.ok()) return letters.status();
    out = Expand(*letters, width, width);
  } else {
    for (int e = 0; e < width; ++e) out.push_back(kEllipsisBase + e);
    for (const auto& [label, count] : uses) {
      if (label < kEllipsisBase && count == 1) out.push_back(label);
    }
  }
  SymShape shape;
  for (int64_t label : out) {
    auto it = dims.find(label);
    if (it == dims.end()) return c.Error("output label missing from the inputs in " + eq);
    shape.push_back(it->second);
  }
  n.attrs[attr::kEinsumLabelsOut] = out;
  c.SetOutput(0, c.in_dtype(0), shape);
  return absl::OkStatus();
}

}  // namespace

void RegisterEinsumShapes(OpTable& r) { r.DefineShape("Einsum", Einsum).Batch(BatchClass::kMixes); }

}  // namespace cuvil::ir
