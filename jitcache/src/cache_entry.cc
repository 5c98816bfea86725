#include "cache_entry.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "host_identity.h"
#include "model_header.h"
#include "symbolic_fields.h"

namespace cuvil::jitcache_internal {
namespace pb = ::cuvil::jitcache::v1;
namespace {

const HostIdentity& Host() { return HostIdentityOfThisProcess(); }

void ToProto(const TensorSignature& s, pb::TensorSignature* p) {
  p->set_name(s.name);
  p->set_dtype(static_cast<int32_t>(s.dtype));
  for (const SymDim& d : s.shape) SymDimToProto(d, p->add_shape());
}

absl::StatusOr<TensorSignature> FromProto(const pb::TensorSignature& p,
                                          absl::Span<const std::string> symbols) {
  TensorSignature s;
  s.name = p.name();
  s.dtype = static_cast<DType>(p.dtype());
  if (DTypeSize(s.dtype) == 0) return absl::DataLossError(absl::StrCat("bad dtype ", p.dtype()));
  for (const auto& d : p.shape()) {
    auto dim = SymDimFromProto(d, symbols);
    if (!dim.ok()) return dim.status();
    s.shape.push_back(*std::move(dim));
  }
  return s;
}

}  // namespace

// The header of `m`'s entry for `key` (sections are added by WriteEntry).
pb::CacheHeader HeaderOf(const CompiledModel& m, const std::string& key) {
  pb::CacheHeader e;
  e.set_key(key);
  e.set_compiler_version(CompilerBuildIdentity());
  e.set_target_triple(Host().triple);
  e.set_cpu(Host().cpu);
  e.set_cpu_features(Host().features);
  e.set_created_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
  e.set_name(m.name);
  e.set_symbol(m.symbol);
  SymbolicFieldsToProto(m, &e);
  for (const auto& s : m.inputs) ToProto(s, e.add_inputs());
  for (const auto& s : m.outputs) ToProto(s, e.add_outputs());
  e.set_arena_per_batch_bytes(m.arena.per_batch_bytes);
  e.set_arena_fixed_bytes(m.arena.fixed_bytes);
  e.set_arena_unplanned_bytes(m.arena.unplanned_bytes);
  e.set_arena_live_per_batch_bytes(m.arena.live_per_batch_bytes);
  e.set_arena_live_fixed_bytes(m.arena.live_fixed_bytes);
  e.set_arena_max_shards(m.arena.max_shards);
  e.set_batch_split_note(m.batch_split_note);
  for (const auto& k : m.kernels) {
    auto* pk = e.add_kernels();
    pk->set_index(k.index);
    pk->set_symbol(k.symbol);
    pk->set_op_type(k.op_type);
    pk->set_node_name(k.node_name);
    pk->set_signature(k.signature);
    if (k.parent >= 0) pk->set_parent(k.parent);
  }
  for (const auto& t : m.timings) {
    auto* pt = e.add_timings();
    pt->set_phase(t.phase);
    pt->set_ms(t.ms);
  }
  e.set_compiled_cpu(m.cpu);
  return e;
}

// Rebuilds a CompiledModel from a checked header and its sections, checking everything a later
// stage would trust (sizes, indices). The weights stay in `weights` (a read-only mapping).
absl::StatusOr<CompiledModel> ModelOf(const pb::CacheHeader& e, std::string_view object_code,
                                      WeightsBlob weights) {
  CompiledModel m;
  m.name = e.name();
  m.symbol = e.symbol();
  if (auto s = SymbolicFieldsFromProto(e, &m); !s.ok()) return s;
  for (const auto& p : e.inputs()) {
    auto s = FromProto(p, m.symbols);
    if (!s.ok()) return s.status();
    m.inputs.push_back(std::move(*s));
  }
  for (const auto& p : e.outputs()) {
    auto s = FromProto(p, m.symbols);
    if (!s.ok()) return s.status();
    m.outputs.push_back(std::move(*s));
  }
  if (object_code.empty()) return absl::DataLossError("no object code");
  m.object_code.assign(object_code.data(), object_code.size());
  m.weights = std::move(weights);
  m.arena.per_batch_bytes = e.arena_per_batch_bytes();
  m.arena.fixed_bytes = e.arena_fixed_bytes();
  m.arena.unplanned_bytes = e.arena_unplanned_bytes();
  m.arena.live_per_batch_bytes = e.arena_live_per_batch_bytes();
  m.arena.live_fixed_bytes = e.arena_live_fixed_bytes();
  m.arena.max_shards = std::max(1, e.arena_max_shards());
  m.batch_split_note = e.batch_split_note();
  if (m.arena.per_batch_bytes < 0 || m.arena.fixed_bytes < 0 ||
      m.arena.max_shards > kMaxBatchShards) {
    return absl::DataLossError("negative arena size or too many batch parts");
  }
  for (int i = 0; i < e.kernels_size(); ++i) {
    const auto& k = e.kernels(i);
    if (k.index() != i) return absl::DataLossError("kernel table out of order");
    if (k.has_parent() && (k.parent() < 0 || k.parent() >= i)) {
      return absl::DataLossError("kernel parent out of range");
    }
    m.kernels.push_back({k.index(), k.symbol(), k.op_type(), k.node_name(), k.signature(),
                         k.has_parent() ? k.parent() : -1});
  }
  for (const auto& t : e.timings()) m.timings.push_back({t.phase(), t.ms()});
  m.cpu = e.compiled_cpu();
  return m;
}

absl::StatusOr<std::shared_ptr<const FileMapping>> MapFile(int fd, size_t size, bool populate) {
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) return absl::DataLossError(absl::StrCat("cannot map: ", strerror(errno)));
  return std::make_shared<const FileMapping>(p, size);
}

pb::CacheHeader ModelHeader(const CompiledModel& model) { return HeaderOf(model, std::string()); }

absl::StatusOr<CompiledModel> ModelFromHeader(const pb::CacheHeader& header,
                                              std::string_view object_code, WeightsBlob weights) {
  return ModelOf(header, object_code, std::move(weights));
}

}  // namespace cuvil::jitcache_internal
