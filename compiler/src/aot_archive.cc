#include "aot_archive.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cuvil/format/compiled_model.h"
#include "llvm/ObjCopy/ConfigManager.h"
#include "llvm/ObjCopy/ObjCopy.h"
#include "llvm/Object/Archive.h"
#include "llvm/Object/ArchiveWriter.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace cuvil::aot_internal {
namespace {

std::string ToString(llvm::Error err) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << err;
  return out;
}

// The API symbols a library exports under their own names.
std::set<std::string> ApiSymbols(const std::string& name) {
  return {name + "_run", name + "_arena_bytes", name + "_tier", name + "_inputs",
          name + "_outputs"};
}

}  // namespace

std::string TierSymbol(const std::string& symbol, size_t tier) {
  return absl::StrCat(symbol, "__t", tier);
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

namespace {

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

}  // namespace

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

absl::StatusOr<std::string> ArchiveBytes(const std::vector<Member>& members) {
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
  return std::string((*archive)->getBuffer());
}

absl::Status ReplaceFile(const std::string& path, const std::string& bytes) {
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
}

}  // namespace cuvil::aot_internal
