// Command-line parsing of cuvil-admin (pure: no I/O). One verb per call:
//   cuvil-admin [-u HOST:PORT] [--token-file FILE] [--json] VERB [verb args] [--help]
#ifndef CUVIL_TOOLS_CUVIL_ADMIN_ARGS_H_
#define CUVIL_TOOLS_CUVIL_ADMIN_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cuvil::admin_cli {

enum class Verb {
  kNone,  // Only --help (or nothing) was given.
  kLoad,
  kUnload,
  kList,
  kIndex,
  kFunctions,
  kPatch,
  kRollback,
  kPatches,
  kSnapshot,
  kRestore,
  kSequences,
};

// Everything one invocation asks for. Fields a verb does not use stay at their defaults.
struct AdminArgs {
  Verb verb = Verb::kNone;
  bool help = false;  // Print the usage (of `verb` when one was given) and exit 0.
  std::string url = "127.0.0.1:8001";
  std::string token_file;  // Its first line is sent as "authorization: Bearer <line>".
  bool json = false;       // Print the response as JSON instead of a table.
  double timeout_s = 300;  // Per call (loads compile, so the default is generous).

  std::string model;    // load, unload, functions, patch, rollback, patches, snapshot.
  int64_t version = 0;  // -v: 0 = the highest READY version (load: the inline version).
  // load
  std::string config_file;  // config.pbtxt replacing the repository's (or for --onnx).
  std::string onnx_file;    // Inline model bytes instead of the repository folder.
  // load: --no-wait returns once the load is queued. patch --profile: --no-wait answers at
  // once instead of after the window with the per-kernel table.
  bool wait = true;
  // patch: exactly one of ir_file / recompile_options / profile_seconds.
  std::string kind;  // "ir", "recompile" or "profile" (the request's kind).
  std::string ir_file;
  std::string recompile_options;
  std::optional<double> profile_seconds;
  std::vector<std::string> functions;  // --function SYMBOL (repeatable).
  std::string author;
  bool force = false;
  bool validate = true;       // --no-validate.
  double rtol = 0, atol = 0;  // 0: the server's defaults.
  // rollback
  std::string patch_id;
  // snapshot / restore
  std::string out_file;
  std::string in_file;
  // sequences: "list" (model optional) or "end" (model and id required).
  std::string sequence_action;
  std::string sequence_id;  // As typed; numeric unless --string-id or not a number.
  bool string_id = false;   // --string-id: the id is a string even when it looks like a number.
};

// Parses argv without argv[0]. InvalidArgument naming the offending argument on bad usage.
absl::StatusOr<AdminArgs> ParseArgs(const std::vector<std::string>& args);

// The verb as typed ("load", ...), "" for kNone.
const char* VerbName(Verb verb);

// The general usage (kNone) or one verb's.
std::string UsageText(Verb verb);

}  // namespace cuvil::admin_cli

#endif  // CUVIL_TOOLS_CUVIL_ADMIN_ARGS_H_
