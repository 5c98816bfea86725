#include "cuvil/jitcache/jit_engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "batch_split.h"
#include "cuvil/runtime/dim_expr_codec.h"
#include "cuvil/runtime/runtime_symbols.h"
#include "cuvil/runtime/string_ops.h"
#include "cuvil/runtime/symbol_binding.h"
#include "cuvil/runtime/tensor_size.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "patch_target.h"

namespace cuvil {
namespace {

std::string ToString(llvm::Error err) { return llvm::toString(std::move(err)); }

}  // namespace

struct LoadedModel::Handle {
  llvm::orc::JITDylib* dylib = nullptr;
  llvm::orc::ResourceTrackerSP tracker;
};

// The engine's shared JIT state (patch_target.h) and the namespaces it has loaded.
struct JitEngine::Impl : jitcache_internal::JitShared {
  mutable absl::Mutex mu;
  std::set<std::string> live ABSL_GUARDED_BY(mu);
};

// What the version's PatchController reaches of it (see patch_target.h): a view, owned by the
// version, that forwards to its private execution guard and its namespace.
class LoadedModel::PatchTargetImpl final : public jitcache_internal::PatchTarget {
 public:
  PatchTargetImpl(LoadedModel* version, jitcache_internal::JitShared* jit)
      : version_(version), jit_(jit) {}
  const std::string& namespace_name() const override { return version_->namespace_name_; }
  const CompiledModel& model() const override { return version_->model_; }
  void** base_table() const override { return version_->function_table_; }
  const void* weights_data() const override { return version_->weights_data(); }
  size_t weights_bytes() const override { return version_->weights_mapped_bytes_; }
  jitcache_internal::JitShared& jit() const override { return *jit_; }
  llvm::orc::JITDylib& dylib() const override { return *version_->handle_->dylib; }
  absl::Status CheckRunInputs(const std::vector<HostTensor>& inputs) const override {
    return version_->PrepareRun(inputs).status();
  }
  void Publish(void* const* table, uint64_t generation) override {
    version_->Publish(table, generation);
  }
  bool WaitForExecutions(double seconds) const override {
    return version_->WaitForExecutions(seconds);
  }
  int64_t running_executions() const override { return version_->running_executions(); }

 private:
  LoadedModel* const version_;
  jitcache_internal::JitShared* const jit_;
};

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
  std::unique_ptr<LoadedModel> loaded(new LoadedModel(this));
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

LoadedModel::LoadedModel(JitEngine* engine)
    : engine_(engine),
      patch_target_(std::make_unique<PatchTargetImpl>(this, engine->impl_.get())),
      patches_(new PatchController(patch_target_.get())) {}

LoadedModel::~LoadedModel() {
  // Stops the profile timer and disowns the layers' code: removing the namespace frees it.
  patches_->Detach();
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

void LoadedModel::Publish(void* const* table, uint64_t generation) {
  current_table_.store(table, std::memory_order_seq_cst);
  // Callers of the raw entry point read this (acquire) once per execution.
  __atomic_store_n(table_ptr_, const_cast<void**>(table), __ATOMIC_RELEASE);
  // Validation runs compare it inside the guard (see RunImpl).
  published_generation_.store(generation, std::memory_order_seq_cst);
}

absl::StatusOr<std::vector<HostTensor>> LoadedModel::RunWith(
    const PreparedPatch* patch, const std::vector<HostTensor>& inputs) const {
  return RunImpl(patch, inputs);
}

const void* LoadedModel::weights_data() const {
  return weights_ != nullptr ? weights_ : static_cast<const void*>(model_.weights.data());
}

}  // namespace cuvil
