#include "model_name.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace cuvil {
namespace {

absl::Status Invalid(absl::string_view name, absl::string_view why) {
  // Escaped and shortened: the name is attacker-controlled and ends up in logs and responses.
  constexpr size_t kShown = 64;
  std::string shown = absl::CHexEscape(name.substr(0, kShown));
  if (name.size() > kShown) shown += "...";
  return absl::InvalidArgumentError(absl::StrCat("invalid model name \"", shown, "\": ", why));
}

}  // namespace

absl::Status ValidateModelName(absl::string_view name) {
  if (name.empty()) return Invalid(name, "it is empty");
  if (name.size() > kMaxModelNameBytes) {
    return Invalid(name, absl::StrCat("it is longer than ", kMaxModelNameBytes, " bytes"));
  }
  if (name == "." || name == "..") return Invalid(name, "'.' and '..' are not model names");
  for (char c : name) {
    if (c == '/' || c == '\\') return Invalid(name, "it must not contain '/' or '\\'");
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return Invalid(name, "it must not contain control characters");
  }
  return absl::OkStatus();
}

}  // namespace cuvil
