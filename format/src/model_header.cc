#include "cuvil/format/model_header.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "cuvil/runtime/dim_expr_codec.h"
#include "cuvil/runtime/status_macros.h"

namespace cuvil {
namespace pb = ::cuvil::jitcache::v1;
namespace {

// Writes `d`: coef and power for a monomial in the batch, else its encoded expression.
void ToProto(const SymDim& d, pb::SymDim* p) {
  if (d.IsMonomial()) {
    p->set_coef(d.coef());
    p->set_power(d.power());
    return;
  }
  for (int64_t w : EncodeDimExpr(d.expr())) p->add_expr(w);
}

// Reads a dim written by ToProto; `symbols` names the model's symbols.
absl::StatusOr<SymDim> FromProto(const pb::SymDim& p, absl::Span<const std::string> symbols) {
  if (p.expr_size() == 0) return SymDim{p.coef(), p.power()};
  auto e = DecodeDimExpr(std::vector<int64_t>(p.expr().begin(), p.expr().end()), symbols);
  if (!e.ok()) return absl::DataLossError(absl::StrCat("bad dim: ", e.status().message()));
  return SymDim(*std::move(e));
}

void ToProto(const TensorSignature& s, pb::TensorSignature* p) {
  p->set_name(s.name);
  p->set_dtype(static_cast<int32_t>(s.dtype));
  for (const SymDim& d : s.shape) ToProto(d, p->add_shape());
}

absl::StatusOr<TensorSignature> FromProto(const pb::TensorSignature& p,
                                          absl::Span<const std::string> symbols) {
  TensorSignature s;
  s.name = p.name();
  s.dtype = static_cast<DType>(p.dtype());
  if (DTypeSize(s.dtype) == 0) return absl::DataLossError(absl::StrCat("bad dtype ", p.dtype()));
  for (const auto& d : p.shape()) {
    CUVIL_ASSIGN_OR_RETURN(SymDim dim, FromProto(d, symbols));
    s.shape.push_back(std::move(dim));
  }
  return s;
}

// DataLoss unless `words` is an expression over `symbols`.
absl::Status CheckProgram(const std::vector<int64_t>& words, absl::Span<const std::string> symbols,
                          const char* what) {
  if (auto e = DecodeDimExpr(words, symbols); !e.ok()) {
    return absl::DataLossError(absl::StrCat("bad ", what, ": ", e.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace

pb::CompiledModelHeader EncodeModelHeader(const CompiledModel& m) {
  // Every field of CompiledModel, ArenaPlan and KernelFunction by name: a field added to one of
  // them does not compile until it is written here (and read in DecodeModelHeader).
  const auto& [name, symbol, symbols, data_dependent_dims, dim_constraints, inputs, outputs,
               object_code /* a section of the container */, weights /* likewise */, arena, kernels,
               scratch_sites, unbounded_scratch, timings, cpu, batch_split_note, makes_strings] = m;
  const auto& [bytes_program, per_batch_bytes, fixed_bytes, unplanned_bytes, live_per_batch_bytes,
               live_fixed_bytes, max_shards] = arena;
  (void)object_code;
  (void)weights;
  pb::CompiledModelHeader h;
  h.set_name(name);
  h.set_symbol(symbol);
  for (const std::string& s : symbols) h.add_symbols(s);
  for (const auto& s : inputs) ToProto(s, h.add_inputs());
  for (const auto& s : outputs) ToProto(s, h.add_outputs());
  h.set_arena_per_batch_bytes(per_batch_bytes);
  h.set_arena_fixed_bytes(fixed_bytes);
  h.set_arena_unplanned_bytes(unplanned_bytes);
  h.set_arena_live_per_batch_bytes(live_per_batch_bytes);
  h.set_arena_live_fixed_bytes(live_fixed_bytes);
  h.set_arena_max_shards(max_shards);
  for (int64_t w : bytes_program) h.add_arena_bytes_program(w);
  h.set_batch_split_note(batch_split_note);
  for (const KernelFunction& k : kernels) {
    const auto& [index, k_symbol, op_type, node_name, signature, parent] = k;
    auto* pk = h.add_kernels();
    pk->set_index(index);
    pk->set_symbol(k_symbol);
    pk->set_op_type(op_type);
    pk->set_node_name(node_name);
    pk->set_signature(signature);
    if (parent >= 0) pk->set_parent(parent);
  }
  for (const PhaseTiming& t : timings) {
    auto* pt = h.add_timings();
    pt->set_phase(t.phase);
    pt->set_ms(t.ms);
  }
  h.set_compiled_cpu(cpu);
  for (const DimConstraint& c : dim_constraints) {
    auto* pc = h.add_dim_constraints();
    pc->set_value(c.value);
    pc->set_dim(c.dim);
    for (int64_t w : c.program) pc->add_program(w);
    pc->set_equal(c.equal);
    pc->set_description(c.description);
  }
  for (const DataDependentDim& d : data_dependent_dims) {
    auto* pd = h.add_data_dependent_dims();
    pd->set_symbol(d.symbol);
    for (int64_t w : d.upper_bound) pd->add_upper_bound(w);
    pd->set_producer(d.producer);
  }
  h.set_makes_strings(makes_strings);
  for (const ScratchSite& s : scratch_sites) {
    auto* ps = h.add_scratch_sites();
    ps->set_kernel(s.kernel);
    ps->set_kind(s.kind);
    for (const SymDim& d : s.words) ToProto(d, ps->add_words());
  }
  h.set_unbounded_scratch(unbounded_scratch);
  return h;
}

absl::StatusOr<CompiledModel> DecodeModelHeader(const pb::CompiledModelHeader& h,
                                                std::string_view object_code, WeightsBlob weights) {
  CompiledModel m;
  m.name = h.name();
  m.symbol = h.symbol();
  m.symbols.assign(h.symbols().begin(), h.symbols().end());
  if (m.symbols.empty() && !m.symbol.empty()) m.symbols.push_back(m.symbol);
  m.arena.bytes_program.assign(h.arena_bytes_program().begin(), h.arena_bytes_program().end());
  if (!m.arena.bytes_program.empty()) {
    CUVIL_RETURN_IF_ERROR(CheckProgram(m.arena.bytes_program, m.symbols, "arena size"));
  }
  for (const auto& pc : h.dim_constraints()) {
    DimConstraint c{pc.value(),
                    pc.dim(),
                    {pc.program().begin(), pc.program().end()},
                    pc.equal(),
                    pc.description()};
    CUVIL_RETURN_IF_ERROR(CheckProgram(c.program, m.symbols, "dim constraint"));
    m.dim_constraints.push_back(std::move(c));
  }
  // Data-dependent symbols are the last ones, in order.
  const size_t dd_count = static_cast<size_t>(h.data_dependent_dims_size());
  for (const auto& pd : h.data_dependent_dims()) {
    DataDependentDim d{
        pd.symbol(), {pd.upper_bound().begin(), pd.upper_bound().end()}, pd.producer()};
    const size_t expected = m.symbols.size() - dd_count + m.data_dependent_dims.size();
    if (dd_count >= m.symbols.size() || static_cast<size_t>(d.symbol) != expected) {
      return absl::DataLossError("bad data-dependent dim: not one of the last symbols");
    }
    CUVIL_RETURN_IF_ERROR(CheckProgram(d.upper_bound, m.symbols, "data-dependent dim bound"));
    m.data_dependent_dims.push_back(std::move(d));
  }
  m.makes_strings = h.makes_strings();
  for (const auto& p : h.inputs()) {
    CUVIL_ASSIGN_OR_RETURN(TensorSignature s, FromProto(p, m.symbols));
    m.inputs.push_back(std::move(s));
  }
  for (const auto& p : h.outputs()) {
    CUVIL_ASSIGN_OR_RETURN(TensorSignature s, FromProto(p, m.symbols));
    m.outputs.push_back(std::move(s));
  }
  if (object_code.empty()) return absl::DataLossError("no object code");
  m.object_code.assign(object_code.data(), object_code.size());
  m.weights = std::move(weights);
  m.arena.per_batch_bytes = h.arena_per_batch_bytes();
  m.arena.fixed_bytes = h.arena_fixed_bytes();
  m.arena.unplanned_bytes = h.arena_unplanned_bytes();
  m.arena.live_per_batch_bytes = h.arena_live_per_batch_bytes();
  m.arena.live_fixed_bytes = h.arena_live_fixed_bytes();
  m.arena.max_shards = std::max(1, h.arena_max_shards());
  m.batch_split_note = h.batch_split_note();
  if (m.arena.per_batch_bytes < 0 || m.arena.fixed_bytes < 0 ||
      m.arena.max_shards > kMaxBatchShards) {
    return absl::DataLossError("negative arena size or too many batch parts");
  }
  for (int i = 0; i < h.kernels_size(); ++i) {
    const auto& k = h.kernels(i);
    if (k.index() != i) return absl::DataLossError("kernel table out of order");
    if (k.has_parent() && (k.parent() < 0 || k.parent() >= i)) {
      return absl::DataLossError("kernel parent out of range");
    }
    m.kernels.push_back({k.index(), k.symbol(), k.op_type(), k.node_name(), k.signature(),
                         k.has_parent() ? k.parent() : -1});
  }
  for (const auto& t : h.timings()) m.timings.push_back({t.phase(), t.ms()});
  m.cpu = h.compiled_cpu();
  for (const auto& ps : h.scratch_sites()) {
    if (ps.kernel() < 0 || ps.kernel() >= h.kernels_size()) {
      return absl::DataLossError("scratch site of no kernel");
    }
    ScratchSite s{ps.kernel(), ps.kind(), {}};
    for (const auto& d : ps.words()) {
      CUVIL_ASSIGN_OR_RETURN(SymDim dim, FromProto(d, m.symbols));
      s.words.push_back(std::move(dim));
    }
    m.scratch_sites.push_back(std::move(s));
  }
  m.unbounded_scratch = h.unbounded_scratch();
  return m;
}

}  // namespace cuvil
