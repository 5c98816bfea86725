#include "cuvil/server/model_repository.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

void WriteFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A fresh, empty directory per test (and per name within a test).
fs::path FreshDir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) / "cuvil_repo_test" /
                 (std::string(info->test_suite_name()) + "." + info->name()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(ModelRepositoryTest, ListsModelFoldersSortedAndDeduplicated) {
  fs::path a = FreshDir("a");
  fs::path b = FreshDir("b");
  fs::create_directories(a / "zeta" / "1");
  fs::create_directories(a / "alpha");
  fs::create_directories(b / "alpha");
  fs::create_directories(b / "mid");
  fs::create_directories(b / ".git");
  WriteFile(a / "README.md", "not a model");
  ModelRepository repo({a.string(), b.string(), (a / "missing").string()});
  EXPECT_THAT(repo.ListModels(), ElementsAre("alpha", "mid", "zeta"));
  EXPECT_THAT(ModelRepository({(a / "missing").string()}).ListModels(), IsEmpty());
}

TEST(ModelRepositoryTest, FindsVersionsAndConfig) {
  fs::path root = FreshDir("repo");
  fs::path model = root / "mlp";
  WriteFile(model / "config.pbtxt", "name: \"mlp\"\nmax_batch_size: 8\n");
  WriteFile(model / "1" / "model.onnx", "onnx");
  WriteFile(model / "3" / "model.onnx", "onnx");
  WriteFile(model / "10" / "model.onnx", "onnx");
  fs::create_directories(model / "2");                 // No model file: skipped.
  WriteFile(model / "4" / "other.onnx", "onnx");       // Wrong file name: skipped.
  WriteFile(model / "latest" / "model.onnx", "onnx");  // Not numeric: ignored.
  WriteFile(model / "05" / "model.onnx", "onnx");      // Leading zero: ignored, as Triton.
  WriteFile(model / "7", "a file, not a folder");

  ModelRepository repo({root.string()});
  auto source = repo.Find("mlp");
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->name, "mlp");
  EXPECT_EQ(fs::path(source->dir), model);
  EXPECT_TRUE(source->has_config_file);
  EXPECT_EQ(source->config.max_batch_size(), 8);
  std::vector<int64_t> versions;
  for (const auto& [v, path] : source->version_paths) {
    versions.push_back(v);
    EXPECT_TRUE(fs::is_regular_file(path)) << path;
  }
  EXPECT_THAT(versions, ElementsAre(1, 3, 10));
  EXPECT_EQ(fs::path(source->version_paths.at(3)), model / "3" / "model.onnx");
}

TEST(ModelRepositoryTest, ConfigIsOptional) {
  fs::path root = FreshDir("repo");
  WriteFile(root / "bare" / "1" / "model.onnx", "onnx");
  auto source = ModelRepository({root.string()}).Find("bare");
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_FALSE(source->has_config_file);
  EXPECT_EQ(source->config.ByteSizeLong(), 0u);
  EXPECT_EQ(source->version_paths.size(), 1u);
}

TEST(ModelRepositoryTest, HonoursDefaultModelFilename) {
  fs::path root = FreshDir("repo");
  WriteFile(root / "m" / "config.pbtxt", "default_model_filename: \"net.onnx\"\n");
  WriteFile(root / "m" / "1" / "model.onnx", "onnx");
  WriteFile(root / "m" / "2" / "net.onnx", "onnx");
  auto source = ModelRepository({root.string()}).Find("m");
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_EQ(source->version_paths.size(), 1u);
  EXPECT_EQ(fs::path(source->version_paths.at(2)), root / "m" / "2" / "net.onnx");

  WriteFile(root / "evil" / "config.pbtxt", "default_model_filename: \"../../x.onnx\"\n");
  auto evil = ModelRepository({root.string()}).Find("evil");
  EXPECT_EQ(evil.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(evil.status().message()), HasSubstr("default_model_filename"));
}

TEST(ModelRepositoryTest, FolderWithoutVersionsHasNone) {
  fs::path root = FreshDir("repo");
  fs::create_directories(root / "empty" / "1");
  auto source = ModelRepository({root.string()}).Find("empty");
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_TRUE(source->version_paths.empty());
}

// What KServe's storage initializer leaves in /mnt/models: the model file in a model folder
// without version folders, or in the repository folder itself (named --model-name); version 1.
TEST(ModelRepositoryTest, KServeLayoutsServeVersionOne) {
  fs::path folder = FreshDir("folder");
  WriteFile(folder / "resnet" / "model.onnx", "onnx");
  WriteFile(folder / "resnet" / "config.pbtxt", "max_batch_size: 4\n");
  ModelRepository repo({folder.string()});
  auto resnet = repo.Find("resnet");
  ASSERT_TRUE(resnet.ok()) << resnet.status();
  ASSERT_EQ(resnet->version_paths.size(), 1u);
  EXPECT_EQ(resnet->version_paths.at(1), (folder / "resnet" / "model.onnx").string());
  EXPECT_EQ(resnet->config.max_batch_size(), 4);

  fs::path single = FreshDir("single");
  WriteFile(single / "model.onnx", "onnx");
  ModelRepository named({single.string()}, "sentiment");
  EXPECT_THAT(named.ListModels(), ElementsAre("sentiment"));
  auto model = named.Find("sentiment");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->dir, single.string());
  EXPECT_FALSE(model->has_config_file);
  ASSERT_EQ(model->version_paths.size(), 1u);
  EXPECT_EQ(model->version_paths.at(1), (single / "model.onnx").string());
  EXPECT_EQ(named.Find("model").status().code(), absl::StatusCode::kNotFound);
  // The default name, and version folders still win over a file beside them.
  EXPECT_THAT(ModelRepository({single.string()}).ListModels(), ElementsAre("model"));
  WriteFile(folder / "both" / "model.onnx", "onnx");
  WriteFile(folder / "both" / "2" / "model.onnx", "onnx");
  auto both = repo.Find("both");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_THAT(both->version_paths, ElementsAre(std::pair<const int64_t, std::string>(
                                       2, (folder / "both" / "2" / "model.onnx").string())));
}

TEST(ModelRepositoryTest, MissingModelIsNotFound) {
  fs::path root = FreshDir("repo");
  WriteFile(root / "file_not_dir", "x");
  ModelRepository repo({root.string()});
  auto missing = repo.Find("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(root.string()));
  EXPECT_EQ(repo.Find("file_not_dir").status().code(), absl::StatusCode::kNotFound);
}

TEST(ModelRepositoryTest, RejectsNamesThatLeaveTheRoot) {
  fs::path root = FreshDir("repo");
  WriteFile(root / "m" / "1" / "model.onnx", "onnx");
  ModelRepository repo({(root / "m").string()});
  for (const char* name : {"..", ".", "", "../m", "a/b"}) {
    EXPECT_EQ(repo.Find(name).status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
}

TEST(ModelRepositoryTest, ModelInTwoRootsIsAnError) {
  fs::path a = FreshDir("a");
  fs::path b = FreshDir("b");
  fs::create_directories(a / "dup");
  fs::create_directories(b / "dup");
  auto found = ModelRepository({a.string(), b.string()}).Find("dup");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(found.status().message()), HasSubstr((a / "dup").string()));
  EXPECT_THAT(std::string(found.status().message()), HasSubstr((b / "dup").string()));
}

TEST(ModelRepositoryTest, BadConfigNamesFileAndField) {
  fs::path root = FreshDir("repo");
  WriteFile(root / "m" / "config.pbtxt", "name: \"m\"\nmax_batch_sizee: 4\n");
  auto found = ModelRepository({root.string()}).Find("m");
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(found.status().message()),
              HasSubstr((root / "m" / "config.pbtxt").string() + ":2:1: unknown field"));
  EXPECT_THAT(std::string(found.status().message()), HasSubstr("max_batch_sizee"));
}

inference::ModelVersionPolicy Policy(const std::string& which, std::vector<int64_t> values = {}) {
  inference::ModelVersionPolicy p;
  if (which == "latest") p.mutable_latest()->set_num_versions(values.empty() ? 0 : values[0]);
  if (which == "all") p.mutable_all();
  if (which == "specific") {
    p.mutable_specific();
    for (int64_t v : values) p.mutable_specific()->add_versions(v);
  }
  return p;
}

TEST(SelectVersionsTest, TritonSemantics) {
  const std::vector<int64_t> available = {3, 1, 10, 2};
  EXPECT_THAT(SelectVersions(Policy("none"), available), ElementsAre(10));
  EXPECT_THAT(SelectVersions(Policy("latest", {1}), available), ElementsAre(10));
  EXPECT_THAT(SelectVersions(Policy("latest", {2}), available), ElementsAre(3, 10));
  EXPECT_THAT(SelectVersions(Policy("latest", {9}), available), ElementsAre(1, 2, 3, 10));
  EXPECT_THAT(SelectVersions(Policy("all"), available), ElementsAre(1, 2, 3, 10));
  EXPECT_THAT(SelectVersions(Policy("specific", {2, 7, 10}), available), ElementsAre(2, 10));
  EXPECT_THAT(SelectVersions(Policy("specific", {7}), available), IsEmpty());
  EXPECT_THAT(SelectVersions(Policy("none"), {}), IsEmpty());
  EXPECT_THAT(SelectVersions(Policy("all"), {}), IsEmpty());
}

}  // namespace
}  // namespace cuvil
