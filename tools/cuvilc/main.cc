// cuvilc: Cuvil's compiler driver.
//   cuvilc info MODEL.onnx
//   cuvilc run MODEL.onnx --input NAME=FILE.pb ... [--output-dir DIR]
//   cuvilc test CASE_DIR ... [--rtol R] [--atol A] [--threads N] [--dim-multiple NAME=K]
//               [--unordered-rows] [--scale-rtol S]
//   cuvilc compile MODEL.onnx [--emit-llvm FILE.ll] [--timings] [--print-after PASS]
//                  [--jit-cache-dir DIR]
//                  [--jit-cache-max-bytes N] [--no-jit-cache] [--compile-tier tiered|fast|full]
//                  [--dim-multiple NAME=K]
//   cuvilc compile MODEL.onnx --aot OUT_DIR [--name NAME]
//                  [--target x86_64|aarch64|wasm32|wasm32-scalar|cortex-m7]
//                  [--cpu CPU] [--aot-runtime FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "case_runner.h"
#include "cuvil/compiler/aot_writer.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/tensor_file.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/jitcache/object_cache.h"
#include "cuvil/jitcache/tiered_start.h"
#include "cuvil/runtime/parallel.h"

namespace cuvil {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  cuvilc info MODEL.onnx\n"
    "  cuvilc run MODEL.onnx --input NAME=FILE.pb ... [--output-dir DIR]\n"
    "  cuvilc test CASE_DIR ... [--rtol R] [--atol A] [--threads N] [--dim-multiple NAME=K]\n"
    "               [--unordered-rows] [--scale-rtol S]\n"
    "      N: intra-op threads per execution (default 1; a separable model's batch is split)\n"
    "      --dim-multiple height=8: the free dim 'height' is a multiple of 8 (repeatable;\n"
    "      requests whose dim is not are refused)\n"
    "      --unordered-rows: each output matches as a multiset of its dim-0 rows (detections\n"
    "      whose order among near-equal scores the model leaves open)\n"
    "      --scale-rtol 1e-4: an element also matches within 1e-4 of its output's largest\n"
    "      magnitude (float32 rounding carried through deep networks)\n"
    "  cuvilc compile MODEL.onnx [--emit-llvm FILE.ll] [--timings] [--jit-cache-dir DIR]\n"
    "                 [--jit-cache-max-bytes N] [--no-jit-cache] [--compile-tier T]\n"
    "                 [--dim-multiple NAME=K] [--print-after PASS]\n"
    "      --print-after PASS: the graph as text on stderr after that graph pass (optimize,\n"
    "      batch_separability, fuse_patterns, fuse_convolutions, fuse_qdq_depthwise,\n"
    "      check_deferred_reads); --timings lists each pass's time\n"
    "      with --jit-cache-dir, a compiled model is stored in (or loaded from) the JIT cache\n"
    "      (a folder of your own that group and others cannot write; --insecure-cache-dir\n"
    "      allows another)\n"
    "      --compile-tier full (default): one compile at full optimisation; fast: one quick\n"
    "      compile; tiered: load the quick compile (total_ms is its time to ready), then compile\n"
    "      the full tier and swap its kernels in (tier_up_ms, tier_swap_us); a cached full\n"
    "      tier is loaded directly\n"
    "  cuvilc compile MODEL.onnx --aot OUT_DIR [--name NAME] [--target T] [--cpu CPU]\n"
    "                 [--aot-runtime FILE]\n"
    "      writes OUT_DIR/libNAME.a (code, weights and runtime; links with -lm only) and\n"
    "      OUT_DIR/NAME.h (its C API); NAME defaults to the model file's stem; T: the host's\n"
    "      architecture (default), aarch64 (Linux, NEON) or wasm32 (wasm32-wasi with SIMD128:\n"
    "      link with clang --target=wasm32-wasi and wasi-libc, run under a WASI runtime such as\n"
    "      Node's node:wasi), wasm32-scalar (the same without SIMD128), cortex-m7 (bare-metal\n"
    "      Thumb-2 with the DSP extension and fpv5-sp-d16: link with arm-none-eabi-gcc and\n"
    "      newlib, see tests/aot/cortex_m7); CPU: an LLVM CPU\n"
    "      name, or host for this machine's\n"
    "      CPU only; an x86_64 library without --cpu holds x86-64-v4 (AVX-512), x86-64-v3 (AVX2)\n"
    "      and baseline x86-64 bodies and runs the best one the CPU allows (NAME_tier() names\n"
    "      it); the other targets default to their generic CPU; FILE defaults to the\n"
    "      cuvil_aot_runtime archive for T in ../lib beside cuvilc\n";

int Fail(const absl::Status& s) {
  std::string msg(s.message());
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return 1;
}

int Usage(const std::string& why) {
  std::fprintf(stderr, "error: %s\n%s", why.c_str(), kUsage);
  return 2;
}

std::string SigString(const TensorSignature& s, const std::string& symbol) {
  return absl::StrCat(s.name, ": ", DTypeName(s.dtype),
                      SymShapeToString(s.shape, symbol.empty() ? "batch" : symbol));
}

int Info(const std::vector<std::string>& args) {
  if (args.size() != 1) return Usage("info takes one model");
  ImportOptions options;
  auto graph = ImportOnnxFile(args[0], options);
  if (!graph.ok()) return Fail(graph.status());
  ir::Graph& g = **graph;
  std::string sym = g.symbol.empty() ? "batch" : g.symbol;
  std::printf("model: %s (opset %d)\n", args[0].c_str(), g.opset);
  std::printf("symbolic dimension: %s\n", g.symbol.empty() ? "none" : g.symbol.c_str());
  for (const ir::Value* v : g.inputs)
    std::printf("input  %s: %s\n", v->name.c_str(), v->type.ToString(sym).c_str());
  std::map<std::string, int> histogram;
  for (const auto& n : g.nodes()) histogram[n->op_type]++;
  std::vector<std::string> unsupported = UnsupportedOps(g);
  auto status = OptimizeGraph(g);
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    std::printf("output %s: %s\n", g.output_names[i].c_str(),
                status.ok() ? g.outputs[i]->type.ToString(sym).c_str() : "(shape unknown)");
  }
  std::printf("ops:");
  for (const auto& [op, count] : histogram) std::printf(" %s=%d", op.c_str(), count);
  std::printf("\nnodes after simplification: %zu\n", g.nodes().size());
  if (unsupported.empty()) {
    std::printf("unsupported ops: none\n");
  } else {
    std::printf("unsupported ops: %s\n", absl::StrJoin(unsupported, ", ").c_str());
  }
  if (!status.ok()) return Fail(status);
  return unsupported.empty() ? 0 : 1;
}

void PrintTensor(const std::string& name, const HostTensor& t) {
  std::printf("%s: %s [", name.c_str(), t.TypeString().c_str());
  int64_t n = std::min<int64_t>(t.num_elements(), 10);
  for (int64_t i = 0; i < n; ++i) std::printf("%s%.6g", i ? ", " : "", t.GetAsDouble(i));
  std::printf("%s]\n", t.num_elements() > n ? ", ..." : "");
}

int Run(const std::vector<std::string>& args) {
  std::string model_path, output_dir;
  std::map<std::string, std::string> input_files;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--input" && i + 1 < args.size()) {
      std::string spec = args[++i];
      auto eq = spec.find('=');
      if (eq == std::string::npos) return Usage("--input takes NAME=FILE.pb");
      input_files[spec.substr(0, eq)] = spec.substr(eq + 1);
    } else if (args[i] == "--output-dir" && i + 1 < args.size()) {
      output_dir = args[++i];
    } else if (model_path.empty() && args[i].rfind("--", 0) != 0) {
      model_path = args[i];
    } else {
      return Usage(absl::StrCat("unexpected argument '", args[i], "'"));
    }
  }
  if (model_path.empty()) return Usage("run needs a model");
  auto compiled = CompileOnnxFile(model_path);
  if (!compiled.ok()) return Fail(compiled.status());
  std::vector<HostTensor> inputs;
  for (const TensorSignature& sig : compiled->inputs) {
    auto it = input_files.find(sig.name);
    if (it == input_files.end()) {
      return Fail(
          absl::InvalidArgumentError(absl::StrCat("missing --input ", sig.name, "=FILE.pb")));
    }
    auto t = ReadTensorFile(it->second);
    if (!t.ok()) return Fail(t.status());
    inputs.push_back(std::move(t->tensor));
    input_files.erase(it);
  }
  if (!input_files.empty()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("model has no input named '", input_files.begin()->first, "'")));
  }
  auto engine = JitEngine::Create();
  if (!engine.ok()) return Fail(engine.status());
  auto loaded = (*engine)->Load("cuvilc/1", std::move(*compiled));
  if (!loaded.ok()) return Fail(loaded.status());
  auto outputs = (*loaded)->Run(inputs);
  if (!outputs.ok()) return Fail(outputs.status());
  const auto& sigs = (*loaded)->model().outputs;
  for (size_t i = 0; i < outputs->size(); ++i) {
    PrintTensor(sigs[i].name, (*outputs)[i]);
    if (!output_dir.empty()) {
      std::filesystem::create_directories(output_dir);
      auto s = WriteTensorFile(absl::StrCat(output_dir, "/output_", i, ".pb"), sigs[i].name,
                               (*outputs)[i]);
      if (!s.ok()) return Fail(s);
    }
  }
  return 0;
}

// `spec` is --dim-multiple's NAME=K: adds it to `*multiples`; false when it is not of that form
// (K's range is the importer's to check).
bool ParseDimMultiple(const std::string& spec, std::map<std::string, int64_t>* multiples) {
  const size_t eq = spec.find('=');
  int64_t k = 0;
  if (eq == std::string::npos || eq == 0 || !absl::SimpleAtoi(spec.substr(eq + 1), &k)) {
    return false;
  }
  (*multiples)[spec.substr(0, eq)] = k;
  return true;
}

int Test(const std::vector<std::string>& args) {
  Tolerance tol;
  std::vector<std::string> cases;
  std::map<std::string, int64_t> dim_multiples;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--dim-multiple" && i + 1 < args.size()) {
      if (!ParseDimMultiple(args[++i], &dim_multiples)) {
        return Usage(absl::StrCat("--dim-multiple: NAME=K, not '", args[i], "'"));
      }
    } else if (args[i] == "--unordered-rows") {
      tol.unordered_rows = true;
    } else if ((args[i] == "--scale-rtol" || args[i] == "--rtol" || args[i] == "--atol") &&
               i + 1 < args.size()) {
      const std::string& flag = args[i];
      double v = 0;
      if (!absl::SimpleAtod(args[++i], &v) || !(v >= 0) || !std::isfinite(v)) {
        return Usage(absl::StrCat(flag, ": a tolerance >= 0, not '", args[i], "'"));
      }
      (flag == "--rtol" ? tol.rtol : flag == "--atol" ? tol.atol : tol.scale_rtol) = v;
    } else if (args[i] == "--threads" && i + 1 < args.size()) {
      int threads = 0;
      if (!absl::SimpleAtoi(args[++i], &threads) || threads < 1 || threads > 256) {
        return Usage(absl::StrCat("--threads: a count from 1 to 256, not '", args[i], "'"));
      }
      SetIntraOpThreads(threads);
    } else if (args[i].rfind("--", 0) == 0) {
      return Usage(absl::StrCat("unknown flag ", args[i]));
    } else {
      cases.push_back(args[i]);
    }
  }
  if (cases.empty()) return Usage("test needs at least one case folder");
  auto engine = JitEngine::Create();
  if (!engine.ok()) return Fail(engine.status());
  int passed = 0, failed = 0;
  for (const std::string& dir : cases) {
    std::string name = std::filesystem::path(dir).filename().string();
    if (name.empty()) name = std::filesystem::path(dir).parent_path().filename().string();
    absl::Status s = RunCase(**engine, dir, tol, dim_multiples);
    if (s.ok()) {
      std::printf("PASS %s\n", name.c_str());
      ++passed;
    } else {
      std::string msg(s.message());
      std::replace(msg.begin(), msg.end(), '\n', ' ');
      std::printf("FAIL %s: %s\n", name.c_str(), msg.c_str());
      ++failed;
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

// Where runtime archives are installed beside cuvilc: BIN/../lib (the working directory when the
// executable's path is unknown).
std::string AotRuntimeDir() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path().parent_path() / "lib").string();
}

// cuvilc compile MODEL --aot DIR: an ahead-of-time library instead of a JIT load.
int CompileAot(const std::string& model_path, CompileOptions options, AotOptions aot,
               const std::string& target) {
  {
    CompileOptions probe = options;  // A bad --target is a usage error, before any compile.
    auto runtime = ConfigureAotTarget(target, &probe);
    if (!runtime.ok()) {
      if (runtime.status().code() == absl::StatusCode::kInvalidArgument) {
        return Usage(absl::StrCat("--", runtime.status().message()));  // "--target: one of …"
      }
      return Fail(runtime.status());
    }
  }
  if (aot.name.empty()) aot.name = std::filesystem::path(model_path).stem().string();
  aot.source = model_path;
  AotReport report;
  CompiledModel first;
  if (auto s = CompileAotLibrary(AotSource{model_path, ""}, options, aot, target, AotRuntimeDir(),
                                 &report, &first);
      !s.ok()) {
    return Fail(s);
  }
  const CompiledModel* compiled = &first;
  std::printf("wrote %s (%lld bytes: code %lld, weights %lld, runtime %lld) and %s\n",
              report.library_path.c_str(), static_cast<long long>(report.library_bytes),
              static_cast<long long>(report.code_bytes),
              static_cast<long long>(report.weights_bytes),
              static_cast<long long>(report.runtime_bytes), report.header_path.c_str());
  std::printf("external symbols: %s\n", absl::StrJoin(report.external_symbols, " ").c_str());
  for (const auto& sig : compiled->inputs) {
    std::printf("input  %s\n", SigString(sig, compiled->symbol).c_str());
  }
  for (const auto& sig : compiled->outputs) {
    std::printf("output %s\n", SigString(sig, compiled->symbol).c_str());
  }
  return 0;
}

int Compile(const std::vector<std::string>& args) {
  std::string model_path;
  CompileOptions options;
  bool timings = false;
  bool no_cache = false;
  CompileTier tier = CompileTier::kFull;
  ObjectCacheOptions cache_options;
  cache_options.memory_max_bytes = 0;  // One compile per process: memory reuse cannot help.
  AotOptions aot;
  std::string target;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--aot" && i + 1 < args.size()) {
      aot.out_dir = args[++i];
    } else if (args[i] == "--name" && i + 1 < args.size()) {
      aot.name = args[++i];
    } else if (args[i] == "--target" && i + 1 < args.size()) {
      target = args[++i];
    } else if (args[i] == "--aot-runtime" && i + 1 < args.size()) {
      aot.runtime_archive = args[++i];
    } else if (args[i] == "--cpu" && i + 1 < args.size()) {
      options.target_cpu = args[++i];
    } else if (args[i] == "--emit-llvm" && i + 1 < args.size()) {
      options.emit_llvm_path = args[++i];
    } else if (args[i] == "--print-after" && i + 1 < args.size()) {
      options.print_after_pass = args[++i];
    } else if (args[i] == "--timings") {
      timings = true;
    } else if (args[i] == "--dim-multiple" && i + 1 < args.size()) {
      if (!ParseDimMultiple(args[++i], &options.import.dim_multiples)) {
        return Usage(absl::StrCat("--dim-multiple: NAME=K, not '", args[i], "'"));
      }
    } else if (args[i] == "--jit-cache-dir" && i + 1 < args.size()) {
      cache_options.dir = args[++i];
    } else if (args[i] == "--jit-cache-max-bytes" && i + 1 < args.size()) {
      if (!absl::SimpleAtoi(args[++i], &cache_options.max_bytes)) {
        return Usage(absl::StrCat("--jit-cache-max-bytes: not a byte count: ", args[i]));
      }
    } else if (args[i] == "--no-jit-cache") {
      no_cache = true;
    } else if (args[i] == "--insecure-cache-dir") {
      cache_options.insecure_dir = true;
    } else if (args[i] == "--compile-tier" && i + 1 < args.size()) {
      auto parsed = ParseCompileTier(args[++i]);
      if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
      tier = *parsed;
    } else if (model_path.empty() && args[i].rfind("--", 0) != 0) {
      model_path = args[i];
    } else {
      return Usage(absl::StrCat("unexpected argument '", args[i], "'"));
    }
  }
  if (model_path.empty()) return Usage("compile needs a model");
  if (aot.out_dir.empty() && (!aot.name.empty() || !target.empty() ||
                              !aot.runtime_archive.empty() || !options.target_cpu.empty())) {
    return Usage("--name, --target, --cpu and --aot-runtime need --aot OUT_DIR");
  }
  if (!aot.out_dir.empty()) return CompileAot(model_path, options, aot, target);
  const bool use_cache = !no_cache && !cache_options.dir.empty();
  std::unique_ptr<ObjectCache> cache;
  if (use_cache) {
    auto created = ObjectCache::Create(cache_options);
    if (!created.ok()) return Fail(created.status());
    cache = std::move(*created);
  }
  // The JIT engine is process setup, not compilation: created (and timed) first.
  auto te = std::chrono::steady_clock::now();
  auto engine = JitEngine::Create();
  if (!engine.ok()) return Fail(engine.status());
  auto t0 = std::chrono::steady_clock::now();
  CacheLookup lookup;
  const CompileOptions full_options = options;
  CompileOptions fast_options = options;
  fast_options.opt_level = kFastTierOptLevel;
  // Tiered: a cached full tier is all a warm start needs; otherwise the quick tier serves first
  // while the full tier's lookup (which hashes the model) runs beside it (TieredStart).
  bool tier_up = false;
  std::unique_ptr<TieredStart> start;
  absl::StatusOr<CompiledModel> compiled = absl::NotFoundError("not compiled");
  if (tier == CompileTier::kTiered) {
    start = TieredStart::Begin(use_cache ? cache.get() : nullptr,
                               {model_path, "", full_options, fast_options});
    tier_up = !start->full_tier();
    if (const CacheLookup* ready = start->ready_lookup(); ready != nullptr && !tier_up) {
      lookup = *ready;
    }
    compiled = start->TakeReady();
  } else {
    const CompileOptions& o = tier == CompileTier::kFull ? full_options : fast_options;
    compiled =
        use_cache ? cache->Compile(model_path, "", o, &lookup) : CompileOnnxFile(model_path, o);
  }
  if (!compiled.ok()) return Fail(compiled.status());
  auto t1 = std::chrono::steady_clock::now();
  auto loaded = (*engine)->Load("cuvilc/1", std::move(*compiled));
  if (!loaded.ok()) return Fail(loaded.status());
  auto t2 = std::chrono::steady_clock::now();
  // The full tier, compiled while the quick one could serve (or found by the lookup that ran
  // beside it), swapped in at a safe point.
  double tier_up_ms = 0, tier_swap_us = 0;
  CacheLookup full_lookup, start_lookup;
  if (tier_up) {
    auto full = start->TierUp(&full_lookup, &start_lookup);
    if (!full.ok()) return Fail(full.status());
    auto patch = (*loaded)->patches().PrepareRecompilePatch(*full, {}, "opt_level=3");
    if (!patch.ok()) return Fail(patch.status());
    auto t3 = std::chrono::steady_clock::now();
    auto id = (*loaded)->patches().CommitPatch(*patch, "tiered-compilation");
    if (!id.ok()) return Fail(id.status());
    auto t4 = std::chrono::steady_clock::now();
    tier_up_ms = std::chrono::duration<double, std::milli>(t3 - t2).count();
    tier_swap_us = std::chrono::duration<double, std::micro>(t4 - t3).count();
  }
  const CompiledModel& m = (*loaded)->model();
  const char* symbol = m.symbol.empty() ? "batch" : m.symbol.c_str();
  std::printf(
      "compiled %s: %zu kernels, object %zu bytes, arena %lld*%s+%lld bytes (unplanned %lld per "
      "%s, liveness bound %lld*%s+%lld)\n",
      model_path.c_str(), m.kernels.size(), m.object_code.size(),
      static_cast<long long>(m.arena.per_batch_bytes), symbol,
      static_cast<long long>(m.arena.fixed_bytes), static_cast<long long>(m.arena.unplanned_bytes),
      symbol, static_cast<long long>(m.arena.live_per_batch_bytes), symbol,
      static_cast<long long>(m.arena.live_fixed_bytes));
  for (const auto& sig : m.inputs) std::printf("input  %s\n", SigString(sig, m.symbol).c_str());
  for (const auto& sig : m.outputs) std::printf("output %s\n", SigString(sig, m.symbol).c_str());
  if (m.arena.max_shards > 1) {
    std::printf("batch split: up to %d parts\n", m.arena.max_shards);
  } else {
    std::printf("batch split: no (%s)\n",
                m.batch_split_note.empty() ? "unknown" : m.batch_split_note.c_str());
  }
  if (timings) {
    // On a hit the phase timings are the original compile's; the cache's own time is separate.
    if (!use_cache || lookup.outcome == CacheOutcome::kMiss) {
      for (const PhaseTiming& t : m.timings) std::printf("%s_ms=%.1f\n", t.phase.c_str(), t.ms);
    } else {
      std::printf("cache_load_ms=%.1f\n",
                  std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    // The cache's own steps (key, then on a hit reading and verifying the entry).
    for (const PhaseTiming& t : lookup.timings) {
      std::printf("  %s_ms=%.2f\n", t.phase.c_str(), t.ms);
    }
    std::printf("jit_link_ms=%.1f\n", std::chrono::duration<double, std::milli>(t2 - t1).count());
    std::printf("engine_create_ms=%.1f (not in total_ms)\n",
                std::chrono::duration<double, std::milli>(t0 - te).count());
    if (use_cache && (lookup.refused_entry || start_lookup.refused_entry)) {
      std::printf("cache_refused_entry=1\n");
    }
    if (use_cache && (lookup.store_failed || full_lookup.store_failed)) {
      std::printf("cache_store_failed=1\n");
    }
    if (tier != CompileTier::kFull) {
      std::printf("compile_tier=%s loaded_tier=%s\n", CompileTierName(tier),
                  tier == CompileTier::kFast || tier_up ? "fast" : "full");
    }
    if (tier_up) {
      std::printf("tier_up_ms=%.1f tier_swap_us=%.1f full_tier_cache=%s (not in total_ms)\n",
                  tier_up_ms, tier_swap_us,
                  !use_cache                                   ? "off"
                  : full_lookup.outcome == CacheOutcome::kMiss ? "miss"
                                                               : "hit");
      // The full tier's lookup, begun beside the quick tier (its key hashes the model).
      for (const PhaseTiming& t : start_lookup.timings) {
        std::printf("  full_tier_%s_ms=%.2f\n", t.phase.c_str(), t.ms);
      }
    }
    std::printf("total_ms=%.1f cache=%s\n",
                std::chrono::duration<double, std::milli>(t2 - t0).count(),
                !use_cache                              ? "off"
                : lookup.outcome == CacheOutcome::kMiss ? "miss"
                                                        : "hit");
  }
  return 0;
}

}  // namespace
}  // namespace cuvil

int main(int argc, char** argv) {
  if (argc < 2) return cuvil::Usage("missing command");
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "info") return cuvil::Info(args);
  if (cmd == "run") return cuvil::Run(args);
  if (cmd == "test") return cuvil::Test(args);
  if (cmd == "compile") return cuvil::Compile(args);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::printf("%s", cuvil::kUsage);
    return 0;
  }
  return cuvil::Usage(absl::StrCat("unknown command '", cmd, "'"));
}
