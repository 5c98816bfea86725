#include "cuvil/compiler/aot_writer.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "codegen/llvm_targets.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/ObjCopy/ConfigManager.h"
#include "llvm/ObjCopy/ObjCopy.h"
#include "llvm/Object/Archive.h"
#include "llvm/Object/ArchiveWriter.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

namespace cuvil {
namespace {

std::string ToString(llvm::Error err) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << err;
  return out;
}

bool IsCIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// The API symbols a library exports under their own names.
std::set<std::string> ApiSymbols(const std::string& name) {
  return {name + "_run", name + "_arena_bytes", name + "_tier", name + "_inputs",
          name + "_outputs"};
}

// Whether every word of `s` is a constant or a monomial in the batch (what the library evaluates).
bool MonomialWords(const ScratchSite& s) {
  return std::all_of(s.words.begin(), s.words.end(),
                     [](const SymDim& d) { return d.IsMonomial(); });
}

// Whether NAME_run of `model` takes all its scratch from the arena: no site is unbounded or left
// out of the library's table.
bool ScratchIsBounded(const CompiledModel& model) {
  return !model.unbounded_scratch &&
         std::all_of(model.scratch_sites.begin(), model.scratch_sites.end(), MonomialWords);
}

// One object file going into the archive.
struct Member {
  std::string name;
  std::string bytes;
};

// Symbol names of body `tier` in a library of several bodies (TierSymbol("cuvil_entry", 1) =
// "cuvil_entry__t1"); a one-body library keeps the compiler's names.
std::string TierSymbol(const std::string& symbol, size_t tier) {
  return absl::StrCat(symbol, "__t", tier);
}

// The glue object: the weights (as cuvil_weights; with several bodies one cuvil_weights__t<i> per
// distinct blob, i its first body), the tensor descriptors, one constant cuvil_aot_model per body
// (layout: runtime/aot/aot_abi.h) and the API functions that forward to the runtime's
// cuvil_aot_run / cuvil_aot_arena_bytes with the body cuvil_aot_cpu_level() selects.
// weights_owner[i] is the first body whose weights equal body i's.
absl::StatusOr<std::string> EmitGlue(const std::vector<AotTier>& tiers,
                                     const std::vector<size_t>& weights_owner,
                                     const std::string& name, const std::string& target_triple) {
  const CompiledModel& model = *tiers[0].model;
  const bool several = tiers.size() > 1;
  codegen::RegisterAllLlvmTargets();
  const std::string triple = target_triple.empty() ? llvm::sys::getProcessTriple()
                                                   : llvm::Triple::normalize(target_triple);
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) return absl::InternalError(absl::StrCat("LLVM target lookup: ", error));
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, "generic", "", llvm::TargetOptions(),
      llvm::Triple(triple).isWasm() || llvm::Triple(triple).getOS() == llvm::Triple::UnknownOS
          ? llvm::Reloc::Static
          : llvm::Reloc::PIC_,
      llvm::CodeModel::Small, llvm::CodeGenOptLevel::Default));
  if (tm == nullptr) return absl::InternalError(absl::StrCat("LLVM cannot target ", triple));
  llvm::LLVMContext ctx;
  llvm::Module module(name + "_glue", ctx);
  module.setTargetTriple(triple);
  module.setDataLayout(tm->createDataLayout());
  const llvm::DataLayout& dl = module.getDataLayout();
  llvm::Type* ptr = llvm::PointerType::getUnqual(ctx);
  llvm::Type* i8 = llvm::Type::getInt8Ty(ctx);
  llvm::Type* i32 = llvm::Type::getInt32Ty(ctx);
  llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);
  llvm::Type* size_ty = dl.getIntPtrType(ctx);
  // The structs cuvil_aot_run reads, from their one declaration (the runtime checks its C side
  // against the same list on each target).
  std::map<std::string, llvm::StructType*, std::less<>> structs;
  {
    llvm::Type* const I32 = i32;
    llvm::Type* const I64 = i64;
    llvm::Type* const P = ptr;
    std::vector<llvm::Type*> fields;
#define CUVIL_AOT_FIELD(f, kind, ctype, doc) fields.push_back(kind);
#define CUVIL_AOT_STRUCT(s, visibility, doc, list) \
  fields.clear();                                  \
  list structs[#s] = llvm::StructType::create(ctx, fields, #s);
#include "cuvil/runtime/aot_layout.def"
#undef CUVIL_AOT_STRUCT
#undef CUVIL_AOT_FIELD
  }
  auto* dim_ty = structs.at("cuvil_aot_dim");
  auto* tensor_ty = structs.at("cuvil_aot_tensor");
  auto* model_ty = structs.at("cuvil_aot_model");
  auto* site_ty = structs.at("cuvil_aot_scratch_site");
  auto dim_constant = [&](const SymDim& d) {
    return llvm::ConstantStruct::get(dim_ty,
                                     {llvm::ConstantInt::get(i64, d.coef()),
                                      llvm::ConstantInt::get(i32, d.IsStatic() ? 0 : d.power())});
  };

  // The weights, 64-byte aligned like the JIT engine's page-aligned copy needs at least.
  for (size_t t = 0; t < tiers.size(); ++t) {
    if (weights_owner[t] != t) continue;
    const WeightsBlob& blob = tiers[t].model->weights;
    const size_t wbytes = std::max<size_t>(blob.size(), 1);
    llvm::Constant* wdata =
        blob.empty() ? static_cast<llvm::Constant*>(
                           llvm::ConstantAggregateZero::get(llvm::ArrayType::get(i8, wbytes)))
                     : llvm::ConstantDataArray::getRaw(
                           llvm::StringRef(reinterpret_cast<const char*>(blob.data()), blob.size()),
                           blob.size(), i8);
    auto* weights = new llvm::GlobalVariable(
        module, wdata->getType(), /*isConstant=*/true, llvm::GlobalValue::ExternalLinkage, wdata,
        several ? TierSymbol(kWeightsSymbol, t) : std::string(kWeightsSymbol));
    weights->setAlignment(llvm::Align(64));
  }

  auto tensors = [&](const std::vector<TensorSignature>& sigs, const std::string& kind) {
    std::vector<llvm::Constant*> descs;
    for (size_t i = 0; i < sigs.size(); ++i) {
      const TensorSignature& s = sigs[i];
      std::vector<llvm::Constant*> dims;
      for (const SymDim& d : s.shape) dims.push_back(dim_constant(d));
      auto* dims_ty = llvm::ArrayType::get(dim_ty, dims.size());
      auto* dims_gv = new llvm::GlobalVariable(
          module, dims_ty, true, llvm::GlobalValue::PrivateLinkage,
          llvm::ConstantArray::get(dims_ty, dims), absl::StrCat(name, "_", kind, i, "_dims"));
      llvm::Constant* str = llvm::ConstantDataArray::getString(ctx, s.name);
      auto* name_gv =
          new llvm::GlobalVariable(module, str->getType(), true, llvm::GlobalValue::PrivateLinkage,
                                   str, absl::StrCat(name, "_", kind, i, "_name"));
      descs.push_back(llvm::ConstantStruct::get(
          tensor_ty, {name_gv, llvm::ConstantInt::get(i32, static_cast<int32_t>(s.dtype)),
                      llvm::ConstantInt::get(i32, DTypeSize(s.dtype)),
                      llvm::ConstantInt::get(i32, static_cast<int32_t>(s.shape.size())), dims_gv}));
    }
    auto* arr_ty = llvm::ArrayType::get(tensor_ty, descs.size());
    return new llvm::GlobalVariable(module, arr_ty, true, llvm::GlobalValue::ExternalLinkage,
                                    llvm::ConstantArray::get(arr_ty, descs),
                                    absl::StrCat(name, "_", kind));
  };
  llvm::GlobalVariable* inputs = tensors(model.inputs, "inputs");
  llvm::GlobalVariable* outputs = tensors(model.outputs, "outputs");

  // A body's scratch sites (see cuvil_aot_scratch_site) grouped by kernel, and their count. A
  // site whose size is no monomial in the batch is left out (ScratchIsBounded says so).
  auto scratch_sites = [&](const CompiledModel& body, size_t t) {
    std::vector<ScratchSite> sites;
    for (const ScratchSite& s : body.scratch_sites) {
      if (MonomialWords(s)) sites.push_back(s);
    }
    std::stable_sort(sites.begin(), sites.end(), [](const ScratchSite& a, const ScratchSite& b) {
      return a.kernel < b.kernel;
    });
    std::vector<llvm::Constant*> entries;
    for (size_t i = 0; i < sites.size(); ++i) {
      std::vector<llvm::Constant*> words;
      for (const SymDim& d : sites[i].words) words.push_back(dim_constant(d));
      auto* words_ty = llvm::ArrayType::get(dim_ty, words.size());
      auto* words_gv = new llvm::GlobalVariable(
          module, words_ty, true, llvm::GlobalValue::PrivateLinkage,
          llvm::ConstantArray::get(words_ty, words), absl::StrCat(name, "_scratch", t, "_", i));
      entries.push_back(llvm::ConstantStruct::get(
          site_ty,
          {llvm::ConstantInt::get(i32, sites[i].kind), llvm::ConstantInt::get(i32, sites[i].kernel),
           llvm::ConstantInt::get(i32, static_cast<int32_t>(words.size())), words_gv}));
    }
    auto* arr_ty = llvm::ArrayType::get(site_ty, entries.size());
    auto* table = new llvm::GlobalVariable(module, arr_ty, true, llvm::GlobalValue::PrivateLinkage,
                                           llvm::ConstantArray::get(arr_ty, entries),
                                           absl::StrCat(name, "_scratch_sites", t));
    return std::pair<llvm::Constant*, int32_t>(table, static_cast<int32_t>(entries.size()));
  };

  auto* entry_ty = llvm::FunctionType::get(i32, {ptr, ptr, i64, ptr, ptr}, false);
  std::vector<llvm::Constant*> descs, tier_names;
  for (size_t t = 0; t < tiers.size(); ++t) {
    const CompiledModel& body = *tiers[t].model;
    const auto [sites, num_sites] = scratch_sites(body, t);
    llvm::Function* entry = llvm::Function::Create(
        entry_ty, llvm::GlobalValue::ExternalLinkage,
        several ? TierSymbol(kEntrySymbol, t) : std::string(kEntrySymbol), module);
    descs.push_back(new llvm::GlobalVariable(
        module, model_ty, true, llvm::GlobalValue::InternalLinkage,
        llvm::ConstantStruct::get(
            model_ty, {llvm::ConstantInt::get(i64, body.arena.per_batch_bytes),
                       llvm::ConstantInt::get(i64, body.arena.fixed_bytes), entry,
                       llvm::ConstantInt::get(i32, static_cast<int32_t>(body.inputs.size())),
                       llvm::ConstantInt::get(i32, static_cast<int32_t>(body.outputs.size())),
                       inputs, outputs, llvm::ConstantInt::get(i32, num_sites), sites}),
        absl::StrCat(name, "_model", t)));
    llvm::Constant* str = llvm::ConstantDataArray::getString(ctx, tiers[t].cpu);
    tier_names.push_back(new llvm::GlobalVariable(module, str->getType(), true,
                                                  llvm::GlobalValue::PrivateLinkage, str,
                                                  absl::StrCat(name, "_tier", t, "_name")));
  }
  // The body this CPU runs: the first whose min_level cuvil_aot_cpu_level() reaches.
  llvm::FunctionCallee cpu_level =
      module.getOrInsertFunction("cuvil_aot_cpu_level", llvm::FunctionType::get(i32, false));
  auto pick = [&](llvm::IRBuilder<>& b, const std::vector<llvm::Constant*>& per_tier) {
    if (!several) return static_cast<llvm::Value*>(per_tier[0]);
    llvm::Value* level = b.CreateCall(cpu_level);
    llvm::Value* chosen = per_tier.back();
    for (size_t t = tiers.size() - 1; t-- > 0;) {
      chosen =
          b.CreateSelect(b.CreateICmpSGE(level, llvm::ConstantInt::get(i32, tiers[t].min_level)),
                         per_tier[t], chosen);
    }
    return chosen;
  };

  // size_t NAME_arena_bytes(int64_t batch)
  {
    auto* rt_ty = llvm::FunctionType::get(size_ty, {ptr, i64}, false);
    llvm::FunctionCallee rt = module.getOrInsertFunction("cuvil_aot_arena_bytes", rt_ty);
    auto* fn =
        llvm::Function::Create(llvm::FunctionType::get(size_ty, {i64}, false),
                               llvm::GlobalValue::ExternalLinkage, name + "_arena_bytes", module);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
    b.CreateRet(b.CreateCall(rt, {pick(b, descs), fn->getArg(0)}));
  }
  // int NAME_run(const void* const* inputs, void* const* outputs, int64_t batch, void* arena)
  {
    auto* rt_ty = llvm::FunctionType::get(i32, {ptr, ptr, ptr, i64, ptr}, false);
    llvm::FunctionCallee rt = module.getOrInsertFunction("cuvil_aot_run", rt_ty);
    auto* run_ty = llvm::FunctionType::get(i32, {ptr, ptr, i64, ptr}, false);
    auto* fn =
        llvm::Function::Create(run_ty, llvm::GlobalValue::ExternalLinkage, name + "_run", module);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
    b.CreateRet(b.CreateCall(
        rt, {pick(b, descs), fn->getArg(0), fn->getArg(1), fn->getArg(2), fn->getArg(3)}));
  }
  // const char* NAME_tier(void)
  {
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(ptr, false),
                                      llvm::GlobalValue::ExternalLinkage, name + "_tier", module);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
    b.CreateRet(pick(b, tier_names));
  }

  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    return absl::InternalError("LLVM cannot emit the AOT glue object");
  }
  pm.run(module);
  return std::string(buffer.begin(), buffer.end());
}

absl::StatusOr<std::vector<Member>> ReadRuntime(const std::string& path) {
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf) {
    return absl::NotFoundError(absl::StrCat("cannot read the AOT runtime ", path, ": ",
                                            buf.getError().message(),
                                            " (build target cuvil_aot_runtime)"));
  }
  auto archive = llvm::object::Archive::create((*buf)->getMemBufferRef());
  if (!archive) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not an archive: ", ToString(archive.takeError())));
  }
  std::vector<Member> members;
  llvm::Error err = llvm::Error::success();
  for (const auto& child : (*archive)->children(err)) {
    auto name = child.getName();
    auto data = child.getBuffer();
    if (!name || !data) {
      llvm::consumeError(name.takeError());
      llvm::consumeError(data.takeError());
      return absl::InvalidArgumentError(absl::StrCat("damaged archive member in ", path));
    }
    members.push_back({absl::StrCat("rt_", name->str()), data->str()});
  }
  if (err) return absl::InvalidArgumentError(absl::StrCat(path, ": ", ToString(std::move(err))));
  return members;
}

// Reads a relocatable WebAssembly object's LEB128 fields; every read past the end sets `ok`
// false and returns 0 / an empty string. Thread-compatible.
class WasmReader {
 public:
  // Reads `bytes` (not owned; must outlive the reader) from offset `pos`.
  WasmReader(std::string_view bytes, size_t pos) : bytes_(bytes), pos_(pos) {}

  // An unsigned LEB128 number.
  uint64_t Uleb() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) break;
      const uint8_t byte = static_cast<uint8_t>(bytes_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    ok_ = false;
    return 0;
  }
  // One byte.
  uint8_t Byte() {
    if (pos_ >= bytes_.size()) {
      ok_ = false;
      return 0;
    }
    return static_cast<uint8_t>(bytes_[pos_++]);
  }
  // The next `n` bytes (a view into the input).
  std::string_view Bytes(uint64_t n) {
    if (n > bytes_.size() - pos_) {
      ok_ = false;
      pos_ = bytes_.size();
      return {};
    }
    std::string_view out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  // A length-prefixed name.
  std::string_view Name() { return Bytes(Uleb()); }
  // The bytes from `start` to the current position.
  std::string_view Since(size_t start) const { return bytes_.substr(start, pos_ - start); }
  size_t pos() const { return pos_; }
  // True once the whole input is read.
  bool done() const { return pos_ >= bytes_.size(); }
  // False after any read past the end or an overlong LEB128.
  bool ok() const { return ok_; }

 private:
  std::string_view bytes_;
  size_t pos_;
  bool ok_ = true;
};

void AppendUleb(std::string& out, uint64_t v) {
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    out.push_back(static_cast<char>(v != 0 ? byte | 0x80 : byte));
  } while (v != 0);
}

void AppendName(std::string& out, std::string_view name,
                const std::map<std::string, std::string, std::less<>>& renames) {
  auto it = renames.find(name);
  if (it != renames.end()) name = it->second;
  AppendUleb(out, name.size());
  out.append(name);
}

// The import section with the renamed fields (an undefined symbol without an explicit name is
// named by its import's field).
std::optional<std::string> RenameWasmImports(
    std::string_view body, const std::map<std::string, std::string, std::less<>>& renames) {
  WasmReader r(body, 0);
  std::string out;
  const uint64_t count = r.Uleb();
  AppendUleb(out, count);
  for (uint64_t i = 0; i < count && r.ok(); ++i) {
    const std::string_view module = r.Name();
    AppendUleb(out, module.size());
    out.append(module);
    AppendName(out, r.Name(), renames);
    const size_t start = r.pos();
    switch (r.Byte()) {
      case 0:  // function: type index
        r.Uleb();
        break;
      case 1: {  // table: reference type, limits
        r.Byte();
        const uint64_t flags = r.Uleb();
        r.Uleb();
        if (flags & 1) r.Uleb();
        break;
      }
      case 2: {  // memory: limits
        const uint64_t flags = r.Uleb();
        r.Uleb();
        if (flags & 1) r.Uleb();
        break;
      }
      case 3:  // global: value type, mutability
        r.Byte();
        r.Byte();
        break;
      case 4:  // tag: attribute, type index
        r.Byte();
        r.Uleb();
        break;
      default:
        return std::nullopt;
    }
    out.append(r.Since(start));
  }
  if (!r.ok()) return std::nullopt;
  out.append(r.Bytes(body.size() - r.pos()));
  return out;
}

// The "linking" custom section's payload (after its name) with the symbol table's names renamed.
std::optional<std::string> RenameWasmLinking(
    std::string_view payload, const std::map<std::string, std::string, std::less<>>& renames) {
  constexpr uint8_t kSymbolTable = 8;
  constexpr uint64_t kUndefined = 0x10, kExplicitName = 0x40;
  WasmReader r(payload, 0);
  std::string out;
  AppendUleb(out, r.Uleb());  // version
  while (!r.done() && r.ok()) {
    const uint8_t type = r.Byte();
    const std::string_view sub = r.Bytes(r.Uleb());
    std::string body;
    if (type != kSymbolTable) {
      body.assign(sub);
    } else {
      WasmReader s(sub, 0);
      const uint64_t count = s.Uleb();
      AppendUleb(body, count);
      for (uint64_t i = 0; i < count && s.ok(); ++i) {
        const size_t start = s.pos();
        const uint8_t kind = s.Byte();
        const uint64_t flags = s.Uleb();
        body.append(s.Since(start));
        const bool undefined = (flags & kUndefined) != 0;
        switch (kind) {
          case 0:  // function
          case 2:  // global
          case 4:  // tag
          case 5:  // table
            AppendUleb(body, s.Uleb());
            if (!undefined || (flags & kExplicitName) != 0) AppendName(body, s.Name(), renames);
            break;
          case 1:  // data: name, then segment, offset and size when defined
            AppendName(body, s.Name(), renames);
            if (!undefined) {
              for (int f = 0; f < 3; ++f) AppendUleb(body, s.Uleb());
            }
            break;
          case 3:  // section
            AppendUleb(body, s.Uleb());
            break;
          default:
            return std::nullopt;
        }
      }
      if (!s.ok() || !s.done()) return std::nullopt;
    }
    out.push_back(static_cast<char>(type));
    AppendUleb(out, body.size());
    out.append(body);
  }
  if (!r.ok()) return std::nullopt;
  return out;
}

// A relocatable WebAssembly object with its symbols renamed (llvm-objcopy renames ELF symbols but
// not wasm ones): the symbol table in the "linking" section and the import fields that name
// undefined symbols. Relocations refer to symbols by index, so nothing else changes.
absl::Status RenameWasmSymbols(Member& m,
                               const std::map<std::string, std::string, std::less<>>& renames) {
  const std::string_view in = m.bytes;
  if (in.size() < 8 || in.substr(0, 4) != std::string_view("\0asm", 4)) {
    return absl::InternalError(absl::StrCat(m.name, " is not a WebAssembly object"));
  }
  constexpr uint8_t kCustom = 0, kImport = 2;
  std::string out(in.substr(0, 8));
  WasmReader r(in, 8);
  while (!r.done() && r.ok()) {
    const uint8_t id = r.Byte();
    const std::string_view body = r.Bytes(r.Uleb());
    std::optional<std::string> rewritten = std::string(body);
    if (id == kImport) {
      rewritten = RenameWasmImports(body, renames);
    } else if (id == kCustom) {
      WasmReader c(body, 0);
      if (c.Name() == "linking" && c.ok()) {
        const size_t payload = c.pos();
        rewritten = RenameWasmLinking(body.substr(payload), renames);
        if (rewritten) rewritten->insert(0, body.substr(0, payload));
      }
    }
    if (!rewritten) return absl::InternalError(absl::StrCat("cannot parse wasm object ", m.name));
    out.push_back(static_cast<char>(id));
    AppendUleb(out, rewritten->size());
    out.append(*rewritten);
  }
  if (!r.ok()) return absl::InternalError(absl::StrCat("truncated wasm object ", m.name));
  m.bytes = std::move(out);
  return absl::OkStatus();
}

// The global symbols `m` defines and the ones it leaves undefined, added to the sets.
absl::Status GlobalSymbols(const Member& m, std::set<std::string>* defined,
                           std::set<std::string>* undefined) {
  auto obj = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(m.bytes, m.name));
  if (!obj) {
    return absl::InternalError(
        absl::StrCat("cannot read object ", m.name, ": ", ToString(obj.takeError())));
  }
  for (const llvm::object::SymbolRef& sym : (*obj)->symbols()) {
    auto flags = sym.getFlags();
    auto sym_name = sym.getName();
    if (!flags || !sym_name) {
      llvm::consumeError(flags.takeError());
      llvm::consumeError(sym_name.takeError());
      return absl::InternalError(absl::StrCat("cannot read the symbols of ", m.name));
    }
    if ((*flags & llvm::object::SymbolRef::SF_Global) == 0 || sym_name->empty()) continue;
    ((*flags & llvm::object::SymbolRef::SF_Undefined) ? undefined : defined)
        ->insert(sym_name->str());
  }
  return absl::OkStatus();
}

// Rewrites the ELF (or other non-wasm) object `m` with `config`'s renames.
absl::Status RunObjcopy(const llvm::objcopy::ConfigManager& config, Member& m) {
  auto bin = llvm::object::createBinary(llvm::MemoryBufferRef(m.bytes, m.name));
  if (!bin) return absl::InternalError(ToString(bin.takeError()));
  llvm::SmallVector<char, 0> out;
  llvm::raw_svector_ostream os(out);
  if (llvm::Error err = llvm::objcopy::executeObjcopyOnBinary(config, **bin, os)) {
    return absl::InternalError(
        absl::StrCat("renaming the symbols of ", m.name, ": ", ToString(std::move(err))));
  }
  m.bytes.assign(out.begin(), out.end());
  return absl::OkStatus();
}

// Gives body `tier`'s global symbols (defined ones, and its reference to the weights) the names
// TierSymbol gives them, so several bodies of one model link into one library; the weights
// reference goes to body `weights_owner`'s blob. ELF objects only.
absl::Status RenameTierSymbols(Member& m, size_t tier, size_t weights_owner) {
  std::set<std::string> defined, undefined;
  if (auto s = GlobalSymbols(m, &defined, &undefined); !s.ok()) return s;
  std::vector<std::string> renamed;  // Owns the new names the config refers to.
  renamed.reserve(defined.size() + 1);
  llvm::objcopy::ConfigManager config;
  for (const std::string& sym : defined) {
    renamed.push_back(TierSymbol(sym, tier));
    config.Common.SymbolsToRename[sym] = renamed.back();
  }
  if (undefined.count(kWeightsSymbol) != 0) {
    renamed.push_back(TierSymbol(kWeightsSymbol, weights_owner));
    config.Common.SymbolsToRename[kWeightsSymbol] = renamed.back();
  }
  return RunObjcopy(config, m);
}

// Gives every symbol that some member defines (except the API) the name NAME__symbol in every
// member, so the library's internals cannot clash with the program or another library. Fills
// `external` with the symbols left undefined (the C library's and libm's).
absl::Status PrivatiseSymbols(std::vector<Member>& members, const std::string& name,
                              std::vector<std::string>* external) {
  const std::set<std::string> api = ApiSymbols(name);
  std::set<std::string> defined, undefined;
  for (const Member& m : members) {
    if (auto s = GlobalSymbols(m, &defined, &undefined); !s.ok()) return s;
  }
  for (const std::string& api_name : api) {
    if (defined.count(api_name) == 0) {
      return absl::InternalError(absl::StrCat("the AOT glue does not define ", api_name));
    }
  }
  std::vector<std::string> renamed;  // Owns the new names the config refers to.
  renamed.reserve(defined.size());
  llvm::objcopy::ConfigManager config;
  std::map<std::string, std::string, std::less<>> wasm_renames;
  for (const std::string& sym : defined) {
    if (api.count(sym) != 0) continue;
    renamed.push_back(absl::StrCat(name, "__", sym));
    config.Common.SymbolsToRename[sym] = renamed.back();
    wasm_renames[sym] = renamed.back();
  }
  external->clear();
  for (const std::string& sym : undefined) {
    if (defined.count(sym) == 0) external->push_back(sym);
  }
  for (Member& m : members) {
    auto bin = llvm::object::createBinary(llvm::MemoryBufferRef(m.bytes, m.name));
    if (!bin) return absl::InternalError(ToString(bin.takeError()));
    const bool wasm = (*bin)->isWasm();
    if (auto s = wasm ? RenameWasmSymbols(m, wasm_renames) : RunObjcopy(config, m); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

std::string DimString(const SymDim& d) {
  if (d.IsStatic()) return absl::StrCat(d.coef());
  std::string b = d.power() == 1 ? "batch" : absl::StrCat("batch^", d.power());
  return d.coef() == 1 ? b : absl::StrCat(d.coef(), "*", b);
}

// `text` made safe inside a C block comment: a "*/" (from a tensor name or a path) would end it.
std::string CommentSafe(const std::string& text) {
  return absl::StrReplaceAll(text, {{"*/", "* /"}});
}

}  // namespace

namespace {

// `text` as a C block comment whose "/*" is at column `column`, in lines of at most
// kCommentWidth columns where the words allow; a continuation line starts with `indent` and a
// space.
constexpr size_t kCommentWidth = 88;
std::string BlockComment(const std::string& text, size_t column, const std::string& indent) {
  std::string out = "/*";
  size_t col = column + 2;
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && col + 1 + word.size() > kCommentWidth) {
      absl::StrAppend(&out, "\n", indent);
      col = indent.size();
    }
    absl::StrAppend(&out, " ", word);
    col += 1 + word.size();
    line_empty = false;
  }
  return out + " */";
}

// aot_layout.def's PUBLIC structs (what programs read: cuvil_aot_dim, cuvil_aot_tensor) as C
// typedefs, each under its doc, with its fields' docs as comments aligned after them.
std::string PublicStructsText() {
  struct Field {
    std::string name, ctype, doc;
  };
  struct Struct {
    std::string name, visibility, doc;
    std::vector<Field> fields;
  };
  const Struct structs[] = {
#define CUVIL_AOT_FIELD(f, kind, ctype, doc) Field{#f, #ctype, doc},
#define CUVIL_AOT_STRUCT(s, visibility, doc, fields) Struct{#s, #visibility, doc, {fields}},
#include "cuvil/runtime/aot_layout.def"
#undef CUVIL_AOT_STRUCT
#undef CUVIL_AOT_FIELD
  };
  std::string out;
  for (const Struct& s : structs) {
    if (s.visibility != "PUBLIC") continue;
    std::vector<std::string> decls;
    size_t width = 0;  // the widest declaration with a comment after it
    for (const Field& f : s.fields) {
      decls.push_back(absl::StrCat("  ", f.ctype, " ", f.name, ";"));
      if (!f.doc.empty()) width = std::max(width, decls.back().size());
    }
    absl::StrAppend(&out, BlockComment(s.doc, 0, " *"), "\ntypedef struct ", s.name, " {\n");
    for (size_t i = 0; i < s.fields.size(); ++i) {
      out += decls[i];
      if (!s.fields[i].doc.empty()) {
        out.append(width + 1 - decls[i].size(), ' ');
        out += BlockComment(s.fields[i].doc, width + 1, std::string(width + 3, ' '));
      }
      out += '\n';
    }
    absl::StrAppend(&out, "} ", s.name, ";\n\n");
  }
  return out;
}

// NAME.h for a library of `tiers` (one or several bodies of one model).
std::string HeaderText(const std::vector<AotTier>& tiers, const std::string& name,
                       const std::string& source, const std::string& target_triple) {
  const CompiledModel& model = *tiers[0].model;
  int64_t per_batch = 0, fixed = 0;  // The largest body's arena, so one size fits every CPU.
  std::vector<std::string> cpus;
  bool bounded = true;
  for (const AotTier& t : tiers) {
    bounded = bounded && ScratchIsBounded(*t.model);
    per_batch = std::max(per_batch, t.model->arena.per_batch_bytes);
    fixed = std::max(fixed, t.model->arena.fixed_bytes);
    cpus.push_back(absl::StrCat(CommentSafe(t.cpu), t.min_level > 1 ? " (x86-64 level " : "",
                                t.min_level > 1 ? absl::StrCat(t.min_level, ")") : ""));
  }
  const llvm::Triple triple(target_triple);
  const std::string link = absl::StrReplaceAll(
      triple.isWasm()
          ? "clang --target=wasm32-wasi app.c libLIB.a -lm  (wasi-libc; run under a WASI runtime)"
      : triple.isThumb() && triple.getOS() == llvm::Triple::UnknownOS
          ? "arm-none-eabi-gcc -mcpu=cortex-m7 -mfpu=fpv5-sp-d16 -mfloat-abi=hard -mthumb\n"
            " *        startup.c app.c libLIB.a -lm -T board.ld -Wl,--gc-sections  (newlib; bare\n"
            " *        metal: no heap is used, no threads; the weights are read-only data for\n"
            " *        flash and the arena is the only RAM a call needs besides its stack. Not\n"
            " *        reentrant from interrupt handlers: the runtime's buffers are static)"
          : "cc app.c libLIB.a -lm      (the library needs only the C library and libm)",
      {{"LIB", name}});
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto list = [&](const std::vector<TensorSignature>& sigs) {
    std::string out;
    for (size_t i = 0; i < sigs.size(); ++i) {
      std::vector<std::string> dims;
      for (const SymDim& d : sigs[i].shape) dims.push_back(DimString(d));
      absl::StrAppend(&out, " *   [", i, "] ", CommentSafe(sigs[i].name), ": ",
                      DTypeName(sigs[i].dtype), "[", absl::StrJoin(dims, ","), "]\n");
    }
    return out.empty() ? std::string(" *   (none)\n") : out;
  };
  std::string text = absl::StrCat(
      "/* ", name, ".h: C API of the ahead-of-time compiled model '", name,
      "' (generated by cuvilc from ", CommentSafe(source),
      ").\n"
      " *\n"
      " * Link:  ",
      link,
      "\n"
      " *\n"
      " * Inputs (",
      model.inputs.size(), "), in the order NAME_run takes them:\n", list(model.inputs),
      " * Outputs (", model.outputs.size(), "):\n", list(model.outputs),
      " * `batch` is the model's symbolic dimension (",
      model.symbol.empty() ? "none" : model.symbol,
      "); tensors are dense, row-major, in host byte order.\n"
      " *\n"
      " * Thread-safety: the library has no mutable global state visible to callers; ",
      name,
      "_run may be\n"
      " * called from any number of threads at once, each with its own arena. A call runs on the\n"
      " * calling thread only (no threads of its own). The model's intermediates and its kernels'\n"
      " * scratch (microkernel buffers; blocks for sorting, recurrent ops and GEMM packing) live "
      "in\n"
      " * the caller's arena, ",
      bounded ? "and a call allocates nothing.\n"
              : "but some of this model's buffers are sized at run time (those of control-flow\n"
                " * ops: If, Loop, Scan): they come from malloc (a thread keeps up to 16 MiB of\n"
                " * freed blocks for its next calls and frees them when it exits).\n",
      " */\n"
      "#ifndef ",
      upper, "_H_\n#define ", upper,
      "_H_\n\n"
      "#include <stddef.h>\n#include <stdint.h>\n\n"
      "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
      "#ifndef CUVIL_AOT_TYPES_DEFINED\n#define CUVIL_AOT_TYPES_DEFINED\n",
      PublicStructsText(),
      "/* Results of NAME_run. Positive: the input data is invalid for the model (outputs are\n"
      " * unspecified). Negative: a bad argument (nothing ran). */\n"
      "enum {\n"
      "  CUVIL_AOT_OK = 0,\n"
      "  CUVIL_AOT_INDEX_OUT_OF_BOUNDS = 1, /* a Gather / ScatterND index outside its axis */\n"
      "  CUVIL_AOT_SLICE_OUT_OF_BOUNDS = 2, /* a batch-dependent Slice past its input */\n"
      "  CUVIL_AOT_TOPK_TOO_LARGE = 3,      /* TopK's K exceeds its axis at this batch */\n"
      "  CUVIL_AOT_RESIZE_EMPTY_AXIS = 6,   /* a shape-dependent Resize of an empty axis */\n"
      "  CUVIL_AOT_BAD_BATCH = -1,          /* batch < 1, or a size overflows at this batch */\n"
      "  CUVIL_AOT_NULL_ARGUMENT = -2,      /* a null inputs/outputs array, tensor or arena */\n"
      "  CUVIL_AOT_MISALIGNED_ARENA = -3    /* arena not aligned to CUVIL_AOT_ARENA_ALIGN */\n"
      "};\n\n"
      "/* Alignment NAME_run needs for its arena (e.g. aligned_alloc(CUVIL_AOT_ARENA_ALIGN, n)). "
      "*/\n"
      "#define CUVIL_AOT_ARENA_ALIGN 64\n\n"
      "/* Number of elements of `t` at `batch`; -1 on overflow or batch < 1. */\n"
      "static inline int64_t cuvil_aot_elements(const cuvil_aot_tensor* t, int64_t batch) {\n"
      "  int64_t n = 1;\n"
      "  if (batch < 1) return -1;\n"
      "  for (int32_t i = 0; i < t->rank; ++i) {\n"
      "    int64_t d = t->dims[i].coef;\n"
      "    for (int32_t p = 0; p < t->dims[i].power; ++p)\n"
      "      if (__builtin_mul_overflow(d, batch, &d)) return -1;\n"
      "    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;\n"
      "  }\n"
      "  return n;\n"
      "}\n"
      "#endif /* CUVIL_AOT_TYPES_DEFINED */\n\n"
      "#define ",
      name, "_NUM_INPUTS ", model.inputs.size(), "\n#define ", name, "_NUM_OUTPUTS ",
      model.outputs.size(),
      "\n\n"
      "/* Descriptors of the inputs and outputs (immutable). */\n"
      "extern const cuvil_aot_tensor ",
      name, "_inputs[];\nextern const cuvil_aot_tensor ", name,
      "_outputs[];\n\n"
      "/* Bytes of arena one call at `batch` needs: the memory plan (at most ",
      per_batch, " * batch + ", fixed,
      ")\n"
      " * and, 64-byte aligned after it, the scratch of the kernel that needs the most (it "
      "depends\n"
      " * on the CPU's microkernel tier). Never decreases as the batch grows, so an arena sized\n"
      " * for the largest batch serves every smaller one. SIZE_MAX when batch < 1 or the size\n"
      " * overflows. */\n"
      "size_t ",
      name,
      "_arena_bytes(int64_t batch);\n\n"
      "/* Runs the model on `batch` items. inputs[i] points to input i's elements and outputs[i] "
      "to\n"
      " * room for output i's (cuvil_aot_elements(&NAME_outputs[i], batch) * elem_size bytes);\n"
      " * arena: NAME_arena_bytes(batch) bytes aligned to CUVIL_AOT_ARENA_ALIGN (may be null when\n"
      " * that is 0), exclusive to this call. Returns CUVIL_AOT_OK or a CUVIL_AOT_* code. */\n"
      "int ",
      name,
      "_run(const void* const* inputs, void* const* outputs, int64_t batch, void* arena);\n\n"
      "/* The body NAME_run runs on this CPU, named by the CPU it was compiled for. The library\n"
      " * holds ",
      tiers.size() == 1 ? "one: " : "these, and runs the first this CPU can run:\n *   ",
      absl::StrJoin(cpus, ",\n *   "),
      ".\n * Thread-safe. */\n"
      "const char* NAME_tier(void);\n\n"
      "#ifdef __cplusplus\n}  /* extern \"C\" */\n#endif\n\n#endif /* ",
      upper, "_H_ */\n");
  return absl::StrReplaceAll(text, {{"NAME_", name + "_"}});
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

  std::vector<llvm::NewArchiveMember> ar;
  for (const Member& m : members) {
    llvm::NewArchiveMember nm(llvm::MemoryBufferRef(m.bytes, m.name));
    nm.MemberName = m.name;
    ar.push_back(std::move(nm));
  }
  auto archive = llvm::writeArchiveToBuffer(ar, llvm::SymtabWritingMode::NormalSymtab,
                                            llvm::object::Archive::K_GNU,
                                            /*Deterministic=*/true, /*Thin=*/false);
  if (!archive) return absl::InternalError(ToString(archive.takeError()));

  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", options.out_dir, ": ", ec.message()));
  r.library_path = absl::StrCat(options.out_dir, "/lib", options.name, ".a");
  r.header_path = absl::StrCat(options.out_dir, "/", options.name, ".h");
  auto write = [](const std::string& path, llvm::StringRef bytes) -> absl::Status {
    std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      out.close();  // A failure to flush (say ENOSPC) shows only at close.
      if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
    std::error_code rename_ec;
    std::filesystem::rename(tmp, path, rename_ec);
    if (rename_ec) return absl::InternalError(absl::StrCat("cannot write ", path));
    return absl::OkStatus();
  };
  if (auto s = write(r.library_path, (*archive)->getBuffer()); !s.ok()) return s;
  if (auto s = write(r.header_path,
                     HeaderText(tiers, options.name, options.source, options.target_triple));
      !s.ok()) {
    return s;
  }
  r.library_bytes = static_cast<int64_t>((*archive)->getBufferSize());
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
