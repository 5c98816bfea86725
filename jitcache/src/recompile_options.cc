// Text form of RecompileOptions (recorded in patch histories and snapshots).
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuvil/jitcache/jit_engine.h"

namespace cuvil {

std::string RecompileOptionsText(const RecompileOptions& options) {
  return absl::StrCat("opt_level=", options.opt_level);
}

absl::StatusOr<RecompileOptions> ParseRecompileOptions(const std::string& text) {
  RecompileOptions options;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (key == "opt_level") {
      int level = 0;
      if (!absl::SimpleAtoi(value, &level) || level < 0 || level > 3) {
        return absl::InvalidArgumentError(
            absl::StrCat("recompile option opt_level must be 0..3, got '", value, "'"));
      }
      options.opt_level = level;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown recompile option '", key, "' (supported: opt_level=0..3)"));
    }
  }
  return options;
}

}  // namespace cuvil
