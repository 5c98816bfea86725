// The facade of ahead-of-time libraries (aot_writer.h): the checks on the bodies, the target
// set-up and the order of the steps; the work is in three rooms: aot_glue.cc (the LLVM glue
// object), aot_header.cc (NAME.h) and aot_archive.cc (symbol renaming and the archive's files).
#include "cuvil/compiler/aot_writer.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "aot_archive.h"
#include "aot_glue.h"
#include "aot_header.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

namespace cuvil {
namespace {

using aot_internal::ArchiveBytes;
using aot_internal::EmitGlue;
using aot_internal::HeaderText;
using aot_internal::Member;
using aot_internal::PrivatiseSymbols;
using aot_internal::ReadRuntime;
using aot_internal::RenameTierSymbols;
using aot_internal::ReplaceFile;

bool IsCIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

std::string AotHeader(const CompiledModel& model, const std::string& name,
                      const std::string& source, const std::string& target_triple) {
  return HeaderText({AotTier{"default", 0, &model}}, name, source, target_triple);
}

absl::Status WriteAotLibrary(const CompiledModel& model, const AotOptions& options,
                             AotReport* report) {
  return WriteAotLibrary({AotTier{"default", 0, &model}}, options, report);
}

std::vector<AotTier> AotX86Tiers() {
  return {{"x86-64-v4", 4, nullptr}, {"x86-64-v3", 3, nullptr}, {"x86-64", 1, nullptr}};
}

absl::Status WriteAotLibrary(const std::vector<AotTier>& tiers, const AotOptions& options,
                             AotReport* report) {
  if (!IsCIdentifier(options.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--name must be a C identifier (letters, digits, _): '", options.name, "'"));
  }
  if (tiers.empty()) return absl::InvalidArgumentError("an AOT library needs at least one body");
  for (const AotTier& t : tiers) {
    if (t.model == nullptr) return absl::InvalidArgumentError("an AOT body has no model");
    if (!t.model->data_dependent_dims.empty()) {
      return absl::UnimplementedError(
          absl::StrCat("AOT libraries need output sizes known from the input shapes; ",
                       t.model->data_dependent_dims[0].producer, " decides one from the data"));
    }
    if (t.model->HasStringTensors()) {
      return absl::UnimplementedError("AOT libraries do not take models with string tensors");
    }
    if (t.model->symbols.size() > 1 || t.model->arena.symbolic()) {
      return absl::UnimplementedError(absl::StrCat(
          "AOT libraries take one free dimension (the batch); this model has ",
          absl::StrJoin(t.model->symbols, ", "), " (fix the others with a dimension override)"));
    }
    auto same = [](const std::vector<TensorSignature>& x, const std::vector<TensorSignature>& y) {
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i].name != y[i].name || x[i].dtype != y[i].dtype || x[i].shape != y[i].shape) {
          return false;
        }
      }
      return true;
    };
    if (!same(t.model->inputs, tiers[0].model->inputs) ||
        !same(t.model->outputs, tiers[0].model->outputs)) {
      return absl::InvalidArgumentError(
          absl::StrCat("AOT body ", t.cpu, " has other inputs or outputs than ", tiers[0].cpu));
    }
  }
  const bool several = tiers.size() > 1;
  if (several) {
    const llvm::Triple triple(options.target_triple.empty() ? llvm::sys::getProcessTriple()
                                                            : options.target_triple);
    if (triple.getArch() != llvm::Triple::x86_64 || !triple.isOSBinFormatELF()) {
      return absl::InvalidArgumentError(
          "an AOT library with several bodies is for x86-64 ELF targets only");
    }
  }
  // Bodies whose weights are byte-equal share the first one's blob.
  std::vector<size_t> weights_owner(tiers.size());
  for (size_t t = 0; t < tiers.size(); ++t) {
    weights_owner[t] = t;
    for (size_t u = 0; u < t; ++u) {
      const WeightsBlob& a = tiers[u].model->weights;
      const WeightsBlob& b = tiers[t].model->weights;
      if (weights_owner[u] == u && a.size() == b.size() &&
          (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0)) {
        weights_owner[t] = u;
        break;
      }
    }
  }
  auto runtime = ReadRuntime(options.runtime_archive);
  if (!runtime.ok()) return runtime.status();
  auto glue = EmitGlue(tiers, weights_owner, options.name, options.target_triple);
  if (!glue.ok()) return glue.status();
  AotReport r;
  std::vector<Member> members;
  for (size_t t = 0; t < tiers.size(); ++t) {
    const CompiledModel& body = *tiers[t].model;
    Member m{several ? absl::StrCat(options.name, "_model_", tiers[t].cpu, ".o")
                     : options.name + "_model.o",
             body.object_code};
    if (several) {
      if (auto s = RenameTierSymbols(m, t, weights_owner[t]); !s.ok()) return s;
    }
    r.code_bytes += static_cast<int64_t>(body.object_code.size());
    if (weights_owner[t] == t) r.weights_bytes += static_cast<int64_t>(body.weights.size());
    members.push_back(std::move(m));
  }
  members.push_back({options.name + "_glue.o", std::move(*glue)});
  for (Member& m : *runtime) {
    r.runtime_bytes += static_cast<int64_t>(m.bytes.size());
    members.push_back(std::move(m));
  }
  if (auto s = PrivatiseSymbols(members, options.name, &r.external_symbols); !s.ok()) return s;

  auto archive = ArchiveBytes(members);
  if (!archive.ok()) return archive.status();

  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", options.out_dir, ": ", ec.message()));
  r.library_path = absl::StrCat(options.out_dir, "/lib", options.name, ".a");
  r.header_path = absl::StrCat(options.out_dir, "/", options.name, ".h");
  if (auto s = ReplaceFile(r.library_path, *archive); !s.ok()) return s;
  if (auto s = ReplaceFile(r.header_path,
                           HeaderText(tiers, options.name, options.source, options.target_triple));
      !s.ok()) {
    return s;
  }
  r.library_bytes = static_cast<int64_t>(archive->size());
  *report = std::move(r);
  return absl::OkStatus();
}

const char* AotHostArch() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

absl::StatusOr<std::string> ConfigureAotTarget(const std::string& target, CompileOptions* options) {
  const std::string host = AotHostArch();
  if (target.empty() || target == host) {
    // The host's own CPU and features unless target_cpu names another (e.g. x86-64-v3).
    if (!options->target_cpu.empty()) options->target_triple = llvm::sys::getProcessTriple();
    return std::string("libcuvil_aot_runtime.a");
  }
  if (target == "aarch64") {
    options->target_triple = "aarch64-unknown-linux-gnu";
    if (options->target_features.empty()) options->target_features = "+neon";
    if (options->vector_bits == 0) options->vector_bits = 128;
    return std::string("libcuvil_aot_runtime-aarch64.a");
  }
  if (target == "wasm32") {
    // WebAssembly with 128-bit SIMD for WASI (wasm32-wasi C programs; Node, wasmtime, ...).
    options->target_triple = "wasm32-unknown-wasi";
    if (options->target_features.empty()) options->target_features = "+simd128";
    if (options->vector_bits == 0) options->vector_bits = 128;
    return std::string("libcuvil_aot_runtime-wasm32.a");
  }
  if (target == "wasm32-scalar") {
    // The same without SIMD128, for WebAssembly runtimes that lack it.
    options->target_triple = "wasm32-unknown-wasi";
    if (options->target_features.empty()) options->target_features = "-simd128";
    if (options->vector_bits == 0) options->vector_bits = 32;  // scalar floats
    return std::string("libcuvil_aot_runtime-wasm32-scalar.a");
  }
  if (target == "cortex-m7") {
    // Bare-metal ARM Cortex-M7: Thumb-2 with the DSP extension and the single-precision FPv5
    // (fpv5-sp-d16, hard-float ABI), so no kernel relies on double-precision hardware.
    options->target_triple = "thumbv7em-none-eabihf";
    if (options->target_cpu.empty()) options->target_cpu = "cortex-m7";
    if (options->target_features.empty()) options->target_features = "+dsp,-fp64,-d32";
    // No float vectors: "64 bits" makes panels of 4 columns in pairs of scalar registers, 24
    // accumulators of the 32 the FPU has (measured against 32 and 128: the fewest instructions
    // for mlp and lenet, at 13-14 KB of model code).
    if (options->vector_bits == 0) options->vector_bits = 64;
    return std::string("libcuvil_aot_runtime-cortex-m7.a");
  }
  if (target == "x86_64") {
    return absl::UnimplementedError(
        absl::StrCat("target ", target, " is not supported yet on this ", host, " host"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "target: one of x86_64, aarch64, wasm32, wasm32-scalar, cortex-m7, not '", target, "'"));
}

absl::Status CompileAotLibrary(const AotSource& source, CompileOptions options, AotOptions aot,
                               const std::string& target, const std::string& runtime_dir,
                               AotReport* report, CompiledModel* first_body) {
  if (!IsCIdentifier(aot.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--name must be a C identifier (letters, digits, _): '", aot.name, "'"));
  }
  const bool dispatch = (target.empty() || target == AotHostArch()) &&
                        std::string(AotHostArch()) == "x86_64" && options.target_cpu.empty();
  if (options.target_cpu == "host") options.target_cpu.clear();
  auto runtime = ConfigureAotTarget(target, &options);
  if (!runtime.ok()) return runtime.status();
  if (aot.runtime_archive.empty()) {
    aot.runtime_archive = (std::filesystem::path(runtime_dir) / *runtime).string();
  }
  aot.target_triple = options.target_triple;
  std::vector<AotTier> tiers =
      dispatch ? AotX86Tiers() : std::vector<AotTier>{AotTier{"", 0, nullptr}};
  std::vector<CompiledModel> bodies;
  bodies.reserve(tiers.size());  // tier.model points into it
  for (AotTier& tier : tiers) {
    CompileOptions body_options = options;
    if (dispatch) {
      body_options.target_cpu = tier.cpu;
      if (auto s = ConfigureAotTarget(target, &body_options); !s.ok()) return s.status();
      aot.target_triple = body_options.target_triple;
    } else {
      tier.cpu = !options.target_cpu.empty()     ? options.target_cpu
                 : options.target_triple.empty() ? "host"
                                                 : "generic";
    }
    auto compiled = source.bytes.empty() ? CompileOnnxFile(source.path, body_options)
                                         : CompileOnnxBytes(source.bytes, body_options);
    if (!compiled.ok()) return compiled.status();
    bodies.push_back(*std::move(compiled));
    tier.model = &bodies.back();
  }
  if (auto s = WriteAotLibrary(tiers, aot, report); !s.ok()) return s;
  if (first_body != nullptr) *first_body = std::move(bodies.front());
  return absl::OkStatus();
}

}  // namespace cuvil
