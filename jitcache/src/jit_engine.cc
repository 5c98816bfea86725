#include "cuvil/jitcache/jit_engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/runtime/runtime_symbols.h"
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
};

// The code and table of one prepared or committed patch.
class PreparedPatch {
 public:
  ~PreparedPatch() {
    if (tracker) llvm::consumeError(tracker->remove());  // Frees the code if never published.
  }
  uint64_t id = 0;
  uint64_t base_generation = 0;  // table_generation_ it was prepared against.
  llvm::orc::ResourceTrackerSP tracker;
  std::unique_ptr<void*[]> table;
  PatchRecord record;
};

struct LoadedModel::Layer {
  std::shared_ptr<PreparedPatch> patch;
};

namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

JitEngine::JitEngine() : impl_(std::make_unique<Impl>()) {}

JitEngine::~JitEngine() = default;

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

  // Weights: one read-only mapping shared by every execution.
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t bytes = std::max<size_t>(model.weights.byte_size(), 1);
  loaded->weights_mapped_bytes_ = (bytes + page - 1) / page * page;
  void* mem = mmap(nullptr, loaded->weights_mapped_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return fail("cannot map weights");
  loaded->weights_ = mem;
  std::memcpy(mem, model.weights.data(), model.weights.byte_size());
  if (mprotect(mem, loaded->weights_mapped_bytes_, PROT_READ) != 0) {
    return fail(absl::StrCat("cannot make the weights read-only: ", std::strerror(errno)));
  }

  auto& es = impl_->jit->getExecutionSession();
  auto dylib = es.createJITDylib(namespace_name);
  if (!dylib) return fail(ToString(dylib.takeError()));
  loaded->handle_ = std::make_unique<LoadedModel::Handle>();
  loaded->handle_->dylib = &*dylib;
  loaded->handle_->tracker = dylib->getDefaultResourceTracker();
  dylib->addToLinkOrder(*impl_->runtime);
  llvm::orc::SymbolMap weights;
  weights[es.intern(kWeightsSymbol)] = {llvm::orc::ExecutorAddr::fromPtr(mem),
                                        llvm::JITSymbolFlags::Exported};
  if (auto err = dylib->define(llvm::orc::absoluteSymbols(std::move(weights)))) {
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
  model.weights = HostTensor();  // The mapping holds them now.
  loaded->model_ = std::move(model);
  return loaded;
}

void JitEngine::Unload(LoadedModel* model) {
  if (model->handle_ && model->handle_->dylib != nullptr) {
    auto& es = impl_->jit->getExecutionSession();
    if (auto err = es.removeJITDylib(*model->handle_->dylib)) {
      llvm::consumeError(std::move(err));
    }
    model->handle_->dylib = nullptr;
  }
  absl::MutexLock lock(&impl_->mu);
  impl_->live.erase(model->namespace_name_);
}

std::vector<std::string> JitEngine::Namespaces() const {
  absl::MutexLock lock(&impl_->mu);
  return {impl_->live.begin(), impl_->live.end()};
}

LoadedModel::~LoadedModel() {
  {
    // Removing the namespace frees every layer's code; the trackers must not remove it again.
    absl::MutexLock lock(&patch_mu_);
    for (auto& layer : layers_) layer->patch->tracker = nullptr;
  }
  if (engine_ != nullptr) engine_->Unload(this);
  if (weights_ != nullptr) munmap(weights_, weights_mapped_bytes_);
}

absl::StatusOr<int64_t> LoadedModel::ResolveBatch(
    const std::vector<std::vector<int64_t>>& input_shapes) const {
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
      if (want[d].IsStatic() || want[d].power != 1) continue;
      if (got[d] % want[d].coef != 0 || got[d] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("input '", sig[i].name, "' dim ", d, ": ",
                                                       got[d], " is not a multiple of ",
                                                       want[d].coef));
      }
      int64_t b = got[d] / want[d].coef;
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

absl::StatusOr<std::vector<HostTensor>> LoadedModel::RunImpl(
    const PreparedPatch* patch, const std::vector<HostTensor>& inputs) const {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i < model_.inputs.size() && inputs[i].dtype() != model_.inputs[i].dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", model_.inputs[i].name, "': expected dtype ",
                       DTypeName(model_.inputs[i].dtype), ", got ", DTypeName(inputs[i].dtype())));
    }
    shapes.push_back(inputs[i].shape());
  }
  auto batch = ResolveBatch(shapes);
  if (!batch.ok()) return batch.status();
  std::vector<const void*> in_ptrs;
  for (const HostTensor& t : inputs) in_ptrs.push_back(t.data());
  std::vector<HostTensor> outputs;
  std::vector<void*> out_ptrs;
  for (const TensorSignature& sig : model_.outputs) {
    outputs.emplace_back(sig.dtype, EvalShape(sig.shape, *batch));
  }
  for (HostTensor& t : outputs) out_ptrs.push_back(t.data());
  AlignedBuffer arena = AlignedAlloc(static_cast<size_t>(model_.arena.BytesFor(*batch)));
  int32_t rc = patch == nullptr ? Execute(in_ptrs.data(), out_ptrs.data(), *batch, arena.get())
                                : entry_with_table_(in_ptrs.data(), out_ptrs.data(), *batch,
                                                    arena.get(), patch->table.get());
  if (rc != 0) return EntryStatus(rc);
  return outputs;
}

int32_t LoadedModel::Execute(const void* const* inputs, void* const* outputs, int64_t batch,
                             void* arena) const {
  // Enter: count ourselves in the current epoch's parity; retry if the epoch moved meanwhile, so
  // a waiter that flipped the epoch either sees us counted or we see its newer table.
  uint64_t e;
  for (;;) {
    e = epoch_.load(std::memory_order_seq_cst);
    active_[e & 1].fetch_add(1, std::memory_order_seq_cst);
    if (epoch_.load(std::memory_order_seq_cst) == e) break;
    active_[e & 1].fetch_sub(1, std::memory_order_release);
  }
  void* const* table = current_table_.load(std::memory_order_seq_cst);
  int32_t rc = entry_with_table_(inputs, outputs, batch, arena, table);
  active_[e & 1].fetch_sub(1, std::memory_order_release);
  return rc;
}

void LoadedModel::WaitForExecutions() const {
  // Executions counted under the old parity may hold the old table; ones that enter later read
  // the epoch after the flip and therefore the newer table (both seq_cst).
  const uint64_t old = epoch_.fetch_add(1, std::memory_order_seq_cst);
  int spins = 0;
  while (active_[old & 1].load(std::memory_order_acquire) != 0) {
    if (++spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void LoadedModel::Publish(void* const* table) {
  current_table_.store(table, std::memory_order_seq_cst);
  // Callers of the raw entry point read this (acquire) once per execution.
  __atomic_store_n(table_ptr_, const_cast<void**>(table), __ATOMIC_RELEASE);
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> LoadedModel::PrepareIrPatch(
    const std::string& ir_text, const std::vector<std::string>& functions) {
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
  const uint64_t id = engine_->impl_->next_patch_id.fetch_add(1);
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
  if (auto err = jit.addIRModule(patch->tracker,
                                 llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx)))) {
    return absl::InternalError(absl::StrCat("cannot add the patch: ", ToString(std::move(err))));
  }
  absl::MutexLock lock(&patch_mu_);
  patch->base_generation = table_generation_;
  const size_t n = model_.kernels.size();
  patch->table = std::make_unique<void*[]>(std::max<size_t>(n, 1));
  void* const* current = current_table_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) patch->table[i] = __atomic_load_n(&current[i], __ATOMIC_ACQUIRE);
  for (const auto& [slot, unique] : replaced) {
    auto addr = jit.lookup(*handle_->dylib, unique);  // Compiles the patch (off the request path).
    if (!addr) {
      return absl::InvalidArgumentError(
          absl::StrCat("patch does not compile or link: ", ToString(addr.takeError())));
    }
    patch->table[slot] = addr->toPtr<void*>();
  }
  patch->record.id = id;
  patch->record.kind = "ir";
  patch->record.functions = names;
  patch->record.source = ir_text;
  return patch;
}

absl::StatusOr<std::vector<HostTensor>> LoadedModel::RunWith(
    const PreparedPatch* patch, const std::vector<HostTensor>& inputs) const {
  return RunImpl(patch, inputs);
}

absl::StatusOr<uint64_t> LoadedModel::CommitPatch(std::shared_ptr<PreparedPatch> patch,
                                                  std::string author) {
  if (patch == nullptr) return absl::InvalidArgumentError("no patch");
  absl::MutexLock lock(&patch_mu_);
  if (patch->base_generation != table_generation_) {
    return absl::FailedPreconditionError(
        "the version was patched or rolled back while this patch was prepared; prepare it again");
  }
  patch->record.author = std::move(author);
  patch->record.unix_ms = NowUnixMs();
  patch->record.active = true;
  Publish(patch->table.get());
  ++table_generation_;
  history_.push_back(patch->record);
  history_.back().source = patch->record.source;
  auto layer = std::make_unique<Layer>();
  layer->patch = std::move(patch);
  const uint64_t id = layer->patch->id;
  layers_.push_back(std::move(layer));
  return id;
}

absl::Status LoadedModel::Rollback(uint64_t id) {
  std::shared_ptr<PreparedPatch> victim;
  {
    absl::MutexLock lock(&patch_mu_);
    auto rec = std::find_if(history_.begin(), history_.end(),
                            [&](const PatchRecord& r) { return r.id == id; });
    if (rec == history_.end()) {
      return absl::NotFoundError(absl::StrCat("no patch ", id, " on ", namespace_name_));
    }
    if (!rec->active)
      return absl::FailedPreconditionError(absl::StrCat("patch ", id, " is already rolled back"));
    if (layers_.empty() || layers_.back()->patch->id != id) {
      return absl::FailedPreconditionError(
          absl::StrCat("patch ", id, " is not the latest active patch; roll back patch ",
                       layers_.back()->patch->id, " first"));
    }
    victim = std::move(layers_.back()->patch);
    layers_.pop_back();
    Publish(layers_.empty() ? function_table_ : layers_.back()->patch->table.get());
    ++table_generation_;
    rec->active = false;
    rec->rolled_back_unix_ms = NowUnixMs();
    // Nothing may free the victim's code while an execution can still be inside it.
    WaitForExecutions();
  }
  victim.reset();  // Removes its resource tracker: the code and table are freed.
  return absl::OkStatus();
}

std::vector<PatchRecord> LoadedModel::Patches() const {
  absl::MutexLock lock(&patch_mu_);
  return history_;
}

}  // namespace cuvil
