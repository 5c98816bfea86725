#include "load_parameters.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "http_json.h"
#include "model_name.h"

namespace cuvil {
namespace {

constexpr absl::string_view kFilePrefix = "file:";
constexpr absl::string_view kOnnxSuffix = ".onnx";

// Keys are client text: escape and shorten them before they go into a message.
std::string Shown(absl::string_view key) {
  constexpr size_t kShown = 80;
  std::string shown = absl::CHexEscape(key.substr(0, kShown));
  if (key.size() > kShown) shown += "...";
  return shown;
}

absl::Status Refuse(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("load parameter '", Shown(key), "' ", why));
}

// Triton's version folder rule: decimal digits, no leading zero, positive.
bool ParseVersion(absl::string_view text, int64_t* version) {
  if (text.empty() || text[0] == '0') return false;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return false;
  }
  return absl::SimpleAtoi(text, version) && *version > 0;
}

absl::Status ParseConfig(const LoadParameter& p, LoadRequest* load) {
  if (p.type != LoadParameter::Type::kString) {
    return Refuse(p.key, "must be a string holding the model configuration as JSON");
  }
  if (p.value.empty()) return Refuse(p.key, "is empty");
  if (absl::Status s =
          http_json::CheckJsonNesting(std::string_view(p.value.data(), p.value.size()));
      !s.ok()) {
    return Refuse(p.key, absl::StrCat("is not acceptable: ", s.message()));
  }
  load->config_json = std::string(p.value);
  return absl::OkStatus();
}

absl::Status ParseFile(const LoadParameter& p, LoadRequest* load) {
  absl::string_view path = absl::string_view(p.key).substr(kFilePrefix.size());
  const size_t slash = path.find('/');
  int64_t version = 0;
  if (slash == absl::string_view::npos || !ParseVersion(path.substr(0, slash), &version)) {
    return Refuse(p.key, "must look like file:<version>/model.onnx with a positive version");
  }
  absl::string_view file = path.substr(slash + 1);
  if (file.size() <= kOnnxSuffix.size() || !absl::EndsWith(file, kOnnxSuffix) ||
      file.find_first_of("/\\") != absl::string_view::npos) {
    return Refuse(p.key,
                  "is not supported: only the version's .onnx model file can be sent "
                  "(file:<version>/model.onnx)");
  }
  std::string bytes;
  switch (p.type) {
    case LoadParameter::Type::kBytes:
      bytes = std::string(p.value);
      break;
    case LoadParameter::Type::kString:
      // Triton's HTTP form: the file content as base64 text.
      if (!absl::Base64Unescape(p.value, &bytes)) return Refuse(p.key, "is not valid base64");
      break;
    case LoadParameter::Type::kOther:
      return Refuse(p.key, "must hold the file's bytes (base64 text over HTTP)");
  }
  if (bytes.empty()) return Refuse(p.key, "is empty");
  if (load->model_bytes.count(version) != 0) {
    return Refuse(p.key, absl::StrCat("is a second file for version ", version,
                                      "; only one model file per version is supported"));
  }
  load->model_bytes[version] = std::move(bytes);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadRequest> ParseLoadParameters(const LoadParametersInput& input) {
  if (absl::Status s = ValidateModelName(input.model_name); !s.ok()) return s;
  LoadRequest load;
  load.name = std::string(input.model_name);
  load.wait = true;

  std::vector<const LoadParameter*> sorted;
  sorted.reserve(input.parameters.size());
  for (const LoadParameter& p : input.parameters) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(),
            [](const LoadParameter* a, const LoadParameter* b) { return a->key < b->key; });

  for (const LoadParameter* p : sorted) {
    absl::Status s;
    if (p->key == "config") {
      s = ParseConfig(*p, &load);
    } else if (absl::StartsWith(p->key, kFilePrefix)) {
      s = ParseFile(*p, &load);
    } else {
      s = Refuse(p->key,
                 "is not supported; a load takes 'config' (model configuration as JSON) and "
                 "'file:<version>/model.onnx' (model bytes)");
    }
    if (!s.ok()) return s;
  }
  return load;
}

}  // namespace cuvil
