#include "args.h"

#include <cmath>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cuvil::admin_cli {
namespace {

constexpr char kGeneral[] =
    "usage: cuvil-admin [-u HOST:PORT] [--token-file FILE] [--json] VERB [ARGS] [--help]\n"
    "Administers a running cuvil-server over gRPC (cuvil.admin.v1.ModelAdmin and the\n"
    "repository RPCs).\n"
    "verbs:\n"
    "  load MODEL        load or reload a model (repository folder, or inline --onnx)\n"
    "  unload MODEL      unload every version of a model\n"
    "  list              every known version: state, JIT namespace, compile time, memory\n"
    "  index             the repository index (RepositoryIndex)\n"
    "  functions MODEL   the compiled functions of a version\n"
    "  patch MODEL       hot-patch kernels (--ir FILE | --recompile OPTIONS | --profile SECONDS)\n"
    "  rollback MODEL ID roll back a patch\n"
    "  patches MODEL     the patch history of a version\n"
    "  snapshot MODEL    save a version's compiled state (--out FILE)\n"
    "  restore FILE      restore a snapshot\n"
    "  sequences list|end  open sequences of sequence-batched models; end one\n"
    "global flags:\n"
    "  -u, --url HOST:PORT     the server's gRPC address (default 127.0.0.1:8001)\n"
    "  --token-file FILE       send 'authorization: Bearer <first line of FILE>' (for a server\n"
    "                          started with --admin-token-file)\n"
    "  --json                  print responses as JSON (proto field names) instead of tables\n"
    "  --timeout SECONDS       deadline of the call (default 300)\n"
    "  -h, --help              this text; 'cuvil-admin VERB --help' describes a verb\n"
    "Exit status: 0 ok; 1 the call failed (the server's status is printed); 2 bad usage.\n";

constexpr char kVersionFlag[] =
    "  -v, --version N         the model version (default: the highest READY version)\n";

std::string VerbUsage(Verb verb) {
  switch (verb) {
    case Verb::kLoad:
      return absl::StrCat(
          "usage: cuvil-admin load MODEL [--config FILE] [--onnx FILE [-v N]] [--no-wait]\n"
          "Loads MODEL from the server's repository (its version policy picks the versions; a\n"
          "loaded model is reloaded, the old version serving until the new one is READY), or\n"
          "inline from an ONNX file.\n"
          "  --config FILE           config.pbtxt text replacing the repository's\n"
          "  --onnx FILE             load these ONNX bytes instead of the repository folder\n"
          "  -v, --version N         the inline model's version (default 1)\n"
          "  --no-wait               return once the load is queued\n");
    case Verb::kUnload:
      return "usage: cuvil-admin unload MODEL\n"
             "Unloads every version of MODEL once its in-flight requests finish.\n";
    case Verb::kList:
      return "usage: cuvil-admin list\n"
             "Every known model version with its state, JIT namespace, compile time and memory.\n";
    case Verb::kIndex:
      return "usage: cuvil-admin index\n"
             "The repository index (Triton's RepositoryIndex): name, version, state, reason.\n";
    case Verb::kFunctions:
      return absl::StrCat("usage: cuvil-admin functions MODEL [-v N]\n",
                          "The compiled functions (kernels) of a version with their signatures.\n",
                          kVersionFlag);
    case Verb::kPatch:
      return absl::StrCat(
          "usage: cuvil-admin patch MODEL [-v N] (--ir FILE | --recompile OPTIONS |\n"
          "                         --profile SECONDS) [--function SYMBOL]... [flags]\n"
          "Replaces kernels of a READY version between executions. The patch is validated\n"
          "against the current outputs on a batch-1 input unless --no-validate.\n",
          kVersionFlag,
          "  --ir FILE               LLVM IR text defining the replacement functions\n"
          "  --recompile OPTIONS     recompile the named kernels with other compile options\n"
          "                          (passed to the server as the patch body)\n"
          "  --profile SECONDS       time every kernel for SECONDS, then roll back; prints the\n"
          "                          per-kernel table at the end (--no-wait: at once)\n"
          "  --function SYMBOL       a kernel to replace (repeatable; default: what the IR "
          "defines)\n"
          "  --author NAME           recorded in the patch history\n"
          "  --force                 apply even when validation finds other outputs\n"
          "  --no-validate           skip validation\n"
          "  --rtol X, --atol Y      validation tolerance (server defaults 1e-3, 1e-5)\n");
    case Verb::kRollback:
      return absl::StrCat(
          "usage: cuvil-admin rollback MODEL PATCH_ID [-v N] [--force]\n",
          "Removes patch PATCH_ID from the version's stack. When patches above it stay, the\n"
          "server first checks that the stack without it computes what the version did before\n"
          "it (within those patches' validation tolerances).\n",
          kVersionFlag, "  --force                 roll back without that check\n");
    case Verb::kPatches:
      return absl::StrCat("usage: cuvil-admin patches MODEL [-v N]\n",
                          "The patch history of a version, oldest first.\n", kVersionFlag);
    case Verb::kSnapshot:
      return absl::StrCat("usage: cuvil-admin snapshot MODEL [-v N] --out FILE\n",
                          "Writes the version's snapshot artifact to FILE.\n", kVersionFlag,
                          "  --out FILE              where to write the artifact\n");
    case Verb::kRestore:
      return "usage: cuvil-admin restore FILE\n"
             "Recreates a model version from a snapshot artifact written by 'snapshot'.\n";
    case Verb::kSequences:
      return absl::StrCat(
          "usage: cuvil-admin sequences list [MODEL [-v N]]\n"
          "       cuvil-admin sequences end MODEL ID [-v N] [--string-id]\n"
          "list: the open sequences of the models configured with sequence_batching (all, or\n"
          "MODEL's): id, model, version, steps, the step of the last checkpoint, state bytes.\n"
          "end: ends sequence ID of MODEL as its END step would (its state is freed; steps\n"
          "queued behind a running one are refused). ID is numeric unless --string-id or not a\n"
          "number.\n",
          "  -v, --version N         the model version (list: every version; end: the highest\n"
          "                          READY version)\n"
          "  --string-id             ID is a string sequence id even if it looks like a number\n");
    case Verb::kNone:
      break;
  }
  return kGeneral;
}

const std::map<std::string, Verb>& Verbs() {
  static const auto* verbs = new std::map<std::string, Verb>{
      {"load", Verb::kLoad},         {"unload", Verb::kUnload},       {"list", Verb::kList},
      {"index", Verb::kIndex},       {"functions", Verb::kFunctions}, {"patch", Verb::kPatch},
      {"rollback", Verb::kRollback}, {"patches", Verb::kPatches},     {"snapshot", Verb::kSnapshot},
      {"restore", Verb::kRestore},   {"sequences", Verb::kSequences},
  };
  return *verbs;
}

// Verb-specific flags and the verbs that accept them (global flags are handled apart).
const std::map<std::string, std::set<Verb>>& VerbFlags() {
  static const auto* flags = new std::map<std::string, std::set<Verb>>{
      {"--version",
       {Verb::kLoad, Verb::kFunctions, Verb::kPatch, Verb::kRollback, Verb::kPatches,
        Verb::kSnapshot, Verb::kSequences}},
      {"--string-id", {Verb::kSequences}},
      {"--config", {Verb::kLoad}},
      {"--onnx", {Verb::kLoad}},
      {"--no-wait", {Verb::kLoad, Verb::kPatch}},
      {"--ir", {Verb::kPatch}},
      {"--recompile", {Verb::kPatch}},
      {"--profile", {Verb::kPatch}},
      {"--function", {Verb::kPatch}},
      {"--author", {Verb::kPatch}},
      {"--force", {Verb::kPatch, Verb::kRollback}},
      {"--no-validate", {Verb::kPatch}},
      {"--rtol", {Verb::kPatch}},
      {"--atol", {Verb::kPatch}},
      {"--out", {Verb::kSnapshot}},
  };
  return *flags;
}

bool TakesValue(const std::string& flag) {
  static const std::set<std::string> boolean = {"--json",  "--help",        "--no-wait",
                                                "--force", "--no-validate", "--string-id"};
  return !boolean.count(flag);
}

absl::Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::StatusOr<double> NonNegative(const std::string& flag, const std::string& value) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < 0) {
    return Bad(absl::StrCat("bad value '", value, "' for ", flag, ": want a non-negative number"));
  }
  return v;
}

// The positional arguments each verb takes, by name (for messages).
std::vector<std::string> Positionals(Verb verb) {
  switch (verb) {
    case Verb::kList:
    case Verb::kIndex:
    case Verb::kNone:
      return {};
    case Verb::kRollback:
      return {"MODEL", "PATCH_ID"};
    case Verb::kRestore:
      return {"FILE"};
    default:
      return {"MODEL"};
  }
}

}  // namespace

const char* VerbName(Verb verb) {
  for (const auto& [name, v] : Verbs()) {
    if (v == verb) return name.c_str();
  }
  return "";
}

std::string UsageText(Verb verb) { return VerbUsage(verb); }

absl::StatusOr<AdminArgs> ParseArgs(const std::vector<std::string>& args) {
  AdminArgs out;
  std::vector<std::string> positional;
  // Verb flags seen before the verb is known are checked once it is.
  std::vector<std::string> verb_flags_seen;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> value;
    if (flag == "--") {
      for (++i; i < args.size(); ++i) positional.push_back(args[i]);
      break;
    }
    if (!absl::StartsWith(flag, "-") || flag == "-") {
      if (out.verb == Verb::kNone && positional.empty()) {
        auto it = Verbs().find(flag);
        if (it == Verbs().end()) {
          return Bad(absl::StrCat("unknown verb '", flag, "' (see cuvil-admin --help)"));
        }
        out.verb = it->second;
      } else {
        positional.push_back(flag);
      }
      continue;
    }
    if (size_t eq = flag.find('='); absl::StartsWith(flag, "--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    // Short spellings.
    if (flag == "-u") flag = "--url";
    if (flag == "-h") flag = "--help";
    if (flag == "-v") flag = "--version";
    static const std::set<std::string> kGlobal = {"--help", "--json", "--url", "--token-file",
                                                  "--timeout"};
    if (!kGlobal.count(flag) && !VerbFlags().count(flag)) {
      return Bad(absl::StrCat("unknown flag '", flag, "' (see cuvil-admin --help)"));
    }
    if (TakesValue(flag) && !value) {
      if (i + 1 >= args.size()) return Bad(absl::StrCat(flag, " needs a value"));
      value = args[++i];
    } else if (!TakesValue(flag) && value) {
      return Bad(absl::StrCat(flag, " takes no value"));
    }
    if (flag == "--help") {
      out.help = true;
    } else if (flag == "--json") {
      out.json = true;
    } else if (flag == "--url") {
      if (value->empty() || value->find(':') == std::string::npos) {
        return Bad(absl::StrCat("bad value '", *value, "' for --url: want HOST:PORT"));
      }
      out.url = *value;
    } else if (flag == "--token-file") {
      if (value->empty()) return Bad("--token-file needs a file name");
      out.token_file = *value;
    } else if (flag == "--timeout") {
      absl::StatusOr<double> t = NonNegative(flag, *value);
      if (!t.ok()) return t.status();
      if (*t == 0) return Bad("--timeout must be positive");
      out.timeout_s = *t;
    } else if (VerbFlags().count(flag)) {
      verb_flags_seen.push_back(flag);
      if (flag == "--version") {
        if (!absl::SimpleAtoi(*value, &out.version) || out.version < 0) {
          return Bad(absl::StrCat("bad value '", *value, "' for --version: want a version number"));
        }
      } else if (flag == "--config") {
        out.config_file = *value;
      } else if (flag == "--onnx") {
        out.onnx_file = *value;
      } else if (flag == "--no-wait") {
        out.wait = false;
      } else if (flag == "--ir") {
        out.ir_file = *value;
      } else if (flag == "--recompile") {
        out.recompile_options = *value;
        if (value->empty()) return Bad("--recompile needs compile options");
      } else if (flag == "--profile") {
        absl::StatusOr<double> s = NonNegative(flag, *value);
        if (!s.ok()) return s.status();
        if (*s == 0) return Bad("--profile needs a positive number of seconds");
        out.profile_seconds = *s;
      } else if (flag == "--function") {
        if (value->empty()) return Bad("--function needs a symbol");
        out.functions.push_back(*value);
      } else if (flag == "--author") {
        out.author = *value;
      } else if (flag == "--force") {
        out.force = true;
      } else if (flag == "--no-validate") {
        out.validate = false;
      } else if (flag == "--rtol" || flag == "--atol") {
        absl::StatusOr<double> t = NonNegative(flag, *value);
        if (!t.ok()) return t.status();
        (flag == "--rtol" ? out.rtol : out.atol) = *t;
      } else if (flag == "--out") {
        out.out_file = *value;
      } else if (flag == "--string-id") {
        out.string_id = true;
      }
    } else {
      return Bad(absl::StrCat("unknown flag '", flag, "' (see cuvil-admin --help)"));
    }
  }
  if (out.help) return out;  // Usage wins over everything else.
  if (out.verb == Verb::kNone) return Bad("no verb given (see cuvil-admin --help)");
  const char* verb = VerbName(out.verb);
  for (const std::string& flag : verb_flags_seen) {
    if (!VerbFlags().at(flag).count(out.verb)) {
      return Bad(absl::StrCat(flag, " does not apply to '", verb, "' (see cuvil-admin ", verb,
                              " --help)"));
    }
  }
  if (out.verb == Verb::kSequences) {
    // "list [MODEL]" or "end MODEL ID".
    const std::string action = positional.empty() ? "" : positional[0];
    const size_t want = action == "end" ? 3 : 2;
    if ((action != "list" && action != "end") ||
        (action == "list" ? positional.size() > want : positional.size() != want)) {
      return Bad(
          "'sequences' takes 'list [MODEL]' or 'end MODEL ID' (see cuvil-admin sequences --help)");
    }
    out.sequence_action = action;
    if (positional.size() >= 2) out.model = positional[1];
    if (action == "end") {
      out.sequence_id = positional[2];
      uint64_t id = 0;
      if (out.sequence_id.empty() ||
          (!out.string_id && absl::SimpleAtoi(out.sequence_id, &id) && id == 0)) {
        return Bad("a sequence id is a non-zero number or a non-empty string");
      }
    }
    if (action == "list" && out.model.empty() && out.version > 0) {
      return Bad("'sequences list' takes --version with a MODEL only");
    }
    if (out.string_id && action != "end") return Bad("--string-id applies to 'sequences end'");
    if (!out.model.empty() && out.model.front() == '-') {
      return Bad(absl::StrCat("bad model name '", out.model, "'"));
    }
    return out;
  }
  const std::vector<std::string> names = Positionals(out.verb);
  if (positional.size() != names.size()) {
    return Bad(absl::StrCat("'", verb, "' takes ",
                            names.empty() ? "no arguments" : absl::StrJoin(names, " "), ", got ",
                            positional.size(), " argument", positional.size() == 1 ? "" : "s",
                            " (see cuvil-admin ", verb, " --help)"));
  }
  switch (out.verb) {
    case Verb::kRollback:
      out.model = positional[0];
      out.patch_id = positional[1];
      break;
    case Verb::kRestore:
      out.in_file = positional[0];
      break;
    case Verb::kList:
    case Verb::kIndex:
    case Verb::kNone:
      break;
    default:
      out.model = positional[0];
  }
  if (!out.model.empty() && out.model.front() == '-') {
    return Bad(absl::StrCat("bad model name '", out.model, "'"));
  }
  if (out.verb == Verb::kLoad && out.version > 0 && out.onnx_file.empty()) {
    return Bad("--version with 'load' names the version of an inline --onnx model");
  }
  if (out.verb == Verb::kPatch) {
    const int kinds =
        !out.ir_file.empty() + !out.recompile_options.empty() + out.profile_seconds.has_value();
    if (kinds != 1) {
      return Bad("'patch' needs exactly one of --ir FILE, --recompile OPTIONS, --profile SECONDS");
    }
    out.kind = !out.ir_file.empty()             ? "ir"
               : !out.recompile_options.empty() ? "recompile"
                                                : "profile";
  }
  if (out.verb == Verb::kPatch && !out.wait && !out.profile_seconds) {
    return Bad("--no-wait with 'patch' applies to --profile only");
  }
  if (out.verb == Verb::kSnapshot && out.out_file.empty()) {
    return Bad("'snapshot' needs --out FILE");
  }
  return out;
}

}  // namespace cuvil::admin_cli
