#include "cuvil/server/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/server/model_config.h"
#include "model_name.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

constexpr char kConfigFile[] = "config.pbtxt";
constexpr char kDefaultModelFile[] = "model.onnx";

bool IsDirectory(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// Triton ignores version folders that are not numeric or start with 0.
bool ParseVersion(const std::string& name, int64_t* version) {
  if (name.empty() || name[0] == '0') return false;
  if (!std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return false;
  }
  return absl::SimpleAtoi(name, version);
}

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat("cannot read ", path.string()));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path.string()));
  return out.str();
}

}  // namespace

ModelRepository::ModelRepository(std::vector<std::string> roots, std::string single_model_name)
    : roots_(std::move(roots)), single_model_name_(std::move(single_model_name)) {}

std::vector<std::string> ModelRepository::SingleModelRoots() const {
  std::vector<std::string> out;
  for (const std::string& root : roots_) {
    std::error_code ec;
    if (fs::is_regular_file(fs::path(root) / kDefaultModelFile, ec)) out.push_back(root);
  }
  return out;
}

std::vector<std::string> ModelRepository::ListModels() const {
  std::set<std::string> names;
  for (const std::string& root : roots_) {
    std::error_code ec;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      // Hidden folders (.git, .ipynb_checkpoints) are never models.
      if (name.empty() || name[0] == '.') continue;
      if (IsDirectory(it->path())) names.insert(name);
    }
  }
  if (!SingleModelRoots().empty()) names.insert(single_model_name_);
  return {names.begin(), names.end()};
}

absl::StatusOr<ModelSource> ModelRepository::Find(const std::string& name) const {
  // Names come from requests: one rule keeps them a single path component inside the root.
  if (auto s = ValidateModelName(name); !s.ok()) return s;
  std::vector<fs::path> dirs;
  for (const std::string& root : roots_) {
    fs::path dir = fs::path(root) / name;
    if (IsDirectory(dir)) dirs.push_back(dir);
  }
  if (name == single_model_name_) {
    for (const std::string& root : SingleModelRoots()) dirs.push_back(root);
  }
  if (dirs.empty()) {
    return absl::NotFoundError(
        absl::StrCat("model \"", name, "\" not found in repository ", absl::StrJoin(roots_, ", ")));
  }
  if (dirs.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("model \"", name, "\" is in two repositories: ",
                                                   dirs[0].string(), " and ", dirs[1].string()));
  }

  ModelSource source;
  source.name = name;
  source.dir = dirs[0].string();
  const fs::path config_path = dirs[0] / kConfigFile;
  std::error_code ec;
  if (fs::exists(config_path, ec)) {
    auto text = ReadFile(config_path);
    if (!text.ok()) return text.status();
    auto config = ParseModelConfigText(*text);
    if (!config.ok()) {
      // The parser reports "config.pbtxt:L:C: ..."; name the actual file instead.
      std::string message(config.status().message());
      if (absl::StartsWith(message, kConfigFile)) {
        message = message.substr(sizeof(kConfigFile) - 1);
      } else {
        message = absl::StrCat(": ", message);
      }
      return absl::InvalidArgumentError(absl::StrCat(config_path.string(), message));
    }
    source.config = std::move(*config);
    source.has_config_file = true;
  }

  std::string model_file = source.config.default_model_filename();
  if (model_file.empty()) model_file = kDefaultModelFile;
  if (!ValidateModelName(model_file).ok()) {  // The same single-component rule as names.
    return absl::InvalidArgumentError(absl::StrCat(config_path.string(),
                                                   ": default_model_filename \"", model_file,
                                                   "\" must be a plain file name"));
  }

  for (fs::directory_iterator it(dirs[0], ec), end; !ec && it != end; it.increment(ec)) {
    int64_t version = 0;
    if (!ParseVersion(it->path().filename().string(), &version)) continue;
    if (!IsDirectory(it->path())) continue;
    const fs::path file = it->path() / model_file;
    std::error_code file_ec;
    // A version folder still being copied, or holding another format, is not loadable.
    if (!fs::is_regular_file(file, file_ec)) continue;
    source.version_paths[version] = file.string();
  }
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot list ", source.dir, ": ", ec.message()));
  }
  // KServe's layouts: the model file beside config.pbtxt, no version folders (version 1).
  if (source.version_paths.empty()) {
    const fs::path file = dirs[0] / model_file;
    std::error_code file_ec;
    if (fs::is_regular_file(file, file_ec)) source.version_paths[1] = file.string();
  }
  return source;
}

std::vector<int64_t> SelectVersions(const inference::ModelVersionPolicy& policy,
                                    const std::vector<int64_t>& available) {
  std::vector<int64_t> sorted = available;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  if (policy.has_all()) return sorted;
  if (policy.has_specific()) {
    std::vector<int64_t> selected;
    for (int64_t v : sorted) {
      const auto& wanted = policy.specific().versions();
      if (std::find(wanted.begin(), wanted.end(), v) != wanted.end()) selected.push_back(v);
    }
    return selected;
  }
  size_t n = policy.has_latest() ? std::max<uint32_t>(policy.latest().num_versions(), 1) : 1;
  n = std::min(n, sorted.size());
  return {sorted.end() - static_cast<std::ptrdiff_t>(n), sorted.end()};
}

}  // namespace cuvil
