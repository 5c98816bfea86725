// Model repositories on disk in Triton's layout:
//   <repo>/<model>/config.pbtxt            (optional: completed from the ONNX model)
//   <repo>/<model>/<version>/model.onnx    (or config's default_model_filename)
// and two layouts KServe's storage initializer leaves in /mnt/models, served as version 1:
//   <repo>/<model>/model.onnx              (a model folder without version folders)
//   <repo>/model.onnx                      (one model; named by the repository's model name)
#ifndef CUVIL_SERVER_MODEL_REPOSITORY_H_
#define CUVIL_SERVER_MODEL_REPOSITORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model_config.pb.h"

namespace cuvil {

// A model found in a repository: its config as written (possibly empty) and its version files.
struct ModelSource {
  std::string name;
  std::string dir;
  bool has_config_file = false;
  inference::ModelConfig config;
  std::map<int64_t, std::string> version_paths;  // Version -> model file path, all on disk.
};

// Thread-safe: holds only immutable roots; every call reads the disk afresh.
class ModelRepository {
 public:
  // `single_model_name` names the model of a root that holds model.onnx itself (KServe's
  // --model-name); it must be a plain name (ValidateModelName).
  explicit ModelRepository(std::vector<std::string> roots,
                           std::string single_model_name = kDefaultSingleModelName);

  static constexpr char kDefaultSingleModelName[] = "model";

  // Names of the model folders in every root, and single_model_name for a root that holds
  // model.onnx itself, sorted. A name in two roots is reported once.
  std::vector<std::string> ListModels() const;

  // Reads model `name`: parses config.pbtxt (InvalidArgument naming the file and field on a bad
  // config), lists numeric version folders holding the model file. NotFound if no root has it;
  // InvalidArgument if two roots both have it.
  absl::StatusOr<ModelSource> Find(const std::string& name) const;

  const std::vector<std::string>& roots() const { return roots_; }

 private:
  // Roots that hold model.onnx themselves.
  std::vector<std::string> SingleModelRoots() const;

  std::vector<std::string> roots_;
  std::string single_model_name_;
};

// Versions the config's version_policy selects from `available` (default: latest 1), ascending.
std::vector<int64_t> SelectVersions(const inference::ModelVersionPolicy& policy,
                                    const std::vector<int64_t>& available);

}  // namespace cuvil

#endif  // CUVIL_SERVER_MODEL_REPOSITORY_H_
