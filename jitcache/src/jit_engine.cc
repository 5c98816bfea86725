#include "cuvil/jitcache/jit_engine.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/runtime/runtime_symbols.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"

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
};

JitEngine::JitEngine() : impl_(std::make_unique<Impl>()) {}

JitEngine::~JitEngine() = default;

absl::StatusOr<std::unique_ptr<JitEngine>> JitEngine::Create() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit) return absl::InternalError(absl::StrCat("cannot create LLJIT: ", ToString(jit.takeError())));
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
      return absl::AlreadyExistsError(absl::StrCat("namespace '", namespace_name, "' is already loaded"));
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
  loaded->entry_ = entry->toPtr<EntryFn>();
  loaded->function_table_ = table->toPtr<void**>();
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
      return absl::InvalidArgumentError(absl::StrCat("input '", sig[i].name, "': expected rank ",
                                                     want.size(), " ", SymShapeToString(want, model_.symbol),
                                                     ", got rank ", got.size()));
    }
    for (size_t d = 0; d < want.size(); ++d) {
      if (want[d].IsStatic() || want[d].power != 1) continue;
      if (got[d] % want[d].coef != 0 || got[d] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("input '", sig[i].name, "' dim ", d, ": ", got[d],
                                                       " is not a multiple of ", want[d].coef));
      }
      int64_t b = got[d] / want[d].coef;
      if (batch >= 0 && b != batch) {
        return absl::InvalidArgumentError(absl::StrCat("input '", sig[i].name, "' dim ", d, " implies ",
                                                       model_.symbol, "=", b, " but another input implies ", batch));
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
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", sig[i].name, "': expected shape ", SymShapeToString(sig[i].shape, model_.symbol),
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
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", sig[i].name, "': the compiled model reads ",
          SymShapeToString(sig[i].shape, model_.symbol), " with ", model_.symbol, "=", batch,
          ", got [", absl::StrJoin(input_shapes[i], ","), "]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<HostTensor>> LoadedModel::Run(const std::vector<HostTensor>& inputs) const {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i < model_.inputs.size() && inputs[i].dtype() != model_.inputs[i].dtype) {
      return absl::InvalidArgumentError(absl::StrCat("input '", model_.inputs[i].name, "': expected dtype ",
                                                     DTypeName(model_.inputs[i].dtype), ", got ",
                                                     DTypeName(inputs[i].dtype())));
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
  int32_t rc = entry_(in_ptrs.data(), out_ptrs.data(), *batch, arena.get());
  if (rc != 0) return EntryStatus(rc);
  return outputs;
}

}  // namespace cuvil
