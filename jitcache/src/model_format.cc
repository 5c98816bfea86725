#include "model_format.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "host_identity.h"

namespace cuvil::jitcache_internal {
namespace pb = ::cuvil::jitcache::v1;

pb::ModelIdentity ThisBuildIdentity() {
  const HostIdentity& host = HostIdentityOfThisProcess();
  pb::ModelIdentity id;
  id.set_build_identity(CodeIdentity());
  id.set_target_triple(host.triple);
  id.set_cpu(host.cpu);
  id.set_cpu_features(host.features);
  return id;
}

std::string IdentityMismatch(const pb::ModelIdentity& written) {
  const pb::ModelIdentity here = ThisBuildIdentity();
  if (written.build_identity() != here.build_identity()) {
    return absl::StrCat("written by another build (", written.build_identity(), "; this is ",
                        here.build_identity(), ")");
  }
  if (written.target_triple() != here.target_triple() || written.cpu() != here.cpu()) {
    return absl::StrCat("written for ", written.target_triple(), " ", written.cpu());
  }
  if (written.cpu_features() != here.cpu_features()) return "written for other CPU features";
  return std::string();
}

pb::CompileOptionsRecord CompileOptionsRecordOf(const CompileOptions& o) {
  // Every field by name: a field added to CompileOptions or ImportOptions does not compile until
  // it is written below or named as not changing the code.
  const auto& [import_options, emit_llvm_path /* debug output */, opt_level, target_triple,
               target_cpu, target_features, vector_bits, batch_invariant, needs_binding /* out */,
               integer_qdq, print_after_pass /* debug output */] = o;
  const auto& [dim_overrides, dim_multiples, input_shapes, input_shapes_origin /* error messages */,
               bound_inputs, run_checker, allow_structured_io, structured_inputs,
               output_layout /* out */, import_needs_binding /* out */] = import_options;
  (void)emit_llvm_path;
  (void)needs_binding;
  (void)print_after_pass;
  (void)output_layout;
  (void)input_shapes_origin;
  (void)import_needs_binding;
  pb::CompileOptionsRecord r;
  r.set_opt_level(opt_level);
  r.set_target_triple(target_triple);
  r.set_target_cpu(target_cpu);
  r.set_target_features(target_features);
  r.set_vector_bits(vector_bits);
  r.set_batch_invariant(batch_invariant);
  r.set_integer_qdq(integer_qdq);
  pb::ImportOptionsRecord* ri = r.mutable_import();
  for (const auto& [name, v] : dim_overrides) {  // std::map: in key order.
    auto* e = ri->add_dim_overrides();
    e->set_name(name);
    e->set_value(v);
  }
  for (const auto& [name, k] : dim_multiples) {
    auto* e = ri->add_dim_multiples();
    e->set_name(name);
    e->set_value(k);
  }
  for (const auto& [name, shape] : input_shapes) {
    auto* e = ri->add_input_shapes();
    e->set_name(name);
    for (int64_t d : shape) e->mutable_shape()->add_dims(d);
  }
  for (const auto& [name, t] : bound_inputs) {
    auto* e = ri->add_bound_inputs();
    e->set_name(name);
    e->set_dtype(static_cast<int32_t>(t.dtype()));
    for (int64_t d : t.shape()) e->mutable_shape()->add_dims(d);
    e->set_data(reinterpret_cast<const char*>(t.data()), t.byte_size());
  }
  ri->set_run_checker(run_checker);
  ri->set_allow_structured_io(allow_structured_io);
  for (const auto& [name, s] : structured_inputs) {
    auto* e = ri->add_structured_inputs();
    e->set_name(name);
    e->set_present(s.present);
    for (const auto& shape : s.element_shapes) {
      pb::Shape* ps = e->add_element_shapes();
      for (int64_t d : shape) ps->add_dims(d);
    }
  }
  return r;
}

std::string SerializedCompileOptions(const CompileOptions& options) {
  std::string out;
  // No map fields: the serialization of equal records is equal within a build.
  CompileOptionsRecordOf(options).SerializeToString(&out);
  return out;
}

}  // namespace cuvil::jitcache_internal
