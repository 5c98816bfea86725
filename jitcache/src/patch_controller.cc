#include "cuvil/jitcache/patch_controller.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cuvil/format/model_header.h"
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
#include "llvm/Support/raw_ostream.h"
#include "patch_sandbox.h"
#include "patch_sandbox.pb.h"
#include "patch_target.h"

namespace cuvil {
namespace {

std::string ToString(llvm::Error err) { return llvm::toString(std::move(err)); }

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

struct PatchController::Layer {
  std::shared_ptr<PreparedPatch> patch;
};

struct PatchController::ProfileTimer {
  absl::Mutex mu;
  std::map<uint64_t, absl::Time> deadlines ABSL_GUARDED_BY(mu);  // Profile patch id -> end.
  bool stop ABSL_GUARDED_BY(mu) = false;
  // The patch the timer is rolling back and reporting (0: none); WaitForProfileEnd waits for it.
  uint64_t in_flight ABSL_GUARDED_BY(mu) = 0;
  absl::CondVar cv;    // Signalled when deadlines or stop change.
  std::thread thread;  // Started with the first profile patch.
};

PatchController::PatchController(jitcache_internal::PatchTarget* target) : target_(target) {}

// Detach stopped the timer already; stopping again is a no-op (and keeps a controller that was
// never detached from destroying a joinable thread).
PatchController::~PatchController() { StopProfileTimer(); }

void PatchController::Detach() {
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
}

const CompiledModel& PatchController::model() const { return target_->model(); }

const std::string& PatchController::namespace_name() const { return target_->namespace_name(); }

void PatchController::PublishLocked(void* const* table) {
  ++table_generation_;
  target_->Publish(table, table_generation_);
}

bool PatchController::WaitForExecutions(double seconds) const {
  return target_->WaitForExecutions(seconds);
}

absl::Status PatchController::LinkPatchObject(
    PreparedPatch* patch, std::string object_code,
    const std::vector<std::pair<int, std::string>>& symbols) {
  auto& jit = *target_->jit().jit;
  if (auto err = jit.addObjectFile(
          patch->tracker, llvm::MemoryBuffer::getMemBufferCopy(
                              object_code, absl::StrCat(namespace_name(), "/patch", patch->id)))) {
    return absl::InternalError(
        absl::StrCat("cannot add the patch's object code: ", ToString(std::move(err))));
  }
  for (const auto& [slot, unique] : symbols) {
    if (slot < 0 || static_cast<size_t>(slot) >= model().kernels.size()) {
      return absl::InvalidArgumentError(absl::StrCat("kernel slot ", slot, " is out of range"));
    }
    auto addr = jit.lookup(target_->dylib(), unique);  // Links it (no code generation).
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

std::vector<std::pair<std::string, uint64_t>> PatchController::ProbeCalls(
    const PreparedPatch& patch) {
  return patch.probe_calls;
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> PatchController::PrepareObjectPatch(
    std::string object_code, const std::vector<std::pair<int, std::string>>& symbols) {
  auto patch = std::make_shared<PreparedPatch>();
  patch->id = target_->jit().next_patch_id.fetch_add(1);
  patch->tracker = target_->dylib().createResourceTracker();
  if (absl::Status s = LinkPatchObject(patch.get(), std::move(object_code), symbols); !s.ok()) {
    return s;
  }
  std::vector<std::string> names;
  for (const auto& [slot, unique] : symbols) names.push_back(model().kernels[slot].symbol);
  absl::MutexLock lock(&patch_mu_);
  patch->base_generation = table_generation_;
  patch->table = BuildTable(layers_.size());
  for (const auto& [slot, code] : patch->slots) patch->table[slot] = code;
  patch->record.id = patch->id;
  patch->record.kind = kPatchKindIr;
  patch->record.functions = std::move(names);
  return patch;
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> PatchController::PrepareIrPatch(
    const std::string& ir_text, const std::vector<std::string>& functions,
    const std::vector<HostTensor>& probe_inputs, const PatchSandboxLimits& sandbox) {
  std::vector<std::vector<HostTensor>> sets;
  if (!probe_inputs.empty()) sets.push_back(probe_inputs);
  return PrepareIrPatchOnSets(ir_text, functions, sets, sandbox);
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> PatchController::PrepareIrPatchOnSets(
    const std::string& ir_text, const std::vector<std::string>& functions,
    const std::vector<std::vector<HostTensor>>& probe_sets, const PatchSandboxLimits& sandbox) {
  if (absl::Status s = CheckPatchIr(ir_text); !s.ok()) return s;
  return PrepareIrLayer(ir_text, functions, target_->jit().next_patch_id.fetch_add(1), kPatchKindIr,
                        nullptr, &probe_sets, sandbox);
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> PatchController::PrepareIrLayer(
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
  for (const KernelFunction& k : model().kernels) kernels[k.symbol] = k.index;
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
    return absl::InvalidArgumentError(absl::StrCat("patch defines no kernel of ", namespace_name(),
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
  auto& jit = *target_->jit().jit;
  module->setDataLayout(jit.getDataLayout());
  module->setTargetTriple(jit.getTargetTriple().str());

  auto patch = std::make_shared<PreparedPatch>();
  patch->id = id;
  patch->tracker = target_->dylib().createResourceTracker();
  if (profile_thunk != nullptr) {
    // The wrappers' thunk, per patch so layers never clash; freed with the patch's tracker.
    auto& es = jit.getExecutionSession();
    llvm::orc::SymbolMap thunk;
    thunk[es.intern(absl::StrCat("cuvil_profile_call.p", id))] = {
        llvm::orc::ExecutorAddr::fromPtr(profile_thunk),
        llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
    if (auto err =
            target_->dylib().define(llvm::orc::absoluteSymbols(std::move(thunk)), patch->tracker)) {
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
        if (absl::Status fits = target_->CheckRunInputs(set); !fits.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("the patch's probe input does not fit the model: ", fits.message()));
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
    *job.mutable_model() = EncodeModelHeader(model());
    job.set_object_code(model().object_code);
    job.set_weights_bytes(target_->weights_bytes());
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
    sandbox_job.weights = target_->weights_data();
    sandbox_job.weights_bytes = target_->weights_bytes();
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
            model().kernels[replaced[i].first].symbol,
            i < result->kernel_calls.size() ? result->kernel_calls[i] : 0);
      }
    }
    if (absl::Status s = LinkPatchObject(patch.get(), std::move(result->object_code), replaced);
        !s.ok()) {
      return s;
    }
  } else {
    absl::MutexLock compile_lock(&target_->jit().compile_mu);
    if (auto err = jit.addIRModule(
            patch->tracker, llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx)))) {
      return absl::InternalError(absl::StrCat("cannot add the patch: ", ToString(std::move(err))));
    }
    for (const auto& [slot, unique] : replaced) {
      auto addr =
          jit.lookup(target_->dylib(), unique);  // Compiles the patch (off the request path).
      if (!addr) {
        return absl::InvalidArgumentError(
            absl::StrCat("patch does not compile or link: ", ToString(addr.takeError())));
      }
      patch->slots.emplace_back(slot, addr->toPtr<void*>());
    }
  }
  SealOnTop(*patch, id, kind, names, ir_text);
  return patch;
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> PatchController::PrepareRecompilePatch(
    const CompiledModel& recompiled, const std::vector<std::string>& functions,
    const std::string& options_text) {
  // Same model: same kernels in the same slots, same tensors, same weights bytes (the recompiled
  // code addresses this version's weights).
  if (recompiled.kernels.size() != model().kernels.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the recompiled model has ", recompiled.kernels.size(), " kernels, the version has ",
        model().kernels.size(), " (options that change the kernel set cannot be patched in)"));
  }
  for (size_t i = 0; i < model().kernels.size(); ++i) {
    const KernelFunction& a = model().kernels[i];
    const KernelFunction& b = recompiled.kernels[i];
    if (a.index != b.index || a.symbol != b.symbol || a.signature != b.signature) {
      return absl::InvalidArgumentError(
          absl::StrCat("the recompiled model's kernel ", i, " is '", b.symbol, "' ", b.signature,
                       ", the version's is '", a.symbol, "' ", a.signature));
    }
  }
  auto& jit = *target_->jit().jit;
  auto& es = jit.getExecutionSession();
  auto weights = jit.lookup(target_->dylib(), kWeightsSymbol);
  if (!weights) return absl::InternalError(ToString(weights.takeError()));
  const size_t weight_bytes = recompiled.weights.size();
  // The tiers of one preparation share one blob: the same bytes need no comparing.
  const void* mine = weights->toPtr<const void*>();
  if (weight_bytes > target_->weights_bytes() ||
      (weight_bytes > 0 && mine != recompiled.weights.data() &&
       std::memcmp(mine, recompiled.weights.data(), weight_bytes) != 0)) {
    return absl::InvalidArgumentError("the recompiled model's weights differ from the version's");
  }
  std::map<std::string, int> kernels;
  for (const KernelFunction& k : model().kernels) kernels[k.symbol] = k.index;
  std::vector<std::string> names = functions;
  if (names.empty()) {
    for (const KernelFunction& k : model().kernels) names.push_back(k.symbol);
  }
  for (const std::string& name : names) {
    if (!kernels.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a kernel of ",
                                                     namespace_name(),
                                                     " (see ListFunctions for their names)"));
    }
  }
  const uint64_t id = target_->jit().next_patch_id.fetch_add(1);
  auto patch = std::make_shared<PreparedPatch>();
  patch->id = id;
  auto dylib = es.createJITDylib(absl::StrCat(namespace_name(), "/patch", id));
  if (!dylib) return absl::InternalError(ToString(dylib.takeError()));
  patch->session = &es;
  patch->own_dylib = &*dylib;
  dylib->addToLinkOrder(*target_->jit().runtime);
  llvm::orc::SymbolMap weights_symbol;
  weights_symbol[es.intern(kWeightsSymbol)] = {*weights, llvm::JITSymbolFlags::Exported};
  if (auto err = dylib->define(llvm::orc::absoluteSymbols(std::move(weights_symbol)))) {
    return absl::InternalError(ToString(std::move(err)));
  }
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(recompiled.object_code,
                                                     absl::StrCat(namespace_name(), "/patch", id));
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
  patch->object_code = recompiled.object_code;
  SealOnTop(*patch, id, kPatchKindRecompile, names, options_text);
  return patch;
}

absl::StatusOr<std::shared_ptr<PreparedPatch>> PatchController::PrepareProfilePatch(
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
                                                          " is still active on ", namespace_name(),
                                                          "; roll it back or wait for it to end"));
      }
    }
    std::unique_ptr<void*[]> current = BuildTable(layers_.size());
    std::set<std::string> want(functions.begin(), functions.end());
    for (const KernelFunction& k : model().kernels) {
      // By default the kernels cuvil_entry calls: a subgraph's kernels run inside their
      // control-flow kernel's time, so wrapping them too would count that time twice.
      if (functions.empty() ? k.parent < 0 : want.erase(k.symbol) > 0)
        wrapped.emplace_back(k.symbol, current[k.index]);
    }
    if (!want.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("not kernels of ", namespace_name(), ": ", absl::StrJoin(want, ", ")));
    }
    generation = table_generation_;
  }
  if (wrapped.empty()) return absl::InvalidArgumentError("the version has no kernels to profile");
  auto profiler = std::make_shared<KernelProfiler>(wrapped);
  const uint64_t id = target_->jit().next_patch_id.fetch_add(1);
  auto patch = PrepareIrLayer(profiler->WrapperIr(absl::StrCat("cuvil_profile_call.p", id)), {}, id,
                              kPatchKindProfile, KernelProfiler::Thunk(), nullptr,
                              PatchSandboxLimits{0, /*enabled=*/false});
  if (!patch.ok()) return patch.status();
  if ((*patch)->base_generation != generation) {
    // The wrappers call the code of an older table: ABORTED, which the admin call retries (a
    // tier swap or rollback moved the table, as a commit's own check would find).
    return absl::AbortedError(
        "the version was patched or rolled back while the profile was prepared; try again");
  }
  (*patch)->profiler = std::move(profiler);
  (*patch)->profile_seconds = seconds;
  (*patch)->record.source = absl::StrCat("seconds=", seconds);
  return patch;
}

void PatchController::SealOnTop(PreparedPatch& patch, uint64_t id, const std::string& kind,
                                const std::vector<std::string>& functions,
                                const std::string& source) {
  absl::MutexLock lock(&patch_mu_);
  patch.base_generation = table_generation_;
  patch.table = BuildTable(layers_.size());
  for (const auto& [slot, code] : patch.slots) patch.table[slot] = code;
  patch.record.id = id;
  patch.record.kind = kind;
  patch.record.functions = functions;
  patch.record.source = source;
}

std::unique_ptr<void*[]> PatchController::BuildTable(size_t layer_count) const {
  const size_t n = model().kernels.size();
  auto table = std::make_unique<void*[]>(std::max<size_t>(n, 1));
  // Base slots may be redirected in place by tools: read them atomically.
  void** const base = target_->base_table();
  for (size_t i = 0; i < n; ++i) table[i] = __atomic_load_n(&base[i], __ATOMIC_ACQUIRE);
  for (size_t l = 0; l < layer_count && l < layers_.size(); ++l) {
    for (const auto& [slot, code] : layers_[l]->patch->slots) table[slot] = code;
  }
  return table;
}

void PatchController::RebuildFrom(size_t from, std::vector<std::unique_ptr<void*[]>>* retired) {
  for (size_t j = from; j < layers_.size(); ++j) {
    if (layers_[j]->patch->table != nullptr)
      retired->push_back(std::move(layers_[j]->patch->table));
    layers_[j]->patch->table = BuildTable(j + 1);
  }
  PublishLocked(layers_.empty() ? target_->base_table() : layers_.back()->patch->table.get());
}

absl::StatusOr<uint64_t> PatchController::CommitLocked(std::shared_ptr<PreparedPatch> patch,
                                                       size_t at) {
  if (frozen_) {
    return absl::AbortedError(absl::StrCat(
        namespace_name(), " takes no more patches: ", frozen_reason_, "; apply the patch again"));
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
  layer_count_.fetch_add(1, std::memory_order_relaxed);
  if (at == layers_.size()) {
    layers_.push_back(std::move(layer));
    PublishLocked(layers_.back()->patch->table.get());
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

absl::StatusOr<uint64_t> PatchController::CommitPatch(std::shared_ptr<PreparedPatch> patch,
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

absl::StatusOr<uint64_t> PatchController::CommitBasePatch(std::shared_ptr<PreparedPatch> patch,
                                                          std::string author) {
  if (patch == nullptr) return absl::InvalidArgumentError("no patch");
  if (patch->profiler != nullptr || patch->slots.size() != model().kernels.size()) {
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

std::vector<PatchRecord> PatchController::Freeze(std::string reason) {
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

void PatchController::Unfreeze() {
  absl::MutexLock lock(&patch_mu_);
  frozen_ = false;
  frozen_reason_.clear();
}

absl::StatusOr<uint64_t> PatchController::CommitRestoredPatch(std::shared_ptr<PreparedPatch> patch,
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
        return absl::AlreadyExistsError(absl::StrCat(
            "patch ", original.id, " is already in the history of ", namespace_name()));
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
  auto& next = target_->jit().next_patch_id;
  uint64_t cur = next.load();
  while (cur <= original.id && !next.compare_exchange_weak(cur, original.id + 1)) {
  }
  NotifyChange();
  return id;
}

absl::StatusOr<size_t> PatchController::RollbackLayer(uint64_t id) const {
  auto rec = std::find_if(history_.begin(), history_.end(),
                          [&](const PatchRecord& r) { return r.id == id; });
  if (rec == history_.end()) {
    return absl::NotFoundError(absl::StrCat("no patch ", id, " on ", namespace_name()));
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

absl::StatusOr<PatchController::RollbackTrial> PatchController::TryRollback(uint64_t id) const {
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

absl::Status PatchController::Rollback(uint64_t id, double drain_seconds,
                                       const RollbackTrial* trial) {
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
    layer_count_.fetch_sub(1, std::memory_order_relaxed);
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
    const int64_t stuck = target_->running_executions();
    retained_.push_back(std::move(victim));
    for (auto& t : retired) {
      auto holder = std::make_shared<PreparedPatch>();
      holder->table = std::move(t);
      retained_.push_back(std::move(holder));
    }
    retired.clear();
    result = absl::DeadlineExceededError(
        absl::StrCat("patch ", id, " is rolled back (new executions no longer run it), but ", stuck,
                     " execution(s) of ", namespace_name(), " are still running after ",
                     drain_seconds, " s; its code is kept until they return"));
  }
  victim.reset();  // Removes its code and table (when drained).
  retired.clear();
  // The removed code's symbol names stay interned until dead entries are cleared.
  target_->jit().jit->getExecutionSession().getSymbolStringPool()->clearDeadEntries();
  NotifyChange();
  return result;
}

bool PatchController::has_stuck_code() const {
  absl::MutexLock lock(&retire_mu_);
  return !retained_.empty();
}

std::vector<PatchRecord> PatchController::Patches() const {
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

absl::StatusOr<std::vector<KernelProfile>> PatchController::ProfileReport(uint64_t id) const {
  absl::MutexLock lock(&patch_mu_);
  for (const auto& layer : layers_) {
    if (layer->patch->id == id && layer->patch->profiler) return layer->patch->profiler->Report();
  }
  for (const PatchRecord& r : history_) {
    if (r.id == id && r.kind == kPatchKindProfile) return r.profile;
  }
  return absl::NotFoundError(
      absl::StrCat("patch ", id, " is not a profile patch of ", namespace_name()));
}

absl::StatusOr<std::string> PatchController::PatchObjectCode(uint64_t id) const {
  absl::MutexLock lock(&patch_mu_);
  for (const auto& layer : layers_) {
    if (layer->patch->id == id && !layer->patch->object_code.empty()) {
      return layer->patch->object_code;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("patch ", id, " is not an active recompile patch of ", namespace_name()));
}

bool PatchController::WaitForProfileEnd(uint64_t id, double timeout_seconds) const {
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

void PatchController::set_change_listener(std::function<void()> listener) {
  change_listener_ = std::move(listener);
}

void PatchController::set_auto_rollback_listener(AutoRollbackListener listener) {
  auto_rollback_listener_ = std::move(listener);
}

bool PatchController::IsActivePatch(uint64_t id) const {
  absl::MutexLock lock(&patch_mu_);
  for (const PatchRecord& r : history_) {
    if (r.id == id) return r.active;
  }
  return false;
}

uint64_t PatchController::change_count() const {
  return change_count_.load(std::memory_order_relaxed);
}

void PatchController::NotifyChange() {
  if (change_listener_) change_listener_();
}

void PatchController::StartProfileTimer(uint64_t id, double seconds) {
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

void PatchController::StopProfileTimer() {
  if (profile_timer_ == nullptr) return;
  {
    absl::MutexLock lock(&profile_timer_->mu);
    profile_timer_->stop = true;
    profile_timer_->cv.Signal();
  }
  if (profile_timer_->thread.joinable()) profile_timer_->thread.join();
}

}  // namespace cuvil
