#include "cuvil/jitcache/jit_engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "batch_split.h"
#include "cuvil/runtime/dim_expr_codec.h"
#include "cuvil/runtime/runtime_symbols.h"
#include "cuvil/runtime/string_ops.h"
#include "cuvil/runtime/symbol_binding.h"
#include "cuvil/runtime/tensor_size.h"
#include "kernel_profiler.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "model_header.h"
#include "patch_sandbox.h"
#include "patch_sandbox.pb.h"

namespace cuvil {
namespace {

std::string ToString(llvm::Error err) { return llvm::toString(std::move(err)); }

}  // namespace

struct LoadedModel::Handle {
  llvm::orc::JITDylib* dylib = nullptr;
  llvm::orc::ResourceTrackerSP tracker;
};

struct JitEngine::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  llvm::orc::JITDylib* runtime = nullptr;
  mutable absl::Mutex mu;
  std::set<std::string> live ABSL_GUARDED_BY(mu);
  std::atomic<uint64_t> next_patch_id{1};  // Unique across namespaces: symbols embed it.
  // LLJIT's compile layer compiles on the calling thread: one IR compile at a time (patches are
  // prepared from several admin threads).
  absl::Mutex compile_mu;
};

// The code and table of one prepared or committed patch.
class PreparedPatch {
 public:
  ~PreparedPatch() {
    if (tracker) llvm::consumeError(tracker->remove());  // Frees the code if never published.
    if (own_dylib != nullptr) llvm::consumeError(session->removeJITDylib(*own_dylib));
  }
  uint64_t id = 0;
  uint64_t base_generation = 0;  // table_generation_ it was prepared against.
  llvm::orc::ResourceTrackerSP tracker;
  // Recompile patches link a whole object into a namespace of their own (its symbols would clash
  // with the version's); removing it frees the code.
  llvm::orc::ExecutionSession* session = nullptr;
  llvm::orc::JITDylib* own_dylib = nullptr;
  std::unique_ptr<void*[]> table;  // The base table with every layer up to this one applied.
  std::vector<std::pair<int, void*>> slots;  // What this layer replaces: (slot, code).
  std::shared_ptr<KernelProfiler> profiler;  // Profile patches.
  double profile_seconds = 0;
  // Recompile patches: what they link (for snapshots); sandboxed IR patches: the object code the
  // sandbox produced (a later sandbox child links it again to rebuild the stack).
  std::string object_code;
  std::vector<std::pair<int, std::string>> slot_symbols;  // IR patches from object code.
  double sandbox_ms = 0;  // IR patches: the sandbox child's time (start to exit).
  // IR patches run on probe sets: each kernel the patch replaces and its calls over the sets.
  std::vector<std::pair<std::string, uint64_t>> probe_calls;
  PatchRecord record;
};

struct LoadedModel::Layer {
  std::shared_ptr<PreparedPatch> patch;
};

namespace {

// Records a version keeps in its patch history (the active ones always stay).
constexpr size_t kMaxPatchHistory = 256;
// Largest patch id a restored snapshot may bring (ids count up from it).
constexpr uint64_t kMaxPatchId = uint64_t{1} << 62;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

JitEngine::JitEngine() : impl_(std::make_unique<Impl>()) {}

JitEngine::~JitEngine() = default;

void JitEngine::StartPatchIdsAt(uint64_t next) { impl_->next_patch_id.store(next); }

absl::StatusOr<std::unique_ptr<JitEngine>> JitEngine::Create() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit)
    return absl::InternalError(absl::StrCat("cannot create LLJIT: ", ToString(jit.takeError())));
  std::unique_ptr<JitEngine> engine(new JitEngine());
  engine->impl_->jit = std::move(*jit);
  auto& es = engine->impl_->jit->getExecutionSession();
  auto runtime = es.createJITDylib("cuvil_runtime");
  if (!runtime) return absl::InternalError(ToString(runtime.takeError()));
  llvm::orc::SymbolMap symbols;
  for (const RuntimeSymbol& s : RuntimeSymbols()) {
    symbols[es.intern(s.name)] = {llvm::orc::ExecutorAddr::fromPtr(s.address),
                                  llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  }
  if (auto err = runtime->define(llvm::orc::absoluteSymbols(std::move(symbols)))) {
    return absl::InternalError(ToString(std::move(err)));
  }
  // libm and libc functions that generated code calls (expf, erff, memcpy, ...).
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      engine->impl_->jit->getDataLayout().getGlobalPrefix());
  if (!process) return absl::InternalError(ToString(process.takeError()));
  runtime->addGenerator(std::move(*process));
  engine->impl_->runtime = &*runtime;
  return engine;
}

absl::StatusOr<std::unique_ptr<LoadedModel>> JitEngine::Load(const std::string& namespace_name,
                                                             CompiledModel model) {
  {
    absl::MutexLock lock(&impl_->mu);
    if (!impl_->live.insert(namespace_name).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("namespace '", namespace_name, "' is already loaded"));
    }
  }
  auto fail = [&](const std::string& msg) {
    absl::MutexLock lock(&impl_->mu);
    impl_->live.erase(namespace_name);
    return absl::InternalError(absl::StrCat("loading '", namespace_name, "': ", msg));
  };
  std::unique_ptr<LoadedModel> loaded(new LoadedModel());
  loaded->engine_ = this;
  loaded->namespace_name_ = namespace_name;

  // Weights: read-only memory shared by every execution. A blob that is already a read-only
  // mapping (a JIT cache entry) is used in place and kept alive by model_; others are copied.
  const void* weights = model.weights.data();
  if (model.weights.read_only()) {
    loaded->weights_mapped_bytes_ = model.weights.size();
  } else {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t bytes = std::max<size_t>(model.weights.size(), 1);
    loaded->weights_mapped_bytes_ = (bytes + page - 1) / page * page;
    void* mem = mmap(nullptr, loaded->weights_mapped_bytes_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return fail("cannot map weights");
    // Huge pages where the kernel offers them only on request: a 46 MB copy then takes ~25
    // faults instead of ~11,000 (a hint; failure changes nothing).
    if (loaded->weights_mapped_bytes_ >= (size_t{2} << 20)) {
      madvise(mem, loaded->weights_mapped_bytes_, MADV_HUGEPAGE);
    }
    loaded->weights_ = mem;
    if (!model.weights.empty()) std::memcpy(mem, model.weights.data(), model.weights.size());
    if (mprotect(mem, loaded->weights_mapped_bytes_, PROT_READ) != 0) {
      return fail(absl::StrCat("cannot make the weights read-only: ", std::strerror(errno)));
    }
    weights = mem;
    model.weights = WeightsBlob();  // The mapping holds them now.
  }

  auto& es = impl_->jit->getExecutionSession();
  auto dylib = es.createJITDylib(namespace_name);
  if (!dylib) return fail(ToString(dylib.takeError()));
  loaded->handle_ = std::make_unique<LoadedModel::Handle>();
  loaded->handle_->dylib = &*dylib;
  loaded->handle_->tracker = dylib->getDefaultResourceTracker();
  dylib->addToLinkOrder(*impl_->runtime);
  llvm::orc::SymbolMap weights_symbol;
  weights_symbol[es.intern(kWeightsSymbol)] = {llvm::orc::ExecutorAddr::fromPtr(weights),
                                               llvm::JITSymbolFlags::Exported};
  if (auto err = dylib->define(llvm::orc::absoluteSymbols(std::move(weights_symbol)))) {
    return fail(ToString(std::move(err)));
  }
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(model.object_code, namespace_name);
  if (auto err = impl_->jit->addObjectFile(*dylib, std::move(buffer))) {
    return fail(ToString(std::move(err)));
  }
  auto entry = impl_->jit->lookup(*dylib, kEntrySymbol);
  if (!entry) return fail(ToString(entry.takeError()));
  auto table = impl_->jit->lookup(*dylib, kFunctionTableSymbol);
  if (!table) return fail(ToString(table.takeError()));
  auto with_table = impl_->jit->lookup(*dylib, kEntryWithTableSymbol);
  if (!with_table) return fail(ToString(with_table.takeError()));
  auto table_ptr = impl_->jit->lookup(*dylib, kFunctionTablePtrSymbol);
  if (!table_ptr) return fail(ToString(table_ptr.takeError()));
  loaded->entry_ = entry->toPtr<EntryFn>();
  loaded->function_table_ = table->toPtr<void**>();
  loaded->entry_with_table_ = with_table->toPtr<EntryWithTableFn>();
  loaded->table_ptr_ = table_ptr->toPtr<void***>();
  loaded->current_table_.store(loaded->function_table_, std::memory_order_release);
  loaded->model_ = std::move(model);
  loaded->split_ = std::make_unique<const jitcache_internal::BatchSplitPlan>(
      jitcache_internal::MakeBatchSplitPlan(loaded->model_));
  return loaded;
}

void JitEngine::Unload(LoadedModel* model) {
  if (model->handle_ && model->handle_->dylib != nullptr) {
    auto& es = impl_->jit->getExecutionSession();
    if (auto err = es.removeJITDylib(*model->handle_->dylib)) {
      llvm::consumeError(std::move(err));
    }
    model->handle_->dylib = nullptr;
    es.getSymbolStringPool()->clearDeadEntries();
  }
  absl::MutexLock lock(&impl_->mu);
  impl_->live.erase(model->namespace_name_);
}

std::vector<std::string> JitEngine::Namespaces() const {
  absl::MutexLock lock(&impl_->mu);
  return {impl_->live.begin(), impl_->live.end()};
}

LoadedModel::~LoadedModel() {
  StopProfileTimer();  // Its automatic rollback must not run against a namespace going away.
  {
    // Removing the namespace frees every layer's code; the trackers must not remove it again.
    absl::MutexLock lock(&patch_mu_);
    for (auto& layer : layers_) layer->patch->tracker = nullptr;
  }
  {
    absl::MutexLock lock(&retire_mu_);
    for (auto& patch : retained_) patch->tracker = nullptr;
  }
  if (engine_ != nullptr) engine_->Unload(this);
  if (weights_ != nullptr) munmap(weights_, weights_mapped_bytes_);
}

namespace {

// String outputs hold views into the run's heap or its inputs: give each its own copies.
std::vector<HostTensor> OwnStrings(std::vector<HostTensor> outputs) {
  for (HostTensor& t : outputs) {
    if (t.dtype() == DType::kString) t = HostTensor::Strings(t.shape(), t.strings());
  }
  return outputs;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> LoadedModel::ResolveSymbols(
    absl::Span<const std::vector<int64_t>> input_shapes) const {
  absl::StatusOr<std::vector<int64_t>> syms;
  const size_t bound_count = model_.InputSymbolCount();
  if (bound_count <= 1) {
    auto batch = ResolveBatch(input_shapes);
    if (!batch.ok()) return batch.status();
    syms = std::vector<int64_t>{*batch};
  } else {
    std::vector<TensorDims> signature;
    signature.reserve(model_.inputs.size());
    for (const TensorSignature& sig : model_.inputs) {
      TensorDims dims{sig.name, {}};
      for (const SymDim& d : sig.shape) dims.dims.push_back(d.expr());
      signature.push_back(std::move(dims));
    }
    syms = BindSymbols(signature, input_shapes, static_cast<int32_t>(bound_count));
    if (!syms.ok()) return syms.status();
  }
  // Data-dependent symbols start at their upper bounds, for which buffers are sized.
  for (const DataDependentDim& d : model_.data_dependent_dims) {
    const std::optional<int64_t> bound = EvalDimProgram(d.upper_bound, *syms);
    if (!bound || *bound < 0 || static_cast<size_t>(d.symbol) != syms->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "these input shapes give no valid upper bound for the output size of ", d.producer));
    }
    syms->push_back(*bound);
  }
  // The string heap's slot: the caller stores the address (0: none, the run then fails cleanly).
  if (model_.makes_strings) syms->resize(model_.StringHeapSlot() + 1, 0);
  for (const DimConstraint& c : model_.dim_constraints) {
    const std::optional<int64_t> v = EvalDimProgram(c.program, *syms);
    if (!v || (c.equal ? *v != 0 : *v < 0)) {
      std::vector<std::string> bound;
      // Symbols only: a model that makes strings has one more entry, the heap's slot.
      for (size_t i = 0; i < std::min(syms->size(), model_.symbols.size()); ++i) {
        bound.push_back(absl::StrCat(model_.symbols[i], "=", (*syms)[i]));
      }
      const std::string what =
          !v        ? "overflow"
          : c.equal ? absl::StrCat("break ", c.description, " (the two differ by ", *v, ")")
                    : absl::StrCat("negative (", *v, ")");
      return absl::InvalidArgumentError(
          absl::StrCat("these input shapes (", absl::StrJoin(bound, ", "), ") make dim ", c.dim,
                       " of '", c.value, "' ", what, "; the model cannot run on them"));
    }
  }
  if (!model_.arena.CheckedBytesForSymbols(*syms)) {
    return absl::InvalidArgumentError(
        "these input shapes need more scratch memory than this model can address");
  }
  for (const TensorSignature& sig : model_.outputs) {
    auto shape = EvalShape(sig.shape, *syms);
    if (!shape || !CheckedTensorBytes(sig.dtype, *shape).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", sig.name, "' would be too large for these input shapes"));
    }
  }
  return syms;
}

absl::StatusOr<int64_t> LoadedModel::ResolveBatch(
    absl::Span<const std::vector<int64_t>> input_shapes) const {
  if (model_.InputSymbolCount() > 1) {
    auto syms = ResolveSymbols(input_shapes);
    if (!syms.ok()) return syms.status();
    return (*syms)[0];
  }
  const auto& sig = model_.inputs;
  if (input_shapes.size() != sig.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", sig.size(), " inputs, got ", input_shapes.size()));
  }
  int64_t batch = -1;
  for (size_t i = 0; i < sig.size(); ++i) {
    const auto& want = sig[i].shape;
    const auto& got = input_shapes[i];
    if (got.size() != want.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", sig[i].name, "': expected rank ", want.size(), " ",
                       SymShapeToString(want, model_.symbol), ", got rank ", got.size()));
    }
    for (size_t d = 0; d < want.size(); ++d) {
      if (want[d].IsStatic() || want[d].power() != 1) continue;
      if (got[d] % want[d].coef() != 0 || got[d] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("input '", sig[i].name, "' dim ", d, ": ",
                                                       got[d], " is not a multiple of ",
                                                       want[d].coef()));
      }
      int64_t b = got[d] / want[d].coef();
      if (batch >= 0 && b != batch) {
        return absl::InvalidArgumentError(absl::StrCat("input '", sig[i].name, "' dim ", d,
                                                       " implies ", model_.symbol, "=", b,
                                                       " but another input implies ", batch));
      }
      batch = b;
    }
  }
  if (batch < 0) batch = 1;
  for (size_t i = 0; i < sig.size(); ++i) {
    std::vector<int64_t> want = EvalShape(sig[i].shape, batch);
    if (want != input_shapes[i]) {
      std::vector<SymDim> got_dims;
      for (int64_t v : input_shapes[i]) got_dims.push_back(SymDim::Const(v));
      return absl::InvalidArgumentError(absl::StrCat("input '", sig[i].name, "': expected shape ",
                                                     SymShapeToString(sig[i].shape, model_.symbol),
                                                     ", got ", SymShapeToString(got_dims)));
    }
  }
  return batch;
}

absl::Status LoadedModel::CheckInputShapes(absl::Span<const std::vector<int64_t>> input_shapes,
                                           int64_t batch) const {
  const auto& sig = model_.inputs;
  if (input_shapes.size() != sig.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", sig.size(), " inputs, got ", input_shapes.size()));
  }
  for (size_t i = 0; i < sig.size(); ++i) {
    bool match = input_shapes[i].size() == sig[i].shape.size();
    for (size_t d = 0; match && d < sig[i].shape.size(); ++d) {
      match = sig[i].shape[d].Eval(batch) == input_shapes[i][d];
    }
    if (!match) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", sig[i].name, "': the compiled model reads ",
                       SymShapeToString(sig[i].shape, model_.symbol), " with ", model_.symbol, "=",
                       batch, ", got [", absl::StrJoin(input_shapes[i], ","), "]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<HostTensor>> LoadedModel::Run(
    const std::vector<HostTensor>& inputs) const {
  return RunImpl(nullptr, inputs);
}

struct LoadedModel::RunState {
  std::vector<int64_t> syms;
  int64_t batch = 0;
  std::vector<const void*> in_ptrs;
  std::vector<HostTensor> outputs;
  std::vector<void*> out_ptrs;
  AlignedBuffer arena;
  StringHeap strings;  // Holds the strings the run makes until the outputs own copies.
};

absl::StatusOr<std::unique_ptr<LoadedModel::RunState>> LoadedModel::PrepareRun(
    const std::vector<HostTensor>& inputs) const {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i < model_.inputs.size() && inputs[i].dtype() != model_.inputs[i].dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", model_.inputs[i].name, "': expected dtype ",
                       DTypeName(model_.inputs[i].dtype), ", got ", DTypeName(inputs[i].dtype())));
    }
    shapes.push_back(inputs[i].shape());
  }
  auto syms = ResolveSymbols(shapes);
  if (!syms.ok()) return syms.status();
  auto run = std::make_unique<RunState>();
  run->syms = *std::move(syms);
  run->batch = run->syms[0];
  for (const HostTensor& t : inputs) run->in_ptrs.push_back(t.data());
  for (const TensorSignature& sig : model_.outputs) {
    // ResolveSymbols checked that every output shape evaluates.
    run->outputs.emplace_back(sig.dtype, *EvalShape(sig.shape, run->syms));
  }
  for (HostTensor& t : run->outputs) run->out_ptrs.push_back(t.data());
  // ResolveSymbols checked that the arena is sizable too.
  run->arena = AlignedAlloc(static_cast<size_t>(*model_.arena.CheckedBytesForSymbols(run->syms)));
  if (model_.makes_strings) {
    run->syms[model_.StringHeapSlot()] =
        static_cast<int64_t>(reinterpret_cast<intptr_t>(&run->strings));
  }
  return run;
}

absl::StatusOr<std::vector<HostTensor>> LoadedModel::RunImpl(
    const PreparedPatch* patch, const std::vector<HostTensor>& inputs) const {
  auto run = PrepareRun(inputs);
  if (!run.ok()) return run.status();
  RunState& r = **run;
  int32_t rc = 0;
  if (patch == nullptr) {
    rc = Execute(r.in_ptrs.data(), r.out_ptrs.data(), r.batch, r.arena.get(), r.syms.data());
  } else {
    // Inside the guard like any execution: a rollback waits for this run before it frees code
    // the patch's table calls. A table prepared before the latest publish may name code already
    // freed: refuse to run it (the generation is read after entering, see EnterExecution).
    const uint64_t parity = EnterExecution();
    if (published_generation_.load(std::memory_order_seq_cst) != patch->base_generation) {
      LeaveExecution(parity);
      return absl::AbortedError(
          "the version was patched or rolled back while this patch was prepared; prepare it "
          "again");
    }
    rc = jitcache_internal::ExecuteSplit(*split_, entry_with_table_, r.in_ptrs.data(),
                                         r.out_ptrs.data(), r.batch, r.arena.get(),
                                         patch->table.get(), r.syms.data());
    LeaveExecution(parity);
  }
  if (rc != 0) return EntryStatus(rc);
  std::vector<HostTensor> outputs = std::move(r.outputs);
  if (model_.data_dependent_dims.empty()) return OwnStrings(std::move(outputs));
  // The run decided some output sizes: keep the leading elements it wrote.
  std::vector<std::vector<int64_t>> shapes_after = OutputShapesAfterRun(r.syms);
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (shapes_after[o] == outputs[o].shape()) continue;
    HostTensor exact(outputs[o].dtype(), shapes_after[o]);
    if (exact.byte_size() > outputs[o].byte_size()) {
      return absl::InternalError(absl::StrCat("output '", model_.outputs[o].name,
                                              "' came back larger than its upper bound"));
    }
    std::memcpy(exact.data(), outputs[o].data(), exact.byte_size());
    outputs[o] = std::move(exact);
  }
  return OwnStrings(std::move(outputs));
}

std::vector<std::vector<int64_t>> LoadedModel::OutputShapesAfterRun(
    absl::Span<const int64_t> syms) const {
  std::vector<std::vector<int64_t>> shapes;
  shapes.reserve(model_.outputs.size());
  for (const TensorSignature& sig : model_.outputs) {
    // A kernel writes a data-dependent value within [0, its upper bound].
    std::optional<std::vector<int64_t>> shape = EvalShape(sig.shape, syms);
    shapes.push_back(shape.value_or(std::vector<int64_t>(sig.shape.size(), 0)));
  }
  return shapes;
}

uint64_t LoadedModel::EnterExecution() const {
  // Count ourselves in the current epoch's parity; retry if the epoch moved meanwhile, so a
  // waiter that flipped the epoch either sees us counted or we see its newer table.
  uint64_t e;
  for (;;) {
    e = epoch_.load(std::memory_order_seq_cst);
    active_[e & 1].fetch_add(1, std::memory_order_seq_cst);
    if (epoch_.load(std::memory_order_seq_cst) == e) break;
    active_[e & 1].fetch_sub(1, std::memory_order_release);
  }
  return e & 1;
}

void LoadedModel::LeaveExecution(uint64_t parity) const {
  active_[parity].fetch_sub(1, std::memory_order_release);
}

int32_t LoadedModel::Execute(const void* const* inputs, void* const* outputs, int64_t batch,
                             void* arena, int64_t* syms) const {
  const uint64_t parity = EnterExecution();
  void* const* table = current_table_.load(std::memory_order_seq_cst);
  int32_t rc = jitcache_internal::ExecuteSplit(*split_, entry_with_table_, inputs, outputs, batch,
                                               arena, table, syms);
  LeaveExecution(parity);
  return rc;
}

int64_t LoadedModel::running_executions() const {
  return active_[0].load(std::memory_order_acquire) + active_[1].load(std::memory_order_acquire);
}

bool LoadedModel::WaitForExecutions(double seconds) const {
  // Executions counted under the old parity may hold the old table; ones that enter later read
  // the epoch after the flip and therefore the newer table (both seq_cst).
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  const uint64_t old = epoch_.fetch_add(1, std::memory_order_seq_cst);
  int spins = 0;
  while (active_[old & 1].load(std::memory_order_seq_cst) != 0) {
    if (++spins < 64) {
      std::this_thread::yield();
    } else {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return true;
}

void LoadedModel::Publish(void* const* table) {
  current_table_.store(table, std::memory_order_seq_cst);
  // Callers of the raw entry point read this (acquire) once per execution.
  __atomic_store_n(table_ptr_, const_cast<void**>(table), __ATOMIC_RELEASE);
}

// ---- Hot patching: layers over the base kernel table -------------------------------------------

struct LoadedModel::ProfileTimer {
  absl::Mutex mu;
  std::map<uint64_t, absl::Time> deadlines ABSL_GUARDED_BY(mu);  // Profile patch id -> end.
  bool stop ABSL_GUARDED_BY(mu) = false;
  // The patch the timer is rolling back and reporting (0: none); WaitForProfileEnd waits for it.
  uint64_t in_flight ABSL_GUARDED_BY(mu) = 0;
  absl::CondVar cv;    // Signalled when deadlines or stop change.
  std::thread thread;  // Started with the first profile patch.
};

absl::Status LoadedModel::LinkPatchObject(PreparedPatch* patch, std::string object_code,
                                          const std::vector<std::pair<int, std::string>>& symbols) {
  auto& jit = *engine_->impl_->jit;
  if (auto err = jit.addObjectFile(
          patch->tracker, llvm::MemoryBuffer::getMemBufferCopy(
                              object_code, absl::StrCat(namespace_name_, "/patch", patch->id)))) {
    return absl::InternalError(
        absl::StrCat("cannot add the patch's object code: ", ToString(std::move(err))));
  }
  for (const auto& [slot, unique] : symbols) {
    if (slot < 0 || static_cast<size_t>(slot) >= model_.kernels.size()) {
      return absl::InvalidArgumentError(absl::StrCat("kernel slot ", slot, " is out of range"));
    }
    auto addr = jit.lookup(*handle_->dylib, unique);  // Links it (no code generation).
    if (!addr) {
      return absl::InvalidArgumentError(
          absl::StrCat("patch does not link: ", ToString(addr.takeError())));
    }
    patch->slots.emplace_back(slot, addr->toPtr<void*>());
  }
  patch->slot_symbols = symbols;
  patch->object_code = std::move(object_code);
  return absl::OkStatus();
}

std::vector<std::pair<std::string, uint64_t>> LoadedModel::ProbeCalls(const PreparedPatch& patch) {
  return patch.probe_calls;
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> LoadedModel::PrepareObjectPatch(
    std::string object_code, const std::vector<std::pair<int, std::string>>& symbols) {
  auto patch = std::make_shared<PreparedPatch>();
  patch->id = engine_->impl_->next_patch_id.fetch_add(1);
  patch->tracker = handle_->dylib->createResourceTracker();
  if (absl::Status s = LinkPatchObject(patch.get(), std::move(object_code), symbols); !s.ok()) {
    return s;
  }
  std::vector<std::string> names;
  for (const auto& [slot, unique] : symbols) names.push_back(model_.kernels[slot].symbol);
  absl::MutexLock lock(&patch_mu_);
  patch->base_generation = table_generation_;
  patch->table = BuildTable(layers_.size());
  for (const auto& [slot, code] : patch->slots) patch->table[slot] = code;
  patch->record.id = patch->id;
  patch->record.kind = kPatchKindIr;
  patch->record.functions = std::move(names);
  return patch;
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> LoadedModel::PrepareIrPatch(
    const std::string& ir_text, const std::vector<std::string>& functions,
    const std::vector<HostTensor>& probe_inputs, const PatchSandboxLimits& sandbox) {
  std::vector<std::vector<HostTensor>> sets;
  if (!probe_inputs.empty()) sets.push_back(probe_inputs);
  return PrepareIrPatchOnSets(ir_text, functions, sets, sandbox);
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> LoadedModel::PrepareIrPatchOnSets(
    const std::string& ir_text, const std::vector<std::string>& functions,
    const std::vector<std::vector<HostTensor>>& probe_sets, const PatchSandboxLimits& sandbox) {
  if (absl::Status s = CheckPatchIr(ir_text); !s.ok()) return s;
  return PrepareIrLayer(ir_text, functions, engine_->impl_->next_patch_id.fetch_add(1),
                        kPatchKindIr, nullptr, &probe_sets, sandbox);
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> LoadedModel::PrepareIrLayer(
    const std::string& ir_text, const std::vector<std::string>& functions, uint64_t id,
    const char* kind, void* profile_thunk, const std::vector<std::vector<HostTensor>>* probe_sets,
    const PatchSandboxLimits& sandbox) {
  auto ctx = std::make_unique<llvm::LLVMContext>();
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> module = llvm::parseAssemblyString(ir_text, diag, *ctx);
  if (!module) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    diag.print("patch", os, /*ShowColors=*/false);
    return absl::InvalidArgumentError(absl::StrCat("patch IR does not parse: ", os.str()));
  }
  std::map<std::string, int> kernels;
  for (const KernelFunction& k : model_.kernels) kernels[k.symbol] = k.index;
  auto* ptr = llvm::PointerType::getUnqual(*ctx);
  auto* kernel_ty = llvm::FunctionType::get(llvm::Type::getInt32Ty(*ctx),
                                            {ptr, llvm::Type::getInt64Ty(*ctx)}, false);
  std::vector<std::pair<int, std::string>> replaced;  // (slot, unique symbol)
  std::vector<std::string> names;
  for (llvm::Function& fn : *module) {
    if (fn.isDeclaration()) continue;
    std::string name = fn.getName().str();
    auto it = kernels.find(name);
    if (it == kernels.end()) {
      // Helpers stay private to the patch so layers never clash.
      fn.setLinkage(llvm::GlobalValue::InternalLinkage);
      continue;
    }
    if (fn.getFunctionType() != kernel_ty) {
      std::string got;
      llvm::raw_string_ostream os(got);
      fn.getFunctionType()->print(os);
      return absl::InvalidArgumentError(absl::StrCat("patch function '", name, "' has type ",
                                                     os.str(), "; kernels are i32 (ptr, i64)"));
    }
    std::string unique = absl::StrCat(name, ".patch", id);
    fn.setName(unique);
    fn.setLinkage(llvm::GlobalValue::ExternalLinkage);
    fn.setVisibility(llvm::GlobalValue::DefaultVisibility);
    replaced.emplace_back(it->second, unique);
    names.push_back(name);
  }
  for (llvm::GlobalVariable& g : module->globals()) {
    if (!g.isDeclaration()) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
  if (replaced.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("patch defines no kernel of ", namespace_name_,
                                                   " (see ListFunctions for their names)"));
  }
  if (!functions.empty()) {
    std::set<std::string> want(functions.begin(), functions.end());
    std::set<std::string> got(names.begin(), names.end());
    if (want != got) {
      return absl::InvalidArgumentError(
          absl::StrCat("patch defines kernels [", absl::StrJoin(got, ", "),
                       "] but the request names [", absl::StrJoin(want, ", "), "]"));
    }
  }
  {
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyModule(*module, &os)) {
      return absl::InvalidArgumentError(absl::StrCat("patch IR is invalid: ", os.str()));
    }
  }
  auto& jit = *engine_->impl_->jit;
  module->setDataLayout(jit.getDataLayout());
  module->setTargetTriple(jit.getTargetTriple().str());

  auto patch = std::make_shared<PreparedPatch>();
  patch->id = id;
  patch->tracker = handle_->dylib->createResourceTracker();
  if (profile_thunk != nullptr) {
    // The wrappers' thunk, per patch so layers never clash; freed with the patch's tracker.
    auto& es = jit.getExecutionSession();
    llvm::orc::SymbolMap thunk;
    thunk[es.intern(absl::StrCat("cuvil_profile_call.p", id))] = {
        llvm::orc::ExecutorAddr::fromPtr(profile_thunk),
        llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
    if (auto err =
            handle_->dylib->define(llvm::orc::absoluteSymbols(std::move(thunk)), patch->tracker)) {
      return absl::InternalError(
          absl::StrCat("cannot define the profile thunk: ", ToString(std::move(err))));
    }
  }
  if (sandbox.enabled) {
    // Code generation and the first run happen in a child process; only its object code is
    // linked here (patch_sandbox.h).
    jitcache::v1::SandboxJob job;
    {
      std::string text;
      llvm::raw_string_ostream os(text);
      module->print(os, nullptr);
      job.set_patch_ir(std::move(os.str()));
    }
    for (const auto& [slot, unique] : replaced) {
      auto* s = job.add_patch_slots();
      s->set_slot(slot);
      s->set_symbol(unique);
    }
    if (probe_sets != nullptr) {
      for (const std::vector<HostTensor>& set : *probe_sets) {
        if (set.empty()) continue;
        if (auto prepared = PrepareRun(set); !prepared.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the patch's probe input does not fit the model: ", prepared.status().message()));
        }
        auto* ps = job.add_probe_sets();
        for (const HostTensor& t : set) {
          auto* pt = ps->add_tensors();
          pt->set_dtype(static_cast<int32_t>(t.dtype()));
          for (int64_t d : t.shape()) pt->add_shape(d);
          if (t.dtype() == DType::kString) {
            for (const auto& v : t.strings()) pt->add_strings(std::string(v));
          } else {
            pt->set_data(t.data(), t.byte_size());
          }
        }
      }
    }
    *job.mutable_model() = jitcache_internal::ModelHeader(model_);
    job.set_object_code(model_.object_code);
    job.set_weights_bytes(weights_mapped_bytes_);
    uint64_t sandbox_generation = 0;
    {
      // The stack as it stands: the child rebuilds this very table.
      absl::MutexLock lock(&patch_mu_);
      for (const auto& layer : layers_) {
        const PreparedPatch& p = *layer->patch;
        if (p.record.kind == kPatchKindProfile) continue;
        auto* pl = job.add_layers();
        if (p.record.kind == kPatchKindRecompile) {
          pl->set_kind(jitcache::v1::SandboxLayer::RECOMPILE);
          pl->set_code(p.object_code);
          for (const std::string& f : p.record.functions) pl->add_functions(f);
        } else if (!p.object_code.empty()) {
          pl->set_kind(jitcache::v1::SandboxLayer::OBJECT);
          pl->set_code(p.object_code);
          for (const auto& [slot, symbol] : p.slot_symbols) {
            auto* s = pl->add_slots();
            s->set_slot(slot);
            s->set_symbol(symbol);
          }
        } else {
          pl->set_kind(jitcache::v1::SandboxLayer::IR);
          pl->set_code(p.record.source);
        }
      }
      sandbox_generation = table_generation_;
    }
    const bool job_had_probes = job.probe_sets_size() > 0;
    jitcache_internal::SandboxJob sandbox_job;
    sandbox_job.job = job.SerializeAsString();
    job.Clear();
    sandbox_job.weights = weights_data();
    sandbox_job.weights_bytes = weights_mapped_bytes_;
    sandbox_job.timeout_seconds = sandbox.timeout_seconds;
    auto result = jitcache_internal::RunInSandbox(sandbox_job);
    {
      // The child ran the stack as it was: a commit or rollback since then means its verdict was
      // about another table. Prepare again.
      absl::MutexLock lock(&patch_mu_);
      if (table_generation_ != sandbox_generation) {
        return absl::AbortedError(
            "the version was patched or rolled back while the patch ran in the sandbox; prepare "
            "it again");
      }
    }
    if (!result.ok()) return result.status();
    patch->sandbox_ms = result->child_ms;
    if (job_had_probes) {
      for (size_t i = 0; i < replaced.size(); ++i) {
        patch->probe_calls.emplace_back(
            model_.kernels[replaced[i].first].symbol,
            i < result->kernel_calls.size() ? result->kernel_calls[i] : 0);
      }
    }
    if (absl::Status s = LinkPatchObject(patch.get(), std::move(result->object_code), replaced);
        !s.ok()) {
      return s;
    }
  } else {
    absl::MutexLock compile_lock(&engine_->impl_->compile_mu);
    if (auto err = jit.addIRModule(
            patch->tracker, llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx)))) {
      return absl::InternalError(absl::StrCat("cannot add the patch: ", ToString(std::move(err))));
    }
    for (const auto& [slot, unique] : replaced) {
      auto addr =
          jit.lookup(*handle_->dylib, unique);  // Compiles the patch (off the request path).
      if (!addr) {
        return absl::InvalidArgumentError(
            absl::StrCat("patch does not compile or link: ", ToString(addr.takeError())));
      }
      patch->slots.emplace_back(slot, addr->toPtr<void*>());
    }
  }
  absl::MutexLock lock(&patch_mu_);
  patch->base_generation = table_generation_;
  patch->table = BuildTable(layers_.size());
  for (const auto& [slot, code] : patch->slots) patch->table[slot] = code;
  patch->record.id = id;
  patch->record.kind = kind;
  patch->record.functions = names;
  patch->record.source = ir_text;
  return patch;
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> LoadedModel::PrepareRecompilePatch(
    const CompiledModel& recompiled, const std::vector<std::string>& functions,
    const std::string& options_text) {
  // Same model: same kernels in the same slots, same tensors, same weights bytes (the recompiled
  // code addresses this version's weights).
  if (recompiled.kernels.size() != model_.kernels.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the recompiled model has ", recompiled.kernels.size(), " kernels, the version has ",
        model_.kernels.size(), " (options that change the kernel set cannot be patched in)"));
  }
  for (size_t i = 0; i < model_.kernels.size(); ++i) {
    const KernelFunction& a = model_.kernels[i];
    const KernelFunction& b = recompiled.kernels[i];
    if (a.index != b.index || a.symbol != b.symbol || a.signature != b.signature) {
      return absl::InvalidArgumentError(
          absl::StrCat("the recompiled model's kernel ", i, " is '", b.symbol, "' ", b.signature,
                       ", the version's is '", a.symbol, "' ", a.signature));
    }
  }
  auto& jit = *engine_->impl_->jit;
  auto& es = jit.getExecutionSession();
  auto weights = jit.lookup(*handle_->dylib, kWeightsSymbol);
  if (!weights) return absl::InternalError(ToString(weights.takeError()));
  const size_t weight_bytes = recompiled.weights.size();
  // The tiers of one preparation share one blob: the same bytes need no comparing.
  const void* mine = weights->toPtr<const void*>();
  if (weight_bytes > weights_mapped_bytes_ ||
      (weight_bytes > 0 && mine != recompiled.weights.data() &&
       std::memcmp(mine, recompiled.weights.data(), weight_bytes) != 0)) {
    return absl::InvalidArgumentError("the recompiled model's weights differ from the version's");
  }
  std::map<std::string, int> kernels;
  for (const KernelFunction& k : model_.kernels) kernels[k.symbol] = k.index;
  std::vector<std::string> names = functions;
  if (names.empty()) {
    for (const KernelFunction& k : model_.kernels) names.push_back(k.symbol);
  }
  for (const std::string& name : names) {
    if (!kernels.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a kernel of ",
                                                     namespace_name_,
                                                     " (see ListFunctions for their names)"));
    }
  }
  const uint64_t id = engine_->impl_->next_patch_id.fetch_add(1);
  auto patch = std::make_shared<PreparedPatch>();
  patch->id = id;
  auto dylib = es.createJITDylib(absl::StrCat(namespace_name_, "/patch", id));
  if (!dylib) return absl::InternalError(ToString(dylib.takeError()));
  patch->session = &es;
  patch->own_dylib = &*dylib;
  dylib->addToLinkOrder(*engine_->impl_->runtime);
  llvm::orc::SymbolMap weights_symbol;
  weights_symbol[es.intern(kWeightsSymbol)] = {*weights, llvm::JITSymbolFlags::Exported};
  if (auto err = dylib->define(llvm::orc::absoluteSymbols(std::move(weights_symbol)))) {
    return absl::InternalError(ToString(std::move(err)));
  }
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(recompiled.object_code,
                                                     absl::StrCat(namespace_name_, "/patch", id));
  if (auto err = jit.addObjectFile(*dylib, std::move(buffer))) {
    return absl::InternalError(
        absl::StrCat("cannot add the recompiled code: ", ToString(std::move(err))));
  }
  // Kernels are private to the object; its own cuvil_fn_table holds their addresses.
  auto table = jit.lookup(*dylib, kFunctionTableSymbol);
  if (!table) {
    return absl::InternalError(
        absl::StrCat("cannot link the recompiled code: ", ToString(table.takeError())));
  }
  void* const* recompiled_table = table->toPtr<void* const*>();
  for (const std::string& name : names) {
    const int slot = kernels[name];
    patch->slots.emplace_back(slot, recompiled_table[slot]);
  }
  absl::MutexLock lock(&patch_mu_);
  patch->base_generation = table_generation_;
  patch->table = BuildTable(layers_.size());
  for (const auto& [slot, code] : patch->slots) patch->table[slot] = code;
  patch->record.id = id;
  patch->record.kind = kPatchKindRecompile;
  patch->object_code = recompiled.object_code;
  patch->record.functions = names;
  patch->record.source = options_text;
  return patch;
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> LoadedModel::PrepareProfilePatch(
    double seconds, const std::vector<std::string>& functions) {
  if (!(seconds >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("profile duration ", seconds, " is negative"));
  }
  std::vector<std::pair<std::string, void*>> wrapped;  // (kernel, code it calls now)
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&patch_mu_);
    for (const auto& layer : layers_) {
      if (layer->patch->profiler != nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("profile patch ", layer->patch->id,
                                                          " is still active on ", namespace_name_,
                                                          "; roll it back or wait for it to end"));
      }
    }
    std::unique_ptr<void*[]> current = BuildTable(layers_.size());
    std::set<std::string> want(functions.begin(), functions.end());
    for (const KernelFunction& k : model_.kernels) {
      // By default the kernels cuvil_entry calls: a subgraph's kernels run inside their
      // control-flow kernel's time, so wrapping them too would count that time twice.
      if (functions.empty() ? k.parent < 0 : want.erase(k.symbol) > 0)
        wrapped.emplace_back(k.symbol, current[k.index]);
    }
    if (!want.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("not kernels of ", namespace_name_, ": ", absl::StrJoin(want, ", ")));
    }
    generation = table_generation_;
  }
  if (wrapped.empty()) return absl::InvalidArgumentError("the version has no kernels to profile");
  auto profiler = std::make_shared<KernelProfiler>(wrapped);
  const uint64_t id = engine_->impl_->next_patch_id.fetch_add(1);
  auto patch = PrepareIrLayer(profiler->WrapperIr(absl::StrCat("cuvil_profile_call.p", id)), {}, id,
                              kPatchKindProfile, KernelProfiler::Thunk(), nullptr,
                              PatchSandboxLimits{0, /*enabled=*/false});
  if (!patch.ok()) return patch.status();
  if ((*patch)->base_generation != generation) {
    // The wrappers call the code of an older table.
    return absl::FailedPreconditionError(
        "the version was patched or rolled back while the profile was prepared; try again");
  }
  (*patch)->profiler = std::move(profiler);
  (*patch)->profile_seconds = seconds;
  (*patch)->record.source = absl::StrCat("seconds=", seconds);
  return patch;
}

std::unique_ptr<void*[]> LoadedModel::BuildTable(size_t layer_count) const {
  const size_t n = model_.kernels.size();
  auto table = std::make_unique<void*[]>(std::max<size_t>(n, 1));
  // Base slots may be redirected in place by tools: read them atomically.
  for (size_t i = 0; i < n; ++i) table[i] = __atomic_load_n(&function_table_[i], __ATOMIC_ACQUIRE);
  for (size_t l = 0; l < layer_count && l < layers_.size(); ++l) {
    for (const auto& [slot, code] : layers_[l]->patch->slots) table[slot] = code;
  }
  return table;
}

absl::StatusOr<std::vector<HostTensor>> LoadedModel::RunWith(
    const PreparedPatch* patch, const std::vector<HostTensor>& inputs) const {
  return RunImpl(patch, inputs);
}

void LoadedModel::RebuildFrom(size_t from, std::vector<std::unique_ptr<void*[]>>* retired) {
  for (size_t j = from; j < layers_.size(); ++j) {
    if (layers_[j]->patch->table != nullptr)
      retired->push_back(std::move(layers_[j]->patch->table));
    layers_[j]->patch->table = BuildTable(j + 1);
  }
  Publish(layers_.empty() ? function_table_ : layers_.back()->patch->table.get());
  ++table_generation_;
  published_generation_.store(table_generation_, std::memory_order_seq_cst);
}

absl::StatusOr<uint64_t> LoadedModel::CommitLocked(std::shared_ptr<PreparedPatch> patch,
                                                   size_t at) {
  if (frozen_) {
    return absl::AbortedError(absl::StrCat(
        namespace_name_, " takes no more patches: ", frozen_reason_, "; apply the patch again"));
  }
  if (patch->base_generation != table_generation_) {
    return absl::AbortedError(
        "the version was patched or rolled back while this patch was prepared; prepare it again");
  }
  patch->record.active = true;
  // Validation ran the wrappers before the commit; executions see them only from here on (the
  // seq_cst publish orders the zeroing before any of their counts).
  if (patch->profiler != nullptr) patch->profiler->Reset();
  const uint64_t id = patch->id;
  auto layer = std::make_unique<Layer>();
  layer->patch = std::move(patch);
  at = std::min(at, layers_.size());
  // The history lists active patches in stack order: a base patch goes before the others.
  auto rec = history_.end();
  if (at < layers_.size()) {
    const uint64_t above = layers_[at]->patch->id;
    rec = std::find_if(history_.begin(), history_.end(),
                       [&](const PatchRecord& r) { return r.id == above; });
  }
  history_.insert(rec, layer->patch->record);
  // Bounded history: the oldest rolled-back records (and their IR text) go first.
  for (auto it = history_.begin(); history_.size() > kMaxPatchHistory && it != history_.end();) {
    it = it->active ? std::next(it) : history_.erase(it);
  }
  std::vector<std::unique_ptr<void*[]>> retired;
  if (at == layers_.size()) {
    layers_.push_back(std::move(layer));
    Publish(layers_.back()->patch->table.get());
    ++table_generation_;
    published_generation_.store(table_generation_, std::memory_order_seq_cst);
  } else {
    layers_.insert(layers_.begin() + static_cast<std::ptrdiff_t>(at), std::move(layer));
    RebuildFrom(at, &retired);
    // Tables of layers above were rebuilt; executions may still read the old ones.
    retired_tables_.insert(retired_tables_.end(), std::make_move_iterator(retired.begin()),
                           std::make_move_iterator(retired.end()));
  }
  change_count_.fetch_add(1, std::memory_order_relaxed);
  return id;
}

absl::StatusOr<uint64_t> LoadedModel::CommitPatch(std::shared_ptr<PreparedPatch> patch,
                                                  std::string author, PatchCheck check) {
  if (patch == nullptr) return absl::InvalidArgumentError("no patch");
  const double seconds = patch->profiler != nullptr ? patch->profile_seconds : 0;
  absl::StatusOr<uint64_t> id;
  {
    absl::MutexLock lock(&patch_mu_);
    patch->record.author = std::move(author);
    patch->record.unix_ms = NowUnixMs();
    patch->record.check = check;
    id = CommitLocked(std::move(patch), layers_.size());
  }
  if (!id.ok()) return id;
  if (seconds > 0) StartProfileTimer(*id, seconds);
  NotifyChange();
  return id;
}

absl::StatusOr<uint64_t> LoadedModel::CommitBasePatch(std::shared_ptr<PreparedPatch> patch,
                                                      std::string author) {
  if (patch == nullptr) return absl::InvalidArgumentError("no patch");
  if (patch->profiler != nullptr || patch->slots.size() != model_.kernels.size()) {
    return absl::InvalidArgumentError("a base patch must replace every kernel");
  }
  absl::StatusOr<uint64_t> id;
  {
    absl::MutexLock lock(&patch_mu_);
    patch->record.author = std::move(author);
    patch->record.unix_ms = NowUnixMs();
    // Beneath every layer except profile wrappers' bases: a profile's wrappers call the code of
    // the table it was prepared on, so the base goes beneath the lowest profile too (its wrappers
    // keep calling the old code, alive in the version's namespace, until the window ends).
    id = CommitLocked(std::move(patch), 0);
  }
  if (!id.ok()) return id;
  NotifyChange();
  return id;
}

std::vector<PatchRecord> LoadedModel::Freeze(std::string reason) {
  absl::MutexLock lock(&patch_mu_);
  frozen_ = true;
  frozen_reason_ = std::move(reason);
  std::vector<PatchRecord> active;
  for (const auto& layer : layers_) {
    for (const PatchRecord& r : history_) {
      if (r.id == layer->patch->id) active.push_back(r);
    }
  }
  return active;
}

void LoadedModel::Unfreeze() {
  absl::MutexLock lock(&patch_mu_);
  frozen_ = false;
  frozen_reason_.clear();
}

absl::StatusOr<uint64_t> LoadedModel::CommitRestoredPatch(std::shared_ptr<PreparedPatch> patch,
                                                          const PatchRecord& original) {
  if (patch == nullptr) return absl::InvalidArgumentError("no patch");
  if (original.id == 0 || original.id > kMaxPatchId) {
    // Later ids continue after it: one near 2^64 would wrap the counter.
    return absl::InvalidArgumentError(
        absl::StrCat("patch id ", original.id, " is out of range (1..", kMaxPatchId, ")"));
  }
  absl::StatusOr<uint64_t> id;
  {
    absl::MutexLock lock(&patch_mu_);
    for (const PatchRecord& r : history_) {
      if (r.id == original.id) {
        return absl::AlreadyExistsError(
            absl::StrCat("patch ", original.id, " is already in the history of ", namespace_name_));
      }
    }
    patch->id = original.id;
    patch->record.id = original.id;
    patch->record.unix_ms = original.unix_ms;
    patch->record.author = original.author;
    patch->record.check = original.check;
    id = CommitLocked(std::move(patch), layers_.size());
  }
  if (!id.ok()) return id;
  // Later patches must not reuse a restored id (ids name symbols and history entries).
  auto& next = engine_->impl_->next_patch_id;
  uint64_t cur = next.load();
  while (cur <= original.id && !next.compare_exchange_weak(cur, original.id + 1)) {
  }
  NotifyChange();
  return id;
}

absl::StatusOr<size_t> LoadedModel::RollbackLayer(uint64_t id) const {
  auto rec = std::find_if(history_.begin(), history_.end(),
                          [&](const PatchRecord& r) { return r.id == id; });
  if (rec == history_.end()) {
    return absl::NotFoundError(absl::StrCat("no patch ", id, " on ", namespace_name_));
  }
  if (!rec->active)
    return absl::FailedPreconditionError(absl::StrCat("patch ", id, " is already rolled back"));
  size_t k = 0;
  while (k < layers_.size() && layers_[k]->patch->id != id) ++k;
  if (k == layers_.size()) return absl::InternalError(absl::StrCat("patch ", id, " has no layer"));
  for (size_t j = k + 1; j < layers_.size(); ++j) {
    // Its wrappers call the code of the table it was prepared on, which includes this patch.
    if (layers_[j]->patch->profiler != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("profile patch ", layers_[j]->patch->id, " wraps patch ", id,
                       "; roll the profile back (or wait for it to end) first"));
    }
  }
  return k;
}

absl::StatusOr<LoadedModel::RollbackTrial> LoadedModel::TryRollback(uint64_t id) const {
  absl::MutexLock lock(&patch_mu_);
  absl::StatusOr<size_t> k = RollbackLayer(id);
  if (!k.ok()) return k.status();
  RollbackTrial trial;
  trial.before = std::make_shared<PreparedPatch>();
  trial.before->base_generation = table_generation_;
  trial.before->table = BuildTable(*k);
  trial.without = std::make_shared<PreparedPatch>();
  trial.without->base_generation = table_generation_;
  trial.without->table = BuildTable(*k);
  for (size_t j = *k + 1; j < layers_.size(); ++j) {
    for (const auto& [slot, code] : layers_[j]->patch->slots) trial.without->table[slot] = code;
    for (const PatchRecord& r : history_) {
      if (r.id == layers_[j]->patch->id) trial.above.push_back(r);
    }
  }
  return trial;
}

absl::Status LoadedModel::Rollback(uint64_t id, double drain_seconds, const RollbackTrial* trial) {
  // One rollback drains at a time (the epoch's two parities serve one waiter); the patch lock is
  // held only while the table changes, never while waiting for executions.
  absl::MutexLock retire_lock(&retire_mu_);
  std::shared_ptr<PreparedPatch> victim;
  std::vector<std::unique_ptr<void*[]>> retired;  // Tables executions may still be reading.
  {
    absl::MutexLock lock(&patch_mu_);
    absl::StatusOr<size_t> layer = RollbackLayer(id);
    if (!layer.ok()) return layer.status();
    if (trial != nullptr &&
        (trial->without == nullptr || trial->without->base_generation != table_generation_)) {
      return absl::AbortedError(
          absl::StrCat("the version was patched or rolled back since the rollback of patch ", id,
                       " was tried; try again"));
    }
    const size_t k = *layer;
    auto rec = std::find_if(history_.begin(), history_.end(),
                            [&](const PatchRecord& r) { return r.id == id; });
    victim = std::move(layers_[k]->patch);
    layers_.erase(layers_.begin() + static_cast<std::ptrdiff_t>(k));
    // Layers above the victim get tables without it; their old tables retire.
    RebuildFrom(k, &retired);
    retired.insert(retired.end(), std::make_move_iterator(retired_tables_.begin()),
                   std::make_move_iterator(retired_tables_.end()));
    retired_tables_.clear();
    rec->active = false;
    rec->rolled_back_unix_ms = NowUnixMs();
    if (victim->profiler != nullptr) rec->profile = victim->profiler->Report();
    change_count_.fetch_add(1, std::memory_order_relaxed);
    if (profile_timer_ != nullptr) {
      absl::MutexLock timer_lock(&profile_timer_->mu);  // Order: patch_mu_, then the timer's.
      profile_timer_->deadlines.erase(id);
      profile_timer_->cv.Signal();
    }
  }
  // Nothing may free the victim's code while an execution can still be inside it.
  absl::Status result = absl::OkStatus();
  const auto t0 = std::chrono::steady_clock::now();
  bool drained = WaitForExecutions(drain_seconds);
  if (drained && !retained_.empty()) {
    // Code kept by an earlier timed-out drain: executions of that time counted in the other
    // parity, which a second drain covers.
    const double spent =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (WaitForExecutions(std::max(0.0, drain_seconds - spent))) {
      retained_.clear();
    } else {
      drained = false;
    }
  }
  if (!drained) {
    const int64_t stuck = running_executions();
    retained_.push_back(std::move(victim));
    for (auto& t : retired) {
      auto holder = std::make_shared<PreparedPatch>();
      holder->table = std::move(t);
      retained_.push_back(std::move(holder));
    }
    retired.clear();
    result = absl::DeadlineExceededError(
        absl::StrCat("patch ", id, " is rolled back (new executions no longer run it), but ", stuck,
                     " execution(s) of ", namespace_name_, " are still running after ",
                     drain_seconds, " s; its code is kept until they return"));
  }
  victim.reset();  // Removes its code and table (when drained).
  retired.clear();
  // The removed code's symbol names stay interned until dead entries are cleared.
  engine_->impl_->jit->getExecutionSession().getSymbolStringPool()->clearDeadEntries();
  NotifyChange();
  return result;
}

bool LoadedModel::has_stuck_code() const {
  absl::MutexLock lock(&retire_mu_);
  return !retained_.empty();
}

std::vector<PatchRecord> LoadedModel::Patches() const {
  absl::MutexLock lock(&patch_mu_);
  std::vector<PatchRecord> records = history_;
  for (PatchRecord& r : records) {
    if (!r.active || r.kind != kPatchKindProfile) continue;
    for (const auto& layer : layers_) {
      if (layer->patch->id == r.id && layer->patch->profiler) {
        r.profile = layer->patch->profiler->Report();
      }
    }
  }
  return records;
}

absl::StatusOr<std::vector<KernelProfile>> LoadedModel::ProfileReport(uint64_t id) const {
  absl::MutexLock lock(&patch_mu_);
  for (const auto& layer : layers_) {
    if (layer->patch->id == id && layer->patch->profiler) return layer->patch->profiler->Report();
  }
  for (const PatchRecord& r : history_) {
    if (r.id == id && r.kind == kPatchKindProfile) return r.profile;
  }
  return absl::NotFoundError(
      absl::StrCat("patch ", id, " is not a profile patch of ", namespace_name_));
}

absl::StatusOr<std::string> LoadedModel::PatchObjectCode(uint64_t id) const {
  absl::MutexLock lock(&patch_mu_);
  for (const auto& layer : layers_) {
    if (layer->patch->id == id && !layer->patch->object_code.empty()) {
      return layer->patch->object_code;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("patch ", id, " is not an active recompile patch of ", namespace_name_));
}

bool LoadedModel::WaitForProfileEnd(uint64_t id, double timeout_seconds) const {
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_seconds);
  auto inactive = [&] {
    absl::MutexLock lock(&patch_mu_);
    for (const auto& layer : layers_) {
      if (layer->patch->id == id) return false;
    }
    if (profile_timer_ == nullptr) return true;
    // Order: patch_mu_, then the timer's. The timer marks the patch before rolling it back.
    absl::MutexLock timer_lock(&profile_timer_->mu);
    return profile_timer_->in_flight != id;
  };
  while (!inactive()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

const void* LoadedModel::weights_data() const {
  return weights_ != nullptr ? weights_ : static_cast<const void*>(model_.weights.data());
}

void LoadedModel::set_change_listener(std::function<void()> listener) {
  change_listener_ = std::move(listener);
}

void LoadedModel::set_auto_rollback_listener(AutoRollbackListener listener) {
  auto_rollback_listener_ = std::move(listener);
}

bool LoadedModel::IsActivePatch(uint64_t id) const {
  absl::MutexLock lock(&patch_mu_);
  for (const PatchRecord& r : history_) {
    if (r.id == id) return r.active;
  }
  return false;
}

uint64_t LoadedModel::change_count() const { return change_count_.load(std::memory_order_relaxed); }

void LoadedModel::NotifyChange() {
  if (change_listener_) change_listener_();
}

void LoadedModel::StartProfileTimer(uint64_t id, double seconds) {
  ProfileTimer* timer;
  {
    absl::MutexLock lock(&patch_mu_);  // Serialises the lazy start against other commits.
    if (profile_timer_ == nullptr) profile_timer_ = std::make_unique<ProfileTimer>();
    timer = profile_timer_.get();
  }
  absl::MutexLock lock(&timer->mu);
  if (timer->stop) return;
  timer->deadlines[id] = absl::Now() + absl::Seconds(seconds);
  timer->cv.Signal();
  if (timer->thread.joinable()) return;
  timer->thread = std::thread([this, timer] {
    absl::MutexLock l(&timer->mu);
    while (!timer->stop) {
      uint64_t due = 0;
      absl::Time earliest = absl::InfiniteFuture();
      for (const auto& [pid, at] : timer->deadlines) {
        if (at < earliest) earliest = at, due = pid;
      }
      if (due == 0 || absl::Now() < earliest) {
        // Woken early by a new deadline, a manual rollback or stop: look again.
        timer->cv.WaitWithDeadline(&timer->mu, earliest);
        continue;
      }
      timer->deadlines.erase(due);
      timer->in_flight = due;
      timer->mu.Unlock();
      const auto started = std::chrono::steady_clock::now();
      absl::Status s = Rollback(due);
      // Rolled back by hand meanwhile (FailedPrecondition): that call reported itself.
      if (auto_rollback_listener_ && (s.ok() || IsActivePatch(due))) {
        auto_rollback_listener_(due, s, started);
      }
      timer->mu.Lock();
      timer->in_flight = 0;
    }
  });
}

void LoadedModel::StopProfileTimer() {
  if (profile_timer_ == nullptr) return;
  {
    absl::MutexLock lock(&profile_timer_->mu);
    profile_timer_->stop = true;
    profile_timer_->cv.Signal();
  }
  if (profile_timer_->thread.joinable()) profile_timer_->thread.join();
}

}  // namespace cuvil
