// Importing models: weights in external data files next to the model, large raw_data weights read
// straight from the model bytes, one preparation lowered at several optimisation levels.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/onnx_importer.h"
#include "cuvil/compiler/tensor_file.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/jitcache/object_cache.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_models.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

// Writes BinaryWithConstant("Add", 4, ...) with its constant moved to `location` at `offset`
// (external_data values are strings in the format, so tests can store anything there).
std::string WriteExternalModel(const std::string& dir, const std::string& location,
                               const std::string& offset, const std::string& length = "16") {
  fs::create_directories(dir);
  onnx::ModelProto model;
  model.ParseFromString(testing::BinaryWithConstant("Add", 4, 0.0f));
  onnx::TensorProto* c = model.mutable_graph()->mutable_initializer(0);
  c->clear_float_data();
  c->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    auto* e = c->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  add("offset", offset);
  add("length", length);
  std::string path = dir + "/model.onnx";
  std::ofstream(path, std::ios::binary) << model.SerializeAsString();
  return path;
}

TEST(OnnxImportTest, ExternalDataIsReadFromTheModelDirectory) {
  std::string dir = ::testing::TempDir() + "/external_ok";
  std::string path = WriteExternalModel(dir, "weights.bin", "8");
  float weights[4] = {1, 2, 3, 4};
  std::ofstream out(dir + "/weights.bin", std::ios::binary);
  out.write("padding!", 8);
  out.write(reinterpret_cast<const char*>(weights), sizeof(weights));
  out.close();
  auto compiled = CompileOnnxFile(path);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("ext/1", std::move(*compiled));
  ASSERT_TRUE(loaded.ok());
  HostTensor x(DType::kFloat32, {2, 4});
  auto y = (*loaded)->Run({x});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(std::vector<float>((*y)[0].data_as<float>(), (*y)[0].data_as<float>() + 8),
              ::testing::ElementsAre(1, 2, 3, 4, 1, 2, 3, 4));
}

TEST(OnnxImportTest, ExternalDataOutsideTheModelDirectoryIsRefused) {
  std::string dir = ::testing::TempDir() + "/external_escape";
  auto compiled = CompileOnnxFile(WriteExternalModel(dir, "../secret.bin", "0"));
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr("secret.bin"));
}

TEST(OnnxImportTest, MissingOrShortExternalDataIsAnError) {
  std::string dir = ::testing::TempDir() + "/external_short";
  std::string path = WriteExternalModel(dir, "weights.bin", "0");
  EXPECT_FALSE(CompileOnnxFile(path).ok());  // File missing.
  std::ofstream(dir + "/weights.bin", std::ios::binary) << "short";
  auto compiled = CompileOnnxFile(path);
  ASSERT_FALSE(compiled.ok());
}

// std::stoll used to throw on these and terminate the loader thread.
TEST(OnnxImportTest, MalformedExternalDataOffsetOrLengthIsInvalidArgument) {
  std::string dir = ::testing::TempDir() + "/external_malformed";
  fs::create_directories(dir);
  std::ofstream(dir + "/weights.bin", std::ios::binary) << std::string(64, '\0');
  struct Case {
    std::string offset, length, key;
  };
  for (const Case& c :
       {Case{"abc", "16", "offset"}, Case{"", "16", "offset"}, Case{"-8", "16", "offset"},
        Case{"99999999999999999999999", "16", "offset"}, Case{"0", "sixteen", "length"},
        Case{"0", "-16", "length"}, Case{"0", "1e3", "length"}}) {
    auto compiled = CompileOnnxFile(WriteExternalModel(dir, "weights.bin", c.offset, c.length));
    ASSERT_FALSE(compiled.ok()) << c.offset << " " << c.length;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
    EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr("'c'"));
    EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr(c.key));
  }
}

TEST(OnnxImportTest, ExternalDataBeyondTheFileIsInvalidArgument) {
  std::string dir = ::testing::TempDir() + "/external_beyond";
  fs::create_directories(dir);
  std::ofstream(dir + "/weights.bin", std::ios::binary) << std::string(64, '\0');
  // 60 + 16 > 64, and INT64_MAX + 16 overflows.
  for (const std::string offset : {"60", "9223372036854775807"}) {
    auto compiled = CompileOnnxFile(WriteExternalModel(dir, "weights.bin", offset));
    ASSERT_FALSE(compiled.ok()) << offset;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
    EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr("beyond the end"));
  }
  // In bounds at the very end of the file.
  EXPECT_TRUE(CompileOnnxFile(WriteExternalModel(dir, "weights.bin", "48")).ok());
}

// BinaryWithConstant("Add", width, ...) with the constant c[i] = i stored as raw_data, large
// enough for the importer to read it straight from the model's bytes; `extra` raw bytes make the
// field disagree with the shape.
std::string RawDataModel(int64_t width, size_t extra = 0) {
  onnx::ModelProto model;
  model.ParseFromString(testing::BinaryWithConstant("Add", width, 0.0f));
  onnx::TensorProto* c = model.mutable_graph()->mutable_initializer(0);
  c->clear_float_data();
  std::vector<float> values(static_cast<size_t>(width));
  for (int64_t i = 0; i < width; ++i) values[i] = static_cast<float>(i);
  std::string raw(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  raw.append(extra, '\0');
  c->set_raw_data(raw);
  return model.SerializeAsString();
}

// y = x + c for a batch of 2 rows of zeros and ones.
void ExpectAddsRawConstant(CompiledModel compiled, int64_t width) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("raw/1", std::move(compiled));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  HostTensor x(DType::kFloat32, {2, width});
  for (int64_t i = 0; i < width; ++i) x.data_as<float>()[width + i] = 1;
  auto y = (*loaded)->Run({x});
  ASSERT_TRUE(y.ok()) << y.status();
  const float* out = (*y)[0].data_as<float>();
  for (int64_t i = 0; i < width; ++i) {
    ASSERT_EQ(out[i], static_cast<float>(i)) << i;
    ASSERT_EQ(out[width + i], static_cast<float>(i) + 1) << i;
  }
}

TEST(OnnxImportTest, LargeRawDataIsReadFromFileAndBytes) {
  constexpr int64_t kWidth = 4096;  // 16 KiB: read from the model's bytes, not the parsed proto.
  const std::string bytes = RawDataModel(kWidth);
  std::string dir = ::testing::TempDir() + "/raw_data";
  fs::create_directories(dir);
  std::ofstream(dir + "/model.onnx", std::ios::binary) << bytes;
  auto from_file = CompileOnnxFile(dir + "/model.onnx");
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  ExpectAddsRawConstant(*std::move(from_file), kWidth);
  auto from_bytes = CompileOnnxBytes(bytes);
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status();
  ExpectAddsRawConstant(*std::move(from_bytes), kWidth);
}

TEST(OnnxImportTest, LargeRawDataOfTheWrongSizeIsInvalidArgument) {
  auto compiled = CompileOnnxBytes(RawDataModel(4096, /*extra=*/4));
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
  EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr("holds 16388 bytes of data"));
}

TEST(OnnxImportTest, TruncatedModelIsInvalidArgument) {
  std::string bytes = RawDataModel(4096);
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{7}}) {
    auto compiled = CompileOnnxBytes(bytes.substr(0, keep));
    ASSERT_FALSE(compiled.ok()) << keep;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
  }
}

// A Constant node without an output is the model's error. The importer runs beside the ONNX
// checker, so it sees the model unchecked: the fuzzer found it reading the missing output (a null
// dereference; fuzz/regressions/fuzz_onnx_compile). Whichever refuses first names the error.
TEST(OnnxImportTest, ConstantWithoutAnOutputIsInvalidArgument) {
  const std::string path = std::string(std::getenv("CUVIL_SOURCE_DIR")) +
                           "/fuzz/regressions/fuzz_onnx_compile/constant-without-output.onnx";
  std::ifstream file(path, std::ios::binary);
  ASSERT_TRUE(file.good()) << path;
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto compiled = CompileOnnxBytes(bytes);
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
}

// Both tiers lower one preparation: one weights blob, same results.
TEST(OnnxImportTest, PreparedModelLowersEveryTierFromOneWeightsBlob) {
  constexpr int64_t kWidth = 4096;
  auto prepared = PrepareOnnxBytes(RawDataModel(kWidth));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  CompileOptions quick;
  quick.opt_level = kFastTierOptLevel;
  auto fast = (*prepared)->Lower(quick);
  auto full = (*prepared)->Lower(CompileOptions());
  ASSERT_TRUE(fast.ok()) << fast.status();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(fast->weights.data(), full->weights.data());
  EXPECT_TRUE(full->weights.read_only());
  EXPECT_NE(fast->object_code, full->object_code);
  ExpectAddsRawConstant(*std::move(fast), kWidth);
  ExpectAddsRawConstant(*std::move(full), kWidth);
}

// The tiers of a convolutional model lowered at once from two threads, while the preparation's
// weights blob (convolution weights packed straight into it) may still be filling: both compute
// the reference outputs from the one blob.
TEST(OnnxImportTest, TiersLoweredConcurrentlyShareOneFilledWeightsBlob) {
  const std::string dir = std::string(std::getenv("CUVIL_SOURCE_DIR")) + "/../shared/models/lenet";
  auto prepared = PrepareOnnxFile(dir + "/model.onnx");
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  CompileOptions quick;
  quick.opt_level = kFastTierOptLevel;
  absl::StatusOr<CompiledModel> fast = absl::UnknownError("unset");
  absl::StatusOr<CompiledModel> full = absl::UnknownError("unset");
  std::thread other([&] { full = (*prepared)->Lower(CompileOptions()); });
  fast = (*prepared)->Lower(quick);
  other.join();
  ASSERT_TRUE(fast.ok()) << fast.status();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(fast->weights.data(), full->weights.data());
  auto input = ReadTensorFile(dir + "/test_data_set_0/input_0.pb");
  auto want = ReadTensorFile(dir + "/test_data_set_0/output_0.pb");
  ASSERT_TRUE(input.ok() && want.ok());
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  int index = 0;
  for (auto* model : {&*fast, &*full}) {
    auto loaded = (*engine)->Load(absl::StrCat("lenet/", ++index), std::move(*model));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto out = (*loaded)->Run({input->tensor});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ((*out)[0].num_elements(), want->tensor.num_elements());
    for (int64_t i = 0; i < want->tensor.num_elements(); ++i) {
      const float w = want->tensor.data_as<float>()[i];
      EXPECT_NEAR((*out)[0].data_as<float>()[i], w, 1e-3 + 1e-3 * std::abs(w)) << i;
    }
  }
}

// Large initializers stay in the model file until the weights fill reads them. A file rewritten
// in place meanwhile is refused (never half old, half new weights); one replaced by rename is not
// the file that was opened, whose bytes the compile still reads.
TEST(OnnxImportTest, DeferredWeightsComeFromTheFileAsOpened) {
  constexpr int64_t kWidth = 4096;
  const std::string dir = ::testing::TempDir() + "/deferred_weights";
  fs::create_directories(dir);
  const std::string path = dir + "/model.onnx";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << RawDataModel(kWidth);
  auto deferred = [](const ir::Graph& g) {
    int n = 0;
    for (const auto& v : g.values()) n += v->is_constant() && v->constant->deferred();
    return n;
  };

  // Replaced by rename: the compile reads the original bytes.
  auto graph = ImportOnnxFile(path);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(deferred(**graph), 1);
  std::string other = RawDataModel(kWidth);
  other[other.size() / 2] ^= 0x55;
  std::ofstream(path + ".new", std::ios::binary) << other;
  fs::rename(path + ".new", path);
  auto compiled = CompileGraph(**graph);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ExpectAddsRawConstant(*std::move(compiled), kWidth);

  // Rewritten in place (same inode, other modification time): refused with DataLoss.
  graph = ImportOnnxFile(path);
  ASSERT_TRUE(graph.ok()) << graph.status();
  {
    const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    const std::string again = RawDataModel(kWidth);
    ASSERT_EQ(pwrite(fd, again.data(), again.size(), 0), static_cast<ssize_t>(again.size()));
    const struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
    ASSERT_EQ(futimens(fd, times), 0);
    close(fd);
  }
  compiled = CompileGraph(**graph);
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kDataLoss) << compiled.status();
  EXPECT_THAT(compiled.status().message(),
              ::testing::HasSubstr("changed while the model was compiled"));
}

// A sequence input and an If whose condition is only known at run time: both branches build a
// two-tensor sequence (in opposite orders), the If selects between their element tensors, and
// ConcatFromSequence joins the selected pair.
TEST(OnnxImportTest, SequencesThroughARunTimeIfSelectTheRightElements) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("sequence_if");
  auto* cond = g->add_input();
  cond->set_name("cond");
  cond->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BOOL);
  cond->mutable_type()->mutable_tensor_type()->mutable_shape();
  auto* xs = g->add_input();
  xs->set_name("xs");
  xs->mutable_type()
      ->mutable_sequence_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(onnx::TensorProto::FLOAT);
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  y->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  auto node = [](onnx::GraphProto* graph, const std::string& op, std::vector<std::string> ins,
                 std::vector<std::string> outs) {
    onnx::NodeProto* n = graph->add_node();
    n->set_op_type(op);
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(o);
    return n;
  };
  auto branch = [&](const std::string& name, bool swap) {
    onnx::GraphProto b;
    b.set_name(name);
    onnx::NodeProto* c0 = node(&b, "Constant", {}, {name + "_zero"});
    onnx::NodeProto* c1 = node(&b, "Constant", {}, {name + "_one"});
    for (auto [c, v] : {std::pair{c0, 0}, std::pair{c1, 1}}) {
      auto* a = c->add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
      a->mutable_t()->add_int64_data(v);
    }
    node(&b, "SequenceAt", {"xs", name + (swap ? "_one" : "_zero")}, {name + "_first"});
    node(&b, "SequenceAt", {"xs", name + (swap ? "_zero" : "_one")}, {name + "_second"});
    node(&b, "SequenceConstruct", {name + "_first", name + "_second"}, {name + "_seq"});
    auto* out = b.add_output();
    out->set_name(name + "_seq");
    out->mutable_type()
        ->mutable_sequence_type()
        ->mutable_elem_type()
        ->mutable_tensor_type()
        ->set_elem_type(onnx::TensorProto::FLOAT);
    return b;
  };
  onnx::NodeProto* ifn = node(g, "If", {"cond"}, {"picked"});
  for (auto [attr, swap] : {std::pair{"then_branch", false}, std::pair{"else_branch", true}}) {
    auto* a = ifn->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = branch(attr, swap);
  }
  auto* axis = node(g, "ConcatFromSequence", {"picked"}, {"y"})->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(0);

  CompileOptions options;
  options.import.allow_structured_io = true;
  options.import.structured_inputs["xs"].element_shapes = {{2}, {2}};
  auto compiled = CompileOnnxBytes(model.SerializeAsString(), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(compiled->inputs.size(), 3u);  // cond, xs[0], xs[1]
  EXPECT_EQ(compiled->inputs[1].name, "xs[0]");
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("sequence_if/1", std::move(*compiled));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  HostTensor a(DType::kFloat32, {2}), b(DType::kFloat32, {2});
  a.data_as<float>()[0] = 1;
  a.data_as<float>()[1] = 2;
  b.data_as<float>()[0] = 3;
  b.data_as<float>()[1] = 4;
  for (bool c : {true, false}) {
    HostTensor ct(DType::kBool, {});
    ct.SetFromInt64(0, c ? 1 : 0);
    auto out = (*loaded)->Run({ct, a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    const float* v = (*out)[0].data_as<float>();
    EXPECT_THAT(std::vector<float>(v, v + 4),
                c ? ::testing::ElementsAre(1, 2, 3, 4) : ::testing::ElementsAre(3, 4, 1, 2));
  }
}

// The brief: the server never crashes on bad input. A model file truncated and rewritten in place
// (same inode) while it is imported must give a result or an error, never SIGBUS: the importer
// never maps the file: it reads it with pread, so a short file is an error.
TEST(OnnxImportTest, ModelTruncatedInPlaceWhileImportingNeverCrashes) {
  constexpr int64_t kWidth = 1 << 20;  // 4 MiB of weights: the import spans many pages.
  const std::string bytes = RawDataModel(kWidth);
  const std::string dir = ::testing::TempDir() + "/truncated_while_importing";
  fs::create_directories(dir);
  const std::string path = dir + "/model.onnx";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  std::atomic<bool> stop{false};
  std::atomic<int> rewrites{0};
  std::thread writer([&] {
    const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    while (!stop.load()) {
      ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes.size() / 3)), 0);
      ASSERT_EQ(ftruncate(fd, 0), 0);
      ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
      rewrites.fetch_add(1);
    }
    close(fd);
  });
  int imported = 0, refused = 0;
  for (int i = 0; i < 60 || rewrites.load() < 20; ++i) {
    auto graph = ImportOnnxFile(path);
    if (graph.ok()) {
      ++imported;
    } else {
      ++refused;  // Read while short: "shrank while it was read", or a truncated message.
      EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
    }
  }
  stop.store(true);
  writer.join();
  EXPECT_GE(imported + refused, 60);
  std::printf("imports: %d ok, %d refused, %d rewrites\n", imported, refused, rewrites.load());
  // Whole, untouched files import (the copy is exactly what was read).
  auto intact = ImportOnnxFile(path);
  ASSERT_TRUE(intact.ok()) << intact.status();
}

// input_shapes fixes the dims it names and keeps those given as -1: the batch stays free while
// the image size becomes static (what a server config's dims ask for), and the compiled code
// then names only the batch. A value over a static dim must agree with it; the rank must match.
TEST(OnnxImportTest, InputShapesFixSomeDimsAndKeepOthers) {
  const std::string bytes = testing::PoolUpsampleConcatModel();  // x: [batch, 1, height, width]
  CompileOptions options;
  options.import.input_shapes["x"] = {-1, -1, 4, 6};
  auto compiled = CompileOnnxBytes(bytes, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(SymShapeToString(compiled->inputs[0].shape), "[batch,1,4,6]");
  EXPECT_EQ(SymShapeToString(compiled->outputs[0].shape), "[batch,2,4,6]");
  auto free = CompileOnnxBytes(bytes);
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_NE(SymShapeToString(free->inputs[0].shape), "[batch,1,4,6]");

  options.import.input_shapes["x"] = {-1, 3, 4, 6};  // the model has 1 channel
  auto wrong = CompileOnnxBytes(bytes, options);
  ASSERT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument) << wrong.status();
  EXPECT_THAT(std::string(wrong.status().message()),
              ::testing::HasSubstr("input 'x': dims [-1,3,4,6] do not match the model's shape "
                                   "[batch,1,height,width] at dim 1"));
  options.import.input_shapes["x"] = {-1, 4, 6};
  auto rank = CompileOnnxBytes(bytes, options);
  ASSERT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument) << rank.status();
  EXPECT_THAT(std::string(rank.status().message()),
              ::testing::HasSubstr("do not match the model's shape [batch,1,height,width]: "
                                   "rank 3, the model's 4"));
}

// What a config's dims add over the model's own: values over static dims become -1 and inputs
// left with only -1 disappear, so a config that fixes nothing keeps the plain compile's options
// (and JIT cache key); free dims it fixes, contradictions and wrong ranks stay.
TEST(OnnxImportTest, WithoutDeclaredDimsKeepsOnlyWhatFixesAFreeDim) {
  const std::string bytes = testing::PoolUpsampleConcatModel();  // x: [batch, 1, height, width]
  using Shapes = std::map<std::string, std::vector<int64_t>>;
  auto same = WithoutDeclaredDims(Shapes{{"x", {-1, 1, -1, -1}}}, "", bytes);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->empty());
  auto fixes = WithoutDeclaredDims(Shapes{{"x", {-1, 1, 4, 6}}}, "", bytes);
  ASSERT_TRUE(fixes.ok()) << fixes.status();
  EXPECT_EQ(*fixes, (Shapes{{"x", {-1, -1, 4, 6}}}));
  auto wrong = WithoutDeclaredDims(Shapes{{"x", {-1, 3, -1, -1}}, {"y", {2}}}, "", bytes);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_EQ(*wrong, (Shapes{{"x", {-1, 3, -1, -1}}, {"y", {2}}}));
  auto rank = WithoutDeclaredDims(Shapes{{"x", {1, 4, 6}}}, "", bytes);
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, (Shapes{{"x", {1, 4, 6}}}));
  EXPECT_FALSE(WithoutDeclaredDims(Shapes{{"x", {1}}}, "", "not a model").ok());
}

}  // namespace
}  // namespace cuvil
