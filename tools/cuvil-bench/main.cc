// cuvil-bench: times one compiled model alone (no server, no request decoding), the Cuvil side of
// bench/compare_ort.sh.
//   cuvil-bench MODEL.onnx [--batch B] [--threads T] [--min-time S] [--warmup N] [--per-kernel]
//               [--compile-tier full|fast|tiered] [--no-batch-split] [--peak]
//               [--shape NAME=D0,D1,...]... [--fixed-shape]
// Prints one line with the keys of ONNX Runtime's peer script (../shared/bench/ort/run.sh):
//   cuvil model=DIR/FILE batch=B threads=T median_ms=X p99_ms=Y mean_ms=Z runs=N gflops=G
//   compile_ms=C arena_bytes=A live_bound_bytes=L scratch_bytes=S uk_tier=NAME
// A is the planned arena of batch B, L the same split's liveness lower bound and S the memory
// kernels used outside the arena while timed (per-thread microkernel buffers and the peak of
// generated code's heap scratch): the peak activation memory is A + S. NAME is the microkernels'
// instruction-set tier (cuvil_uk_tier): the AVX2 tier runs resnet18 about 1.8x slower than
// AVX-512 on Zen 5, so a host whose VM hides one of AVX-512 F/BW/DQ/VL shows it here.
// --no-batch-split calls the entry point once per execution with the whole batch (what Execute
// did before it split separable models), for side-by-side comparisons. --peak then measures the
// host's FP32 FMA peak on T threads and adds peak_gflops= peak_bits= peak_share= (gflops / peak).
// --per-kernel then lists every kernel's share of the time, largest first. --compile-tier fast
// times the quick tier's code; tiered loads the quick tier (ready_ms), compiles the full tier and
// swaps it in at a safe point (tier_up_ms), then times the swapped code. Both tiers lower one
// prepared model (import, graph passes and memory plan run once); compile_ms stays what a
// full-only compile costs (that preparation plus the full tier's code generation), so
// ready_ms / compile_ms is the tiered speed-up to READY. --shape gives an input's shape (dim 0
// is the batch, which then overrides --batch): needed for inputs with free dims besides the batch
// (a detector's H and W); the model stays compiled for every size, as the server runs it by
// default. --fixed-shape compiles for the --shape sizes instead (dim 0 stays free), as the
// server does when a model's config.pbtxt gives those dims.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/flops.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/jitcache/object_cache.h"
#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/scratch_usage.h"
#include "cuvil/runtime/ukernels.h"
#include "fma_peak.h"

namespace cuvil {
namespace {

constexpr char kUsage[] =
    "usage: cuvil-bench MODEL.onnx [--batch B] [--threads T] [--min-time S] [--warmup N] "
    "[--per-kernel] [--compile-tier full|fast|tiered] [--no-batch-split] [--float-qdq] [--peak] "
    "[--shape NAME=D0,D1,...]... [--fixed-shape]\n"
    "  --float-qdq: QDQ Convs in float32 (weights dequantised at compile time), not integer\n"
    "  --shape: input NAME's shape (dim 0 is the batch); needed for free dims besides the batch\n"
    "  --fixed-shape: compile for the --shape sizes (dim 0 stays free), as a config's dims ask\n";

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "cuvil-bench: %s\n", std::string(s.message()).c_str());
  return 1;
}

// Deterministic inputs: floats uniform in [-1, 1), 32- and 64-bit integers 1 (token ids, indices
// and trip counts stay in range, and both ORT runners feed 1, so a loop's count is the same on
// both sides), other integers small and non-negative, bools true.
HostTensor MakeInput(const TensorSignature& sig, const std::vector<int64_t>& shape,
                     std::mt19937& rng) {
  HostTensor t(sig.dtype, shape);
  int64_t n = t.num_elements();
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 3);
  for (int64_t i = 0; i < n; ++i) {
    switch (sig.dtype) {
      case DType::kFloat32:
        t.data_as<float>()[i] = real(rng);
        break;
      case DType::kFloat64:
        t.data_as<double>()[i] = real(rng);
        break;
      case DType::kInt64:
        t.data_as<int64_t>()[i] = 1;
        break;
      case DType::kInt32:
        t.data_as<int32_t>()[i] = 1;
        break;
      case DType::kBool:
        t.data_as<uint8_t>()[i] = 1;
        break;
      default:
        t.data()[i * DTypeSize(sig.dtype)] = static_cast<uint8_t>(small(rng));
        break;
    }
  }
  return t;
}

// Per-kernel timing: the slot of every kernel cuvil_entry calls (parent -1; a control-flow
// kernel's subgraph kernels run inside its time) is redirected to one trampoline. cuvil_entry
// calls those slots in index order, once each, so the n-th trampoline call of an execution is the
// n-th of them. Single-threaded use only (the benchmark loop), hence plain globals.
using KernelFn = int32_t (*)(void* args, int64_t batch);
std::vector<size_t> timed_slots;  // The kernels' slots, in call order.
std::vector<KernelFn> original_kernels;
std::vector<double> kernel_ms;  // By slot.
size_t next_kernel = 0;

int32_t TimedKernel(void* args, int64_t batch) {
  size_t slot = timed_slots[next_kernel++ % timed_slots.size()];
  auto t0 = Clock::now();
  int32_t rc = original_kernels[slot](args, batch);
  kernel_ms[slot] += MsSince(t0);
  return rc;
}

struct Options {
  std::string model;
  int64_t batch = 1;
  int threads = 1;
  double min_time = 3;
  int warmup = 5;
  bool per_kernel = false;
  bool batch_split = true;
  bool integer_qdq = true;
  bool peak = false;
  bool fixed_shape = false;  // --fixed-shape
  CompileTier tier = CompileTier::kFull;
  // --shape NAME=D0,D1,...: the shape of input NAME (its dim 0 is the batch; "NAME=": a scalar).
  std::map<std::string, std::vector<int64_t>> shapes;
};

// "NAME=1,3,48,192" (or "NAME=" for a scalar) into o->shapes; false when malformed.
bool ParseShape(const std::string& arg, Options* o) {
  const size_t eq = arg.rfind('=');
  if (eq == std::string::npos || eq == 0) return false;
  std::vector<int64_t> dims;  // "NAME=": a scalar
  const absl::string_view list = absl::string_view(arg).substr(eq + 1);
  for (absl::string_view d : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v) || v < 0) return false;
    dims.push_back(v);
  }
  if (!list.empty() &&
      dims.size() != static_cast<size_t>(std::count(list.begin(), list.end(), ',') + 1)) {
    return false;
  }
  o->shapes[arg.substr(0, eq)] = std::move(dims);
  return true;
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--batch" && has_value) {
      o.batch = std::atoll(argv[++i]);
    } else if (a == "--threads" && has_value) {
      o.threads = std::atoi(argv[++i]);
    } else if (a == "--min-time" && has_value) {
      o.min_time = std::atof(argv[++i]);
    } else if (a == "--warmup" && has_value) {
      o.warmup = std::atoi(argv[++i]);
    } else if (a == "--shape" && has_value) {
      if (!ParseShape(argv[++i], &o)) {
        std::fprintf(stderr, "cuvil-bench: --shape wants NAME=D0,D1,... (got '%s')\n", argv[i]);
        return 2;
      }
    } else if (a == "--per-kernel") {
      o.per_kernel = true;
    } else if (a == "--no-batch-split") {
      o.batch_split = false;
    } else if (a == "--peak") {
      o.peak = true;
    } else if (a == "--fixed-shape") {
      o.fixed_shape = true;
    } else if (a == "--float-qdq") {
      o.integer_qdq = false;
    } else if (a == "--compile-tier" && has_value) {
      auto tier = ParseCompileTier(argv[++i]);
      if (!tier.ok()) return Fail(tier.status());
      o.tier = *tier;
    } else if (o.model.empty() && a.rfind("--", 0) != 0) {
      o.model = a;
    } else {
      std::fprintf(stderr, "cuvil-bench: unexpected argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  // Per-kernel timing redirects the base table, which a tier swap replaces.
  if (o.model.empty() || o.batch < 1 || o.threads < 1 ||
      (o.per_kernel && o.tier == CompileTier::kTiered)) {
    std::fputs(kUsage, stderr);
    return 2;
  }

  CompileOptions full_options;
  CompileOptions fast_options;
  fast_options.opt_level = kFastTierOptLevel;
  full_options.integer_qdq = fast_options.integer_qdq = o.integer_qdq;
  if (o.fixed_shape) {
    for (const auto& [name, dims] : o.shapes) {
      if (dims.empty()) continue;
      std::vector<int64_t>& fixed = full_options.import.input_shapes[name];
      fixed = dims;
      fixed[0] = -1;  // the batch (or the model's own dim 0)
      fast_options.import.input_shapes[name] = fixed;
    }
    full_options.import.input_shapes_origin = fast_options.import.input_shapes_origin =
        "--shape with --fixed-shape";
  }
  // Import, graph passes and the memory plan run once; each tier only generates its code.
  auto t0 = Clock::now();
  auto prepared = PrepareOnnxFile(o.model, full_options);
  if (!prepared.ok()) return Fail(prepared.status());
  const double prepare_ms = MsSince(t0);
  auto compiled = (*prepared)->Lower(o.tier == CompileTier::kFull ? full_options : fast_options);
  if (!compiled.ok()) return Fail(compiled.status());
  double compile_ms = MsSince(t0);

  auto engine = JitEngine::Create();
  if (!engine.ok()) return Fail(engine.status());
  auto load_start = Clock::now();
  auto loaded = (*engine)->Load("cuvil-bench/1", std::move(*compiled));
  if (!loaded.ok()) return Fail(loaded.status());
  const CompiledModel& model = (*loaded)->model();
  std::string tier_report;
  if (o.tier == CompileTier::kTiered) {
    const double ready_ms = compile_ms + MsSince(load_start);  // Compile and link.
    auto t1 = Clock::now();
    auto full = (*prepared)->Lower(full_options);
    if (!full.ok()) return Fail(full.status());
    const double full_compile_ms = prepare_ms + MsSince(t1);
    auto patch = (*loaded)->patches().PrepareRecompilePatch(*full, {}, "opt_level=3");
    if (!patch.ok()) return Fail(patch.status());
    auto id = (*loaded)->patches().CommitPatch(*patch, "tiered-compilation");
    if (!id.ok()) return Fail(id.status());
    tier_report = absl::StrCat(" prepare_ms=", absl::SixDigits(prepare_ms),
                               " ready_ms=", absl::SixDigits(ready_ms),
                               " tier_up_ms=", absl::SixDigits(MsSince(t1)));
    compile_ms = full_compile_ms;
  }

  if (model.HasStringTensors()) {
    return Fail(absl::UnimplementedError("cuvil-bench does not time models with string tensors"));
  }
  if (!model.data_dependent_dims.empty()) {
    return Fail(absl::UnimplementedError(
        absl::StrCat(model.data_dependent_dims[0].producer,
                     " decides an output size from the data; cuvil-bench times models whose "
                     "sizes follow from the batch")));
  }
  // Every input's shape: given by --shape, or from the batch when that is its only free dim.
  const LoadedModel& version = **loaded;
  for (const auto& [name, dims] : o.shapes) {
    if (std::none_of(model.inputs.begin(), model.inputs.end(),
                     [&](const TensorSignature& sig) { return sig.name == name; })) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--shape names '", name, "', which is not an input of the model")));
    }
  }
  // The batch of a --shape'd input whose dim 0 is free, for the inputs given without --shape.
  for (const TensorSignature& sig : model.inputs) {
    auto it = o.shapes.find(sig.name);
    if (it != o.shapes.end() && !it->second.empty() && !sig.shape.empty() &&
        !sig.shape[0].IsStatic()) {
      o.batch = it->second[0];
      break;
    }
  }
  std::vector<std::vector<int64_t>> input_shapes;
  for (const TensorSignature& sig : model.inputs) {
    if (auto it = o.shapes.find(sig.name); it != o.shapes.end()) {
      input_shapes.push_back(it->second);
    } else if (SymbolCount(sig.shape) <= 1) {
      input_shapes.push_back(EvalShape(sig.shape, o.batch));
    } else {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("input '", sig.name, "' has free dimensions besides the batch (",
                       absl::StrJoin(model.symbols, ", "), "): give its shape with --shape ",
                       sig.name, "=D0,D1,...")));
    }
  }
  auto resolved = version.ResolveSymbols(input_shapes);
  if (!resolved.ok()) return Fail(resolved.status());
  std::vector<int64_t> syms = *std::move(resolved);
  o.batch = syms[0];
  const std::optional<int64_t> arena_bytes = model.arena.CheckedBytesForSymbols(syms);
  if (!arena_bytes.has_value()) {
    return Fail(absl::ResourceExhaustedError("the arena of these shapes does not fit in memory"));
  }
  double flops = 0;
  {
    auto graph = ImportOnnxFile(o.model, full_options.import);  // the same symbols as `model`
    if (!graph.ok()) return Fail(graph.status());
    // Counted on the float form, so a QDQ model's integer Convs count as the Convs they are.
    if (auto s = OptimizeGraph(**graph, nullptr, /*integer_qdq=*/false); !s.ok()) return Fail(s);
    flops = EstimateFlops(**graph, syms);  // the simplified, unfused graph
  }
  std::mt19937 rng(20240901);
  std::vector<HostTensor> inputs, outputs;
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  for (size_t i = 0; i < model.inputs.size(); ++i) {
    inputs.push_back(MakeInput(model.inputs[i], input_shapes[i], rng));
  }
  const std::vector<std::vector<int64_t>> output_shapes = version.OutputShapesAfterRun(syms);
  for (size_t i = 0; i < model.outputs.size(); ++i) {
    outputs.emplace_back(model.outputs[i].dtype, output_shapes[i]);
  }
  for (const HostTensor& t : inputs) in_ptrs.push_back(t.data());
  for (HostTensor& t : outputs) out_ptrs.push_back(t.data());
  // Allocated once: the timing covers the generated code only, as ORT's covers session.run.
  AlignedBuffer arena = AlignedAlloc(static_cast<size_t>(*arena_bytes));
  // A copy per run: a run may write symbols (none here: data-dependent models are refused).
  std::vector<int64_t> run_syms = syms;
  SetIntraOpThreads(o.threads);

  // Execute, as the server runs a version (batch split across threads included).
  auto run = [&]() -> absl::Status {
    if (!o.batch_split) {
      run_syms = syms;
      return EntryStatus(
          version.entry()(in_ptrs.data(), out_ptrs.data(), o.batch, arena.get(), run_syms.data()));
    }
    run_syms = syms;
    return EntryStatus(
        version.Execute(in_ptrs.data(), out_ptrs.data(), o.batch, arena.get(), run_syms.data()));
  };
  for (int i = 0; i < o.warmup; ++i) {
    if (auto s = run(); !s.ok()) return Fail(s);
  }
  ResetHeapPeak();
  std::vector<double> times;
  auto start = Clock::now();
  while (times.size() < 10 || MsSince(start) < o.min_time * 1e3) {
    auto a = Clock::now();
    if (auto s = run(); !s.ok()) return Fail(s);
    times.push_back(MsSince(a));
  }
  // Memory outside the arena that the timed executions used: the microkernels' per-thread
  // buffers (kept between executions) and the most heap scratch live at once.
  const ScratchUsage scratch = ReadScratchUsage();
  const int64_t scratch_bytes = scratch.thread_buffer_bytes + scratch.heap_peak_bytes;
  if (!o.batch_split) tier_report += " batch_split=off";
  double mean = 0;
  for (double t : times) mean += t;
  mean /= static_cast<double>(times.size());
  const double gflops = flops / (mean * 1e6);
  if (o.peak) {
    // After the timing, so the model's run does not share the cores with it.
    const FmaPeak peak = MeasureFmaPeak(o.threads, 1.0);
    absl::StrAppend(&tier_report, " peak_gflops=", absl::SixDigits(peak.gflops),
                    " peak_bits=", peak.vector_bits,
                    " peak_share=", absl::SixDigits(peak.gflops > 0 ? gflops / peak.gflops : 0));
  }
  std::sort(times.begin(), times.end());
  auto q = [&](double p) {
    return times[std::min(times.size() - 1, static_cast<size_t>(p * times.size()))];
  };
  std::filesystem::path path = std::filesystem::absolute(o.model);
  std::string name =
      absl::StrCat(path.parent_path().filename().string(), "/", path.filename().string());
  // The arena this batch needs against the same split's liveness lower bound (each region's most
  // bytes live across one node): how much the placement loses to fragmentation.
  ArenaPlan bound = model.arena;
  bound.per_batch_bytes = model.arena.live_per_batch_bytes;
  bound.fixed_bytes = model.arena.live_fixed_bytes;
  std::printf(
      "cuvil model=%s batch=%lld threads=%d median_ms=%.4f p99_ms=%.4f mean_ms=%.4f runs=%zu "
      "gflops=%.2f compile_ms=%.1f arena_bytes=%lld live_bound_bytes=%lld scratch_bytes=%lld "
      "uk_tier=%s%s%s\n",
      name.c_str(), static_cast<long long>(o.batch), o.threads, q(0.5), q(0.99), mean, times.size(),
      gflops, compile_ms, static_cast<long long>(*arena_bytes),
      // -1: a plan whose size is a program of the symbols keeps no separate liveness bound.
      static_cast<long long>(model.arena.symbolic() ? -1 : bound.BytesFor(o.batch)),
      static_cast<long long>(scratch_bytes), cuvil_uk_tier(),
      o.tier == CompileTier::kFull ? "" : absl::StrCat(" tier=", CompileTierName(o.tier)).c_str(),
      tier_report.c_str());

  if (o.per_kernel) {
    void** table = (*loaded)->function_table();
    size_t n = model.kernels.size();
    original_kernels.resize(n);
    kernel_ms.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      original_kernels[i] = reinterpret_cast<KernelFn>(table[i]);
      if (model.kernels[i].parent >= 0) continue;
      timed_slots.push_back(i);
      table[i] = reinterpret_cast<void*>(&TimedKernel);
    }
    int runs = std::max<int>(10, static_cast<int>(times.size() / 2));
    for (int r = 0; r < runs; ++r) {
      next_kernel = 0;
      if (auto s = run(); !s.ok()) return Fail(s);
    }
    for (size_t i = 0; i < n; ++i) table[i] = reinterpret_cast<void*>(original_kernels[i]);
    double total = 0;
    for (double t : kernel_ms) total += t;
    // Sum by op type first, then the individual kernels, largest first.
    std::map<std::string, double> by_op;
    for (size_t i = 0; i < n; ++i) by_op[model.kernels[i].op_type] += kernel_ms[i];
    std::vector<std::pair<double, std::string>> ops;
    for (const auto& [op, t] : by_op) ops.emplace_back(t, op);
    std::sort(ops.rbegin(), ops.rend());
    std::printf("per-op (ms per run, share):\n");
    for (const auto& [t, op] : ops) {
      std::printf("  %-24s %9.4f %5.1f%%\n", op.c_str(), t / runs, 100 * t / total);
    }
    std::vector<size_t> order = timed_slots;
    std::sort(order.begin(), order.end(),
              [&](size_t x, size_t y) { return kernel_ms[x] > kernel_ms[y]; });
    std::printf("per-kernel (ms per run, share, signature):\n");
    for (size_t i : order) {
      const KernelFunction& kf = model.kernels[i];
      std::printf("  %-28s %9.4f %5.1f%%  %s %s\n", kf.symbol.c_str(), kernel_ms[i] / runs,
                  100 * kernel_ms[i] / total, kf.node_name.c_str(), kf.signature.c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace cuvil

int main(int argc, char** argv) { return cuvil::Main(argc, argv); }
