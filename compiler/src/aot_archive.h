// Private: the archive of an ahead-of-time library (one of the rooms behind aot_writer.h): the
// runtime archive's members read in, symbols renamed (per body, and every internal one to
// NAME__symbol, in ELF objects through llvm-objcopy and in WebAssembly objects by rewriting their
// symbol tables), the members written as one GNU archive, and files replaced by rename.
#ifndef CUVIL_COMPILER_SRC_AOT_ARCHIVE_H_
#define CUVIL_COMPILER_SRC_AOT_ARCHIVE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cuvil::aot_internal {

// One object file going into the archive.
struct Member {
  std::string name;
  std::string bytes;
};

// Symbol names of body `tier` in a library of several bodies (TierSymbol("cuvil_entry", 1) =
// "cuvil_entry__t1"); a one-body library keeps the compiler's names.
std::string TierSymbol(const std::string& symbol, size_t tier);

// The runtime archive at `path`'s members, each renamed rt_<member>. NotFound when it cannot be
// read (naming the target that builds it); InvalidArgument when it is no archive or damaged.
absl::StatusOr<std::vector<Member>> ReadRuntime(const std::string& path);

// Gives body `tier`'s global symbols (defined ones, and its reference to the weights) the names
// TierSymbol gives them, so several bodies of one model link into one library; the weights
// reference goes to body `weights_owner`'s blob. ELF objects only.
absl::Status RenameTierSymbols(Member& m, size_t tier, size_t weights_owner);

// Gives every symbol that some member defines (except the API) the name NAME__symbol in every
// member, so the library's internals cannot clash with the program or another library. Fills
// `external` with the symbols left undefined (the C library's and libm's).
absl::Status PrivatiseSymbols(std::vector<Member>& members, const std::string& name,
                              std::vector<std::string>* external);

// `members` as a GNU archive with a symbol table (deterministic: no dates or owners). Internal on
// LLVM failures.
absl::StatusOr<std::string> ArchiveBytes(const std::vector<Member>& members);

// Writes `bytes` to `path` through path.tmp and a rename, so `path` is never left half written.
// Internal "cannot write <file>" on failure.
absl::Status ReplaceFile(const std::string& path, const std::string& bytes);

}  // namespace cuvil::aot_internal

#endif  // CUVIL_COMPILER_SRC_AOT_ARCHIVE_H_
