// Private: the symbolic parts of a CompiledModel (dims, the symbolic arena size, dim constraints)
// in the JIT cache's and the snapshot's protobuf messages, which share their field layout.
#ifndef CUVIL_JITCACHE_SRC_SYMBOLIC_FIELDS_H_
#define CUVIL_JITCACHE_SRC_SYMBOLIC_FIELDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "cuvil/compiler/compiled_model.h"
#include "cuvil/runtime/dim_expr_codec.h"

namespace cuvil::jitcache_internal {

// Writes `d`: coef and power for a monomial in the batch, else its encoded expression.
template <typename DimProto>
void SymDimToProto(const SymDim& d, DimProto* p) {
  if (d.IsMonomial()) {
    p->set_coef(d.coef());
    p->set_power(d.power());
    return;
  }
  for (int64_t w : EncodeDimExpr(d.expr())) p->add_expr(w);
}

// Reads a dim written by SymDimToProto; `symbols` names the model's symbols. DataLoss for a
// malformed expression (untrusted bytes).
template <typename DimProto>
absl::StatusOr<SymDim> SymDimFromProto(const DimProto& p, absl::Span<const std::string> symbols) {
  if (p.expr_size() == 0) return SymDim{p.coef(), p.power()};
  auto e = DecodeDimExpr(std::vector<int64_t>(p.expr().begin(), p.expr().end()), symbols);
  if (!e.ok()) return absl::DataLossError(absl::StrCat("bad dim: ", e.status().message()));
  return SymDim(*std::move(e));
}

// Writes the symbol names, the symbolic arena size and the dim constraints of `m` into `p`, a
// message with fields symbols, arena_bytes_program and dim_constraints.
template <typename ModelProto>
void SymbolicFieldsToProto(const CompiledModel& m, ModelProto* p) {
  for (const std::string& s : m.symbols) p->add_symbols(s);
  for (int64_t w : m.arena.bytes_program) p->add_arena_bytes_program(w);
  for (const DimConstraint& c : m.dim_constraints) {
    auto* pc = p->add_dim_constraints();
    pc->set_value(c.value);
    pc->set_dim(c.dim);
    for (int64_t w : c.program) pc->add_program(w);
    pc->set_equal(c.equal);
    pc->set_description(c.description);
  }
  for (const DataDependentDim& d : m.data_dependent_dims) {
    auto* pd = p->add_data_dependent_dims();
    pd->set_symbol(d.symbol);
    for (int64_t w : d.upper_bound) pd->add_upper_bound(w);
    pd->set_producer(d.producer);
  }
  p->set_makes_strings(m.makes_strings);
}

// Reads what SymbolicFieldsToProto wrote into `m`, checking every program decodes. DataLoss
// otherwise.
template <typename ModelProto>
absl::Status SymbolicFieldsFromProto(const ModelProto& p, CompiledModel* m) {
  m->symbols.assign(p.symbols().begin(), p.symbols().end());
  if (m->symbols.empty() && !m->symbol.empty()) m->symbols.push_back(m->symbol);
  auto check = [&](const std::vector<int64_t>& words, const char* what) -> absl::Status {
    if (auto e = DecodeDimExpr(words, m->symbols); !e.ok()) {
      return absl::DataLossError(absl::StrCat("bad ", what, ": ", e.status().message()));
    }
    return absl::OkStatus();
  };
  m->arena.bytes_program.assign(p.arena_bytes_program().begin(), p.arena_bytes_program().end());
  if (!m->arena.bytes_program.empty()) {
    if (auto s = check(m->arena.bytes_program, "arena size"); !s.ok()) return s;
  }
  for (const auto& pc : p.dim_constraints()) {
    DimConstraint c{pc.value(),
                    pc.dim(),
                    {pc.program().begin(), pc.program().end()},
                    pc.equal(),
                    pc.description()};
    if (auto s = check(c.program, "dim constraint"); !s.ok()) return s;
    m->dim_constraints.push_back(std::move(c));
  }
  // Data-dependent symbols are the last ones, in order.
  const size_t dd_count = static_cast<size_t>(p.data_dependent_dims_size());
  for (const auto& pd : p.data_dependent_dims()) {
    DataDependentDim d{
        pd.symbol(), {pd.upper_bound().begin(), pd.upper_bound().end()}, pd.producer()};
    const size_t expected = m->symbols.size() - dd_count + m->data_dependent_dims.size();
    if (dd_count >= m->symbols.size() || static_cast<size_t>(d.symbol) != expected) {
      return absl::DataLossError("bad data-dependent dim: not one of the last symbols");
    }
    if (auto s = check(d.upper_bound, "data-dependent dim bound"); !s.ok()) return s;
    m->data_dependent_dims.push_back(std::move(d));
  }
  m->makes_strings = p.makes_strings();
  return absl::OkStatus();
}

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_SYMBOLIC_FIELDS_H_
