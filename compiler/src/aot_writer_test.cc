// WriteAotLibrary with several bodies of one model: what goes into the archive and the header,
// one weights blob for byte-equal weights, and the refusals. Linking and running such a library
// on every body is tests/aot/aot_models.sh (ctest aot_body_*). Also the cortex-m7 target's setup.
#include "cuvil/compiler/aot_writer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cuvil/compiler/compiler.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace cuvil {
namespace {

// x [batch, 4] -> MatMul with a [4, width] initializer -> y [batch, width].
std::string MatMulModel(int64_t width) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("tiny");
  auto io = [](onnx::ValueInfoProto* v, const std::string& name, int64_t cols) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(cols);
  };
  io(g->add_input(), "x", 4);
  io(g->add_output(), "y", width);
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->add_dims(width);
  for (int64_t i = 0; i < 4 * width; ++i) w->add_float_data(0.25f * static_cast<float>(i % 7));
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("MatMul");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  return m.SerializeAsString();
}

CompiledModel CompileFor(const std::string& cpu, int64_t width = 8) {
  CompileOptions options;
  options.target_cpu = cpu;
  EXPECT_TRUE(ConfigureAotTarget("", &options).ok());
  auto compiled = CompileOnnxBytes(MatMulModel(width), options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? std::move(*compiled) : CompiledModel{};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

AotOptions Options(const std::string& dir) {
  AotOptions o;
  o.out_dir = dir;
  o.name = "tiny";
  o.runtime_archive = CUVIL_AOT_RUNTIME_ARCHIVE;
  o.source = "tiny.onnx";
  return o;
}

class AotWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("cuvil_aot_writer_test_" + std::to_string(::getpid())))
               .string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(AotWriterTest, SeveralBodiesShareByteEqualWeightsAndTheHeaderNamesThem) {
  if (std::string(AotHostArch()) != "x86_64") GTEST_SKIP() << "x86-64 bodies only";
  const CompiledModel v4 = CompileFor("x86-64-v4"), base = CompileFor("x86-64");
  ASSERT_FALSE(v4.weights.empty());
  ASSERT_EQ(v4.weights.size(), base.weights.size());
  AotReport report;
  ASSERT_TRUE(
      WriteAotLibrary({{"x86-64-v4", 4, &v4}, {"x86-64", 1, &base}}, Options(dir_), &report).ok());
  EXPECT_EQ(report.weights_bytes, static_cast<int64_t>(v4.weights.size()));  // one blob
  EXPECT_EQ(report.code_bytes,
            static_cast<int64_t>(v4.object_code.size() + base.object_code.size()));
  const std::string archive = ReadFile(report.library_path);
  EXPECT_NE(archive.find("tiny_model_x86-64-v4.o"), std::string::npos);
  EXPECT_NE(archive.find("tiny_model_x86-64.o"), std::string::npos);
  EXPECT_NE(archive.find("tiny__cuvil_entry__t0"), std::string::npos);
  EXPECT_NE(archive.find("tiny__cuvil_entry__t1"), std::string::npos);
  EXPECT_NE(archive.find("tiny_tier"), std::string::npos);
  const std::string header = ReadFile(report.header_path);
  EXPECT_NE(header.find("const char* tiny_tier(void);"), std::string::npos);
  EXPECT_NE(header.find(" *   x86-64-v4 (x86-64 level 4),\n *   x86-64.\n"), std::string::npos)
      << header;

  // One body keeps the compiler's names and its single weights blob.
  AotReport single;
  ASSERT_TRUE(WriteAotLibrary(v4, Options(dir_), &single).ok());
  EXPECT_EQ(single.weights_bytes, static_cast<int64_t>(v4.weights.size()));
  EXPECT_EQ(ReadFile(single.library_path).find("cuvil_entry__t0"), std::string::npos);
}

TEST_F(AotWriterTest, BadBodyListsAreRefusedAndWriteNothing) {
  if (std::string(AotHostArch()) != "x86_64") GTEST_SKIP() << "x86-64 bodies only";
  const CompiledModel v4 = CompileFor("x86-64-v4"), other = CompileFor("x86-64", 6);
  AotReport report;
  auto empty = WriteAotLibrary(std::vector<AotTier>{}, Options(dir_), &report);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  auto null_model = WriteAotLibrary({{"x86-64", 1, nullptr}}, Options(dir_), &report);
  EXPECT_EQ(null_model.code(), absl::StatusCode::kInvalidArgument);
  auto mismatch =
      WriteAotLibrary({{"x86-64-v4", 4, &v4}, {"x86-64", 1, &other}}, Options(dir_), &report);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("other inputs or outputs"), std::string::npos) << mismatch;
  AotOptions wasm = Options(dir_);
  wasm.target_triple = "wasm32-unknown-wasi";
  auto cross = WriteAotLibrary({{"a", 4, &v4}, {"b", 1, &v4}}, wasm, &report);
  EXPECT_EQ(cross.code(), absl::StatusCode::kInvalidArgument);
  // Output sizes the data decides (NonZero's count) cannot be sized by NAME_arena_bytes.
  CompiledModel counted = v4;
  counted.symbols.push_back("count");
  counted.data_dependent_dims.push_back({1, {}, "NonZero 'nz' (opset 13)"});
  auto data_sized = WriteAotLibrary(counted, Options(dir_), &report);
  EXPECT_EQ(data_sized.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(data_sized.message().find("NonZero 'nz'"), std::string::npos) << data_sized;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/libtiny.a"));
}

// --target cortex-m7: Thumb-2 for bare metal with the single-precision FPU; the model compiles to a
// 32-bit ARM ELF object and the header shows the arm-none-eabi-gcc link. The firmware built from
// such a library runs under QEMU in tests/aot/cortex_m7 (ctest aot_cortex_m7_*).
TEST(AotTargetTest, CortexM7IsBareMetalThumbWithSinglePrecisionFpu) {
  CompileOptions options;
  auto runtime = ConfigureAotTarget("cortex-m7", &options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  EXPECT_EQ(*runtime, "libcuvil_aot_runtime-cortex-m7.a");
  EXPECT_EQ(options.target_triple, "thumbv7em-none-eabihf");
  EXPECT_EQ(options.target_cpu, "cortex-m7");
  EXPECT_NE(options.target_features.find("-fp64"), std::string::npos) << options.target_features;
  auto compiled = CompileOnnxBytes(MatMulModel(8), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const std::string& object = compiled->object_code;
  ASSERT_GT(object.size(), 20u);
  EXPECT_EQ(object.substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_EQ(object[4], 1) << "ELFCLASS32";
  EXPECT_EQ(static_cast<uint8_t>(object[18]) | static_cast<uint8_t>(object[19]) << 8, 40)
      << "EM_ARM";
  const std::string header = AotHeader(*compiled, "tiny", "tiny.onnx", options.target_triple);
  EXPECT_NE(header.find("arm-none-eabi-gcc -mcpu=cortex-m7 -mfpu=fpv5-sp-d16"), std::string::npos)
      << header;
  auto unknown = ConfigureAotTarget("cortex-m4", &options);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("cortex-m7"), std::string::npos);
}

// NAME.h declares aot_layout.def's PUBLIC structs as C typedefs, field by field in the listed
// order with the listed C types, and none of its PRIVATE ones (cuvil_aot_run's own data).
TEST(AotHeaderTest, DeclaresThePublicStructsOfTheLayoutDescription) {
  const CompiledModel model = CompileFor("");
  const std::string header = AotHeader(model, "tiny", "tiny.onnx");
#define CUVIL_AOT_FIELD(f, kind, ctype, doc) "  " #ctype " " #f ";",
#define CUVIL_AOT_STRUCT(s, visibility, doc, fields)                               \
  {                                                                                \
    const std::vector<std::string> lines = {fields};                               \
    const size_t at = header.find("typedef struct " #s " {\n");                    \
    if (std::string(#visibility) == "PUBLIC") {                                    \
      ASSERT_NE(at, std::string::npos) << #s << "\n" << header;                    \
      size_t pos = at;                                                             \
      for (const std::string& line : lines) {                                      \
        pos = header.find("\n" + line, pos);                                       \
        EXPECT_NE(pos, std::string::npos) << #s << ": " << line << "\n" << header; \
      }                                                                            \
      EXPECT_LT(pos, header.find("} " #s ";\n", at)) << #s;                        \
    } else {                                                                       \
      EXPECT_EQ(at, std::string::npos) << #s;                                      \
      EXPECT_EQ(header.find(#s), std::string::npos) << #s;                         \
    }                                                                              \
  }
#include "cuvil/runtime/aot_layout.def"
#undef CUVIL_AOT_STRUCT
#undef CUVIL_AOT_FIELD
  EXPECT_NE(header.find("  int32_t elem_size; /* bytes per element */\n"), std::string::npos)
      << header;
}

// Each cross target shapes its kernels for its own vectors (CompileOptions::vector_bits) rather
// than the compiling host's: pairs of scalar registers on a Cortex-M7, scalar floats in scalar
// WebAssembly, 128 bits for NEON and SIMD128. The host's own target keeps the host's width.
TEST(AotTargetTest, KernelsAreShapedForTheTargetsVectors) {
  const std::pair<const char*, int> targets[] = {
      {"cortex-m7", 64}, {"wasm32-scalar", 32}, {"wasm32", 128}, {"aarch64", 128}, {"", 0}};
  for (const auto& [target, bits] : targets) {
    CompileOptions options;
    ASSERT_TRUE(ConfigureAotTarget(target, &options).ok()) << target;
    EXPECT_EQ(options.vector_bits, bits) << target;
  }
}

}  // namespace
}  // namespace cuvil
