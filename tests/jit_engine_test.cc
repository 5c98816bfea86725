// Integration tests of compiled models in JIT namespaces: symbolic batch, isolation of versions
// with identical symbol names, unloading, and the redirectable function table.
#include "cuvil/jitcache/jit_engine.h"

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "cuvil/compiler/compiler.h"
#include "cuvil/runtime/parallel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_models.h"

namespace cuvil {
namespace {

CompiledModel MustCompile(const std::string& bytes) {
  auto m = CompileOnnxBytes(bytes);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

HostTensor Filled(int64_t batch, int64_t width, float start) {
  HostTensor t(DType::kFloat32, {batch, width});
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.data_as<float>()[i] = start + static_cast<float>(i);
  return t;
}

TEST(JitEngineTest, OneCompileServesEveryBatchSize) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto loaded = (*engine)->Load("add/1", MustCompile(testing::BinaryWithConstant("Add", 8, 0.5f)));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (int64_t batch : {1, 3, 7, 64}) {
    HostTensor x = Filled(batch, 8, 1.0f);
    auto out = (*loaded)->Run({x});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ((*out)[0].shape(), (std::vector<int64_t>{batch, 8}));
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      ASSERT_FLOAT_EQ((*out)[0].data_as<float>()[i], x.data_as<float>()[i] + 0.5f);
    }
  }
}

TEST(JitEngineTest, OneCompileServesEveryShapeOfSeveralFreeDims) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto loaded = (*engine)->Load("two/1", MustCompile(testing::TwoSymbolModel()));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->model().symbols, (std::vector<std::string>{"batch", "seq"}));
  EXPECT_TRUE((*loaded)->model().arena.symbolic());
  for (auto [batch, seq] : {std::pair<int64_t, int64_t>{1, 1}, {2, 5}, {3, 17}, {1, 64}, {4, 0}}) {
    HostTensor x = Filled(batch, seq, 1.0f), y = Filled(batch, seq, -0.5f);
    auto out = (*loaded)->Run({x, y});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ((*out)[0].shape(), (std::vector<int64_t>{batch, 2 * seq}));
    const float* z = (*out)[0].data_as<float>();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < seq; ++j) {
        const float xv = x.data_as<float>()[b * seq + j], yv = y.data_as<float>()[b * seq + j];
        ASSERT_FLOAT_EQ(z[b * 2 * seq + j], (xv + yv) * (xv + yv)) << batch << "x" << seq;
        ASSERT_FLOAT_EQ(z[b * 2 * seq + seq + j], xv);
      }
    }
  }
}

TEST(JitEngineTest, InputsDisagreeingOnAFreeDimFailAlone) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("two/1", MustCompile(testing::TwoSymbolModel()));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto bad = (*loaded)->Run({Filled(2, 5, 0.0f), Filled(2, 6, 0.0f)});
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("'y'"));
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("seq"));
  auto rank = (*loaded)->Run({Filled(2, 5, 0.0f), HostTensor(DType::kFloat32, {2, 5, 1})});
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  // The model still serves.
  auto good = (*loaded)->Run({Filled(2, 3, 0.0f), Filled(2, 3, 1.0f)});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)[0].shape(), (std::vector<int64_t>{2, 6}));
}

// One compile serves every even image size; an odd one breaks the Concat of the input with its
// pooled-then-upsampled copy and fails alone, naming the tensor, the dim and the relation.
TEST(JitEngineTest, FreeDimsBreakingTheGraphsAssumptionFailWithAClearError) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("unet/1", MustCompile(testing::PoolUpsampleConcatModel()));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->model().symbols, (std::vector<std::string>{"batch", "height", "width"}));
  for (auto [h, w] : {std::pair<int64_t, int64_t>{2, 2}, {4, 6}, {10, 8}}) {
    HostTensor x(DType::kFloat32, {1, 1, h, w});
    for (int64_t i = 0; i < h * w; ++i) x.data_as<float>()[i] = static_cast<float>(i);
    auto out = (*loaded)->Run({x});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ((*out)[0].shape(), (std::vector<int64_t>{1, 2, h, w}));
    const float* y = (*out)[0].data_as<float>();
    for (int64_t r = 0; r < h; ++r) {
      for (int64_t c = 0; c < w; ++c) {
        ASSERT_FLOAT_EQ(y[r * w + c], static_cast<float>(r * w + c));
        // The max of the 2x2 block holding (r, c) is its bottom-right element.
        const int64_t r1 = r / 2 * 2 + 1, c1 = c / 2 * 2 + 1;
        ASSERT_FLOAT_EQ(y[h * w + r * w + c], static_cast<float>(r1 * w + c1)) << h << "x" << w;
      }
    }
  }
  auto odd = (*loaded)->Run({HostTensor(DType::kFloat32, {1, 1, 5, 4})});
  ASSERT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(odd.status().message(), ::testing::HasSubstr("'y'"));
  EXPECT_THAT(odd.status().message(), ::testing::HasSubstr("height=5"));
  EXPECT_THAT(odd.status().message(), ::testing::HasSubstr("floor(height / 2)"));
  auto again = (*loaded)->Run({HostTensor(DType::kFloat32, {2, 1, 4, 4})});
  EXPECT_TRUE(again.ok()) << again.status();
}

// NonZero's count is a symbol the run sets: one compile serves every count (none, some, all),
// the kernels after NonZero read it, and outputs come back exactly that long.
TEST(JitEngineTest, OutputSizesTheDataDecidesComeBackExact) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("positive/1", MustCompile(testing::PositiveValuesModel()));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const CompiledModel& m = (*loaded)->model();
  ASSERT_EQ(m.data_dependent_dims.size(), 1u);
  EXPECT_EQ(m.symbols.size(), 2u);
  EXPECT_EQ(m.InputSymbolCount(), 1u);
  // Before a run the count holds its upper bound, batch * 4.
  auto syms = (*loaded)->ResolveSymbols({{3, 4}});
  ASSERT_TRUE(syms.ok()) << syms.status();
  EXPECT_EQ(*syms, (std::vector<int64_t>{3, 12}));
  const std::vector<std::vector<float>> cases = {
      {-1, 0, -2, 0}, {1, 2, 3, 4}, {0, 5, -1, 7, 2, 0, 0, -3, 0, 0, 0, 9}, {}};
  for (const std::vector<float>& values : cases) {
    const auto batch = static_cast<int64_t>(values.size() / 4);
    HostTensor x(DType::kFloat32, {batch, 4});
    std::copy(values.begin(), values.end(), x.data_as<float>());
    auto out = (*loaded)->Run({x});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<int64_t> want_idx;
    std::vector<float> want_y;
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] <= 0) continue;
      want_idx.insert(want_idx.end(), {static_cast<int64_t>(i / 4), static_cast<int64_t>(i % 4)});
      want_y.push_back(2 * values[i]);
    }
    const auto count = static_cast<int64_t>(want_y.size());
    ASSERT_EQ((*out)[0].shape(), (std::vector<int64_t>{count, 2}));
    ASSERT_EQ((*out)[1].shape(), (std::vector<int64_t>{count}));
    EXPECT_EQ(std::vector<int64_t>((*out)[0].data_as<int64_t>(),
                                   (*out)[0].data_as<int64_t>() + 2 * count),
              want_idx);
    EXPECT_EQ(std::vector<float>((*out)[1].data_as<float>(), (*out)[1].data_as<float>() + count),
              want_y);
  }
}

TEST(JitEngineTest, StringsAreMadeFilteredAndReadBack) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("strings/1", MustCompile(testing::StringRoundTripModel()));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE((*loaded)->model().makes_strings);
  HostTensor x(DType::kFloat32, {2, 3});
  const float values[] = {1.5f, 0.0f, -2.0f, 1e20f, std::numeric_limits<float>::infinity(), 0.25f};
  std::copy(std::begin(values), std::end(values), x.data_as<float>());
  auto out = (*loaded)->Run({x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].strings(), (std::vector<std::string>{"1.5", "-2", "1E+20", "INF", "0.25"}));
  ASSERT_EQ((*out)[1].shape(), (std::vector<int64_t>{5}));
  EXPECT_EQ(
      std::vector<float>((*out)[1].data_as<float>(), (*out)[1].data_as<float>() + 5),
      (std::vector<float>{1.5f, -2.0f, 1e20f, std::numeric_limits<float>::infinity(), 0.25f}));
  // Every word a stopword: one empty word, which Cast cannot read; the request fails alone.
  HostTensor zeros(DType::kFloat32, {1, 3});
  auto bad = (*loaded)->Run({zeros});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("not a number"));
  auto again = (*loaded)->Run({x});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[0].strings(), (*out)[0].strings());
  // A caller without a heap gets an error code, not a crash.
  // Symbols: batch, then the word count at its bound 2 * 3 + 1, then the heap's slot.
  HostTensor words(DType::kString, {7}), back(DType::kFloat32, {7});
  const void* in[] = {x.data()};
  void* outs[] = {words.data(), back.data()};
  std::vector<uint8_t> arena(
      static_cast<size_t>(*(*loaded)->model().arena.CheckedBytesForSymbols({2, 7})) + 64);
  EXPECT_EQ((*loaded)->Execute(in, outs, 2, arena.data(), nullptr), kEntryNoStringHeap);
  int64_t no_heap[] = {2, 7, 0};
  EXPECT_EQ((*loaded)->Execute(in, outs, 2, arena.data(), no_heap), kEntryNoStringHeap);
}

TEST(JitEngineTest, OpsThatTakeNoStringsRefuseThemAtCompileTime) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("string_add");
  testing::SetFloatValue(g->add_input(), "s", {2});
  g->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::STRING);
  testing::AddNode(g, "Add", {"s", "s"}, "y");
  testing::SetFloatValue(g->add_output(), "y", {2});
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::STRING);
  auto compiled = CompileOnnxBytes(model.SerializeAsString(), {});
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(compiled.status().message(),
              ::testing::HasSubstr("string tensors are not supported by this op"));
}

// Mappings of this process that are writable and executable at once ("rwxp" in /proc/self/maps).
std::vector<std::string> WritableExecutableMappings() {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> found;
  for (std::string line; std::getline(maps, line);) {
    std::istringstream fields(line);
    std::string range, perms;
    fields >> range >> perms;
    if (perms.size() >= 3 && perms[1] == 'w' && perms[2] == 'x') found.push_back(line);
  }
  return found;
}

TEST(JitEngineTest, CompiledCodeIsNeverWritableAndExecutable) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("wx/1", MustCompile(testing::BinaryWithConstant("Add", 8, 1.0f)));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE((*loaded)->Run({Filled(2, 8, 0.0f)}).ok());
  EXPECT_THAT(WritableExecutableMappings(), ::testing::IsEmpty());
}

TEST(JitEngineTest, VersionsWithIdenticalSymbolsAreIsolated) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto v1 = (*engine)->Load("model/1", MustCompile(testing::BinaryWithConstant("Add", 4, 10.0f)));
  auto v2 = (*engine)->Load("model/2", MustCompile(testing::BinaryWithConstant("Mul", 4, 10.0f)));
  ASSERT_TRUE(v1.ok()) << v1.status();
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_NE((*v1)->entry(), (*v2)->entry());
  EXPECT_THAT((*engine)->Namespaces(), ::testing::ElementsAre("model/1", "model/2"));
  HostTensor x = Filled(2, 4, 1.0f);
  EXPECT_FLOAT_EQ((*(*v1)->Run({x}))[0].data_as<float>()[0], 11.0f);
  EXPECT_FLOAT_EQ((*(*v2)->Run({x}))[0].data_as<float>()[0], 10.0f);

  // Unloading version 1 leaves version 2 serving, and the name can be reused.
  v1->reset();
  EXPECT_THAT((*engine)->Namespaces(), ::testing::ElementsAre("model/2"));
  EXPECT_FLOAT_EQ((*(*v2)->Run({x}))[0].data_as<float>()[3], 40.0f);
  auto again = (*engine)->Load("model/1", MustCompile(testing::BinaryWithConstant("Sub", 4, 1.0f)));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FLOAT_EQ((*(*again)->Run({x}))[0].data_as<float>()[0], 0.0f);
}

TEST(JitEngineTest, DuplicateNamespaceIsRejectedWithoutHarm) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto first = (*engine)->Load("m/1", MustCompile(testing::BinaryWithConstant("Add", 4, 1.0f)));
  ASSERT_TRUE(first.ok());
  auto dup = (*engine)->Load("m/1", MustCompile(testing::BinaryWithConstant("Add", 4, 2.0f)));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FLOAT_EQ((*(*first)->Run({Filled(1, 4, 0.0f)}))[0].data_as<float>()[0], 1.0f);
}

// Repeated blocks lower to identical kernels, which the optimiser merges (ConstantMerge +
// MergeFunctions before O3): less code to optimise and emit (swin_t_half: 30 s to 8 s, object
// 2.2 MB to 0.58 MB), the same answers, and still one table slot per kernel.
TEST(JitEngineTest, IdenticalKernelsShareCodeButNotSlots) {
  const std::string onnx = testing::RepeatedBlocksModel(12, 64);
  auto merged = CompileOnnxBytes(onnx);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ::setenv("CUVIL_NO_MERGE_KERNELS", "1", 1);
  auto separate = CompileOnnxBytes(onnx);
  ::unsetenv("CUVIL_NO_MERGE_KERNELS");
  ASSERT_TRUE(separate.ok()) << separate.status();
  EXPECT_EQ(merged->kernels.size(), separate->kernels.size());
  EXPECT_LT(merged->object_code.size() * 2, separate->object_code.size())
      << merged->object_code.size() << " vs " << separate->object_code.size();
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto a = (*engine)->Load("merged/1", std::move(*merged));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = (*engine)->Load("separate/1", std::move(*separate));
  ASSERT_TRUE(b.ok()) << b.status();
  HostTensor x = Filled(3, 64, -40.0f);
  auto ya = (*a)->Run({x});
  auto yb = (*b)->Run({x});
  ASSERT_TRUE(ya.ok() && yb.ok());
  ASSERT_EQ((*ya)[0].num_elements(), (*yb)[0].num_elements());
  for (int64_t i = 0; i < (*ya)[0].num_elements(); ++i) {
    ASSERT_EQ((*ya)[0].data_as<float>()[i], (*yb)[0].data_as<float>()[i]) << i;
  }
  // Every kernel keeps its slot (a patch redirects one slot, FunctionTableRedirectsKernels), but
  // the merged model's slots point to fewer distinct functions.
  auto distinct = [](const LoadedModel& m) {
    std::set<void*> fns(m.function_table(), m.function_table() + m.model().kernels.size());
    return fns.size();
  };
  EXPECT_EQ(distinct(**b), (*b)->model().kernels.size());
  EXPECT_LT(distinct(**a), (*a)->model().kernels.size() / 2);
}

TEST(JitEngineTest, FunctionTableRedirectsKernels) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto add = (*engine)->Load("add/1", MustCompile(testing::BinaryWithConstant("Add", 4, 3.0f)));
  auto mul = (*engine)->Load("mul/1", MustCompile(testing::BinaryWithConstant("Mul", 4, 100.0f)));
  ASSERT_TRUE(add.ok() && mul.ok());
  ASSERT_EQ((*add)->model().kernels.size(), 1u);
  HostTensor x = Filled(1, 4, 2.0f);
  // Both kernels share the signature (args, batch); pointing add's slot at mul's body and back
  // is what a hot patch and its rollback do. The new body reads add's operands: 2 * 3.
  void* original = (*add)->function_table()[0];
  __atomic_store_n(&(*add)->function_table()[0], (*mul)->function_table()[0], __ATOMIC_RELEASE);
  EXPECT_FLOAT_EQ((*(*add)->Run({x}))[0].data_as<float>()[0], 6.0f);
  __atomic_store_n(&(*add)->function_table()[0], original, __ATOMIC_RELEASE);
  EXPECT_FLOAT_EQ((*(*add)->Run({x}))[0].data_as<float>()[0], 5.0f);
}

// y = Softmax(x, axis) for x float32[batch, 3].
std::string SoftmaxModel(int64_t axis) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("softmax");
  for (auto* info : {g->add_input(), g->add_output()}) {
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(3);
  }
  g->mutable_input(0)->set_name("x");
  g->mutable_output(0)->set_name("y");
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Softmax");
  n->add_input("x");
  n->add_output("y");
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(axis);
  return model.SerializeAsString();
}

// The batch split (LoadedModel::Execute on several intra-op threads) must give what one call
// over the whole batch gives, and must never split a model that mixes batch items.
TEST(JitEngineTest, BatchSplitKeepsResultsAndNeverSplitsMixingModels) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto rows = (*engine)->Load("rows/1", MustCompile(SoftmaxModel(1)));
  auto columns = (*engine)->Load("columns/1", MustCompile(SoftmaxModel(0)));
  ASSERT_TRUE(rows.ok() && columns.ok());
  EXPECT_GT((*rows)->model().arena.max_shards, 1);
  EXPECT_EQ((*columns)->model().arena.max_shards, 1);
  EXPECT_NE((*columns)->model().batch_split_note.find("normalises over the batch"),
            std::string::npos)
      << (*columns)->model().batch_split_note;
  const int64_t batch = 7;
  HostTensor x(DType::kFloat32, {batch, 3});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = 0.1f * (i % 11);
  SetIntraOpThreads(3);
  auto by_row = (*rows)->Run({x});
  auto by_column = (*columns)->Run({x});
  SetIntraOpThreads(1);
  ASSERT_TRUE(by_row.ok() && by_column.ok());
  for (int64_t r = 0; r < batch; ++r) {
    float sum = 0;
    for (int64_t c = 0; c < 3; ++c) sum += (*by_row)[0].data_as<float>()[r * 3 + c];
    EXPECT_NEAR(sum, 1.0f, 1e-5) << "row " << r;
  }
  for (int64_t c = 0; c < 3; ++c) {
    float sum = 0;
    for (int64_t r = 0; r < batch; ++r) sum += (*by_column)[0].data_as<float>()[r * 3 + c];
    EXPECT_NEAR(sum, 1.0f, 1e-5) << "column " << c;
  }
}

}  // namespace
}  // namespace cuvil
