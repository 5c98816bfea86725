#include "host_identity.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/object_cache.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/TargetParser/Host.h"

namespace cuvil::jitcache_internal {

const HostIdentity& HostIdentityOfThisProcess() {
  static const HostIdentity* host = [] {
    auto* h = new HostIdentity;
    h->triple = llvm::sys::getProcessTriple();
    h->cpu = llvm::sys::getHostCPUName().str();
    std::vector<std::string> feats;
    for (const auto& f : llvm::sys::getHostCPUFeatures()) {
      feats.push_back(absl::StrCat(f.second ? "+" : "-", f.first().str()));
    }
    std::sort(feats.begin(), feats.end());
    h->features = absl::StrJoin(feats, ",");
    return h;
  }();
  return *host;
}

// The GNU build ID (the linker's hash of the output) of the loaded object holding `addr`, as hex;
// empty when the object has none.
namespace {

std::string BuildIdOf(const void* addr) {
  struct Search {
    uintptr_t addr;
    std::string id;
  } search{reinterpret_cast<uintptr_t>(addr), ""};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        auto* s = static_cast<Search*>(arg);
        bool mine = false;
        for (int i = 0; i < info->dlpi_phnum && !mine; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          mine = ph.p_type == PT_LOAD && s->addr >= start && s->addr < start + ph.p_memsz;
        }
        if (!mine) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
          const uint8_t* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const uint8_t* name = p + sizeof(ElfW(Nhdr));
            const uint8_t* desc = name + ((note->n_namesz + 3) & ~3u);
            if (desc + note->n_descsz > end) break;
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
                std::memcmp(name, "GNU", 4) == 0) {
              for (uint32_t b = 0; b < note->n_descsz; ++b) {
                absl::StrAppend(&s->id, absl::Hex(desc[b], absl::kZeroPad2));
              }
              return 1;
            }
            p = desc + ((note->n_descsz + 3) & ~3u);
          }
        }
        return 1;  // The object holding `addr`, without a build ID.
      },
      &search);
  return search.id;
}

}  // namespace

// The compiler's version and runtime ABI version plus the identity of the binary that holds the
// compiler code (kernels change daily; a rebuilt compiler must not serve code an older one
// generated) and the LLVM version. The identity is the binary's GNU build ID (a hash of its
// contents the linker already computed), else the XXH3-128 of the file.
const std::string& CompilerBuildIdentity() {
  static const std::string* id = [] {
    std::string build = BuildIdOf(reinterpret_cast<const void*>(&CompileGraph));
    if (!build.empty()) {
      build = absl::StrCat("gnu-build-id:", build);
    } else {
      build = "unknown";
      Dl_info info;
      if (dladdr(reinterpret_cast<void*>(&CompileGraph), &info) != 0 && info.dli_fname != nullptr) {
        std::string path = info.dli_fname;
        if (path.empty() || path.find('/') == std::string::npos) path = "/proc/self/exe";
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
          XXH3_state_t* h = XXH3_createState();
          XXH3_128bits_reset(h);
          std::vector<char> buf(1 << 16);
          ssize_t n;
          while ((n = read(fd, buf.data(), buf.size())) > 0 || (n < 0 && errno == EINTR)) {
            if (n > 0) XXH3_128bits_update(h, buf.data(), static_cast<size_t>(n));
          }
          close(fd);
          const XXH128_hash_t d = XXH3_128bits_digest(h);
          XXH3_freeState(h);
          if (n == 0) {
            build = absl::StrCat(absl::Hex(d.high64, absl::kZeroPad16),
                                 absl::Hex(d.low64, absl::kZeroPad16));
          }
        }
      }
    }
    return new std::string(absl::StrCat(kCompilerVersion, "+abi", kRuntimeAbiVersion, "+llvm",
                                        LLVM_VERSION_STRING, "+", build));
  }();
  return *id;
}

std::string CodeIdentity() {
  return absl::StrCat(CompilerBuildIdentity(), "+", CodegenTargetKey());
}

}  // namespace cuvil::jitcache_internal

namespace cuvil {

std::string CodeBuildIdentity() { return jitcache_internal::CodeIdentity(); }

}  // namespace cuvil
