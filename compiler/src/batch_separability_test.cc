#include "batch_separability.h"

#include <string>
#include <vector>

#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/onnx_importer.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace cuvil {
namespace {

// A float32 ONNX graph built node by node; dim -1 is the symbolic "batch", -2 an unknown dim.
class GraphBuilder {
 public:
  GraphBuilder() {
    model_.set_ir_version(8);
    model_.add_opset_import()->set_version(13);
    model_.mutable_graph()->set_name("separability");
  }
  void Input(const std::string& name, const std::vector<int64_t>& dims) {
    Info(model_.mutable_graph()->add_input(), name, dims);
  }
  void Output(const std::string& name, const std::vector<int64_t>& dims) {
    Info(model_.mutable_graph()->add_output(), name, dims);
  }
  void Floats(const std::string& name, const std::vector<int64_t>& dims) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    for (int64_t i = 0; i < n; ++i) t->add_float_data(0.5f);
  }
  void Ints(const std::string& name, const std::vector<int64_t>& values) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  }
  onnx::NodeProto* Node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::string& output) {
    onnx::NodeProto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(output);
    for (const auto& in : inputs) n->add_input(in);
    n->add_output(output);
    return n;
  }
  static void IntAttr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void IntsAttr(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  // Imports and optimises the model, then analyses it.
  BatchSeparability Analyse() {
    ImportOptions options;
    auto graph = ImportOnnxBytes(model_.SerializeAsString(), options);
    EXPECT_TRUE(graph.ok()) << graph.status();
    if (!graph.ok()) return {};
    absl::Status s = OptimizeGraph(**graph);
    EXPECT_TRUE(s.ok()) << s;
    return AnalyseBatchSeparability(**graph);
  }

 private:
  static void Info(onnx::ValueInfoProto* info, const std::string& name,
                   const std::vector<int64_t>& dims) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) {
      if (d < -1) {
        tt->mutable_shape()->add_dim();  // Unknown: left to shape inference.
      } else if (d < 0) {
        tt->mutable_shape()->add_dim()->set_dim_param("batch");
      } else {
        tt->mutable_shape()->add_dim()->set_dim_value(d);
      }
    }
  }
  onnx::ModelProto model_;
};

TEST(BatchSeparabilityTest, MatMulReluSoftmaxOverFeaturesIsSeparable) {
  GraphBuilder b;
  b.Input("x", {-1, 4});
  b.Floats("w", {4, 3});
  b.Node("MatMul", {"x", "w"}, "h");
  b.Node("Relu", {"h"}, "r");
  GraphBuilder::IntAttr(b.Node("Softmax", {"r"}, "y"), "axis", 1);
  b.Output("y", {-1, 3});
  BatchSeparability s = b.Analyse();
  EXPECT_TRUE(s.separable) << s.reason;
  EXPECT_EQ(s.reason, "");
}

TEST(BatchSeparabilityTest, SoftmaxOverTheBatchIsNot) {
  GraphBuilder b;
  b.Input("x", {-1, 4});
  GraphBuilder::IntAttr(b.Node("Softmax", {"x"}, "y"), "axis", 0);
  b.Output("y", {-1, 4});
  BatchSeparability s = b.Analyse();
  EXPECT_FALSE(s.separable);
  EXPECT_NE(s.reason.find("normalises over the batch"), std::string::npos) << s.reason;
}

TEST(BatchSeparabilityTest, ReduceOverTheBatchIsNot) {
  GraphBuilder b;
  b.Input("x", {-1, 4});
  onnx::NodeProto* n = b.Node("ReduceMean", {"x"}, "m");
  GraphBuilder::IntsAttr(n, "axes", {0});
  GraphBuilder::IntAttr(n, "keepdims", 1);
  b.Node("Sub", {"x", "m"}, "y");
  b.Output("y", {-1, 4});
  BatchSeparability s = b.Analyse();
  EXPECT_FALSE(s.separable);
  EXPECT_NE(s.reason.find("ReduceMean"), std::string::npos) << s.reason;
}

TEST(BatchSeparabilityTest, ConcatAlongTheBatchIsNot) {
  GraphBuilder b;
  b.Input("x", {-1, 4});
  GraphBuilder::IntAttr(b.Node("Concat", {"x", "x"}, "y"), "axis", 0);
  b.Output("y", {-2, 4});
  EXPECT_FALSE(b.Analyse().separable);
}

TEST(BatchSeparabilityTest, ConcatAlongFeaturesIs) {
  GraphBuilder b;
  b.Input("x", {-1, 4});
  GraphBuilder::IntAttr(b.Node("Concat", {"x", "x"}, "y"), "axis", 1);
  b.Output("y", {-1, 8});
  BatchSeparability s = b.Analyse();
  EXPECT_TRUE(s.separable) << s.reason;
}

// [batch,2,3] -> Transpose -> [2,batch,3] -> Reshape [2,-1] keeps each item's elements in one
// run per leading index, so the reshape back and the transpose back restore the items.
TEST(BatchSeparabilityTest, TransposeAndReshapeAroundTheBatchAre) {
  GraphBuilder b;
  b.Input("x", {-1, 2, 3});
  GraphBuilder::IntsAttr(b.Node("Transpose", {"x"}, "t"), "perm", {1, 0, 2});
  b.Ints("flat", {2, -1});
  b.Node("Reshape", {"t", "flat"}, "f");
  b.Node("Relu", {"f"}, "r");
  b.Ints("back", {2, -1, 3});
  b.Node("Reshape", {"r", "back"}, "u");
  GraphBuilder::IntsAttr(b.Node("Transpose", {"u"}, "y"), "perm", {1, 0, 2});
  b.Output("y", {-1, 2, 3});
  BatchSeparability s = b.Analyse();
  EXPECT_TRUE(s.separable) << s.reason;
}

// [batch,2,3] -> [2,batch,3] -> Reshape [-1,3]: dim 0 is 2*batch with item b owning rows b and
// batch+b, as PyTorch's attention merges sequence and batch. Row-wise ops keep that layout and
// the reshape back restores the items.
TEST(BatchSeparabilityTest, BatchMergedInsideADimIsTracked) {
  GraphBuilder b;
  b.Input("x", {-1, 2, 3});
  GraphBuilder::IntsAttr(b.Node("Transpose", {"x"}, "t"), "perm", {1, 0, 2});
  b.Ints("rows", {-1, 3});
  b.Node("Reshape", {"t", "rows"}, "m");
  b.Floats("w", {3, 3});
  b.Node("MatMul", {"m", "w"}, "h");
  b.Ints("back", {2, -1, 3});
  b.Node("Reshape", {"h", "back"}, "u");
  GraphBuilder::IntsAttr(b.Node("Transpose", {"u"}, "y"), "perm", {1, 0, 2});
  b.Output("y", {-1, 2, 3});
  BatchSeparability s = b.Analyse();
  EXPECT_TRUE(s.separable) << s.reason;
}

TEST(BatchSeparabilityTest, InterleavedItemsAsAnOutputAreNot) {
  GraphBuilder b;
  b.Input("x", {-1, 2, 3});
  GraphBuilder::IntsAttr(b.Node("Transpose", {"x"}, "t"), "perm", {1, 0, 2});
  b.Ints("rows", {-1, 3});
  b.Node("Reshape", {"t", "rows"}, "y");
  b.Output("y", {-2, 3});
  BatchSeparability s = b.Analyse();
  EXPECT_FALSE(s.separable);
  EXPECT_NE(s.reason.find("output 'y'"), std::string::npos) << s.reason;
}

// [2*batch,3] with rows b and batch+b per item, reshaped to [batch,6]: row b of the result
// holds rows 2b and 2b+1, which belong to other items.
TEST(BatchSeparabilityTest, ReshapeThatRegroupsItemsIsNot) {
  GraphBuilder b;
  b.Input("x", {-1, 2, 3});
  GraphBuilder::IntsAttr(b.Node("Transpose", {"x"}, "t"), "perm", {1, 0, 2});
  b.Ints("rows", {-1, 3});
  b.Node("Reshape", {"t", "rows"}, "m");
  b.Ints("items", {-1, 6});
  b.Node("Reshape", {"m", "items"}, "y");
  b.Output("y", {-1, 6});
  BatchSeparability s = b.Analyse();
  EXPECT_FALSE(s.separable);
  EXPECT_NE(s.reason.find("regroups"), std::string::npos) << s.reason;
}

TEST(BatchSeparabilityTest, InputWithTheBatchInsideIsNot) {
  GraphBuilder b;
  b.Input("x", {3, -1});
  b.Node("Relu", {"x"}, "y");
  b.Output("y", {3, -1});
  BatchSeparability s = b.Analyse();
  EXPECT_FALSE(s.separable);
  EXPECT_NE(s.reason.find("input 'x'"), std::string::npos) << s.reason;
}

TEST(BatchSeparabilityTest, GemmWithBatchedBIsNot) {
  GraphBuilder b;
  b.Input("x", {-1, 4});
  onnx::NodeProto* n = b.Node("Gemm", {"x", "x"}, "y");
  GraphBuilder::IntAttr(n, "transB", 1);  // x * x^T: [batch, batch].
  b.Output("y", {-2, -2});
  EXPECT_FALSE(b.Analyse().separable);
}

TEST(BatchSeparabilityTest, CumSumAlongTheBatchIsNot) {
  GraphBuilder b;
  b.Input("x", {-1, 4});
  b.Ints("axis", {0});
  b.Node("CumSum", {"x", "axis"}, "y");
  b.Output("y", {-1, 4});
  BatchSeparability s = b.Analyse();
  EXPECT_FALSE(s.separable);
  EXPECT_NE(s.reason.find("works along the batch"), std::string::npos) << s.reason;
}

TEST(BatchSeparabilityTest, ShapeUsedAsDataIsNot) {
  GraphBuilder b;
  b.Input("x", {-1, 4});
  b.Node("Shape", {"x"}, "shape");
  b.Ints("first", {0});
  b.Node("Gather", {"shape", "first"}, "n");  // [batch]: a value that depends on the batch size.
  GraphBuilder::IntAttr(b.Node("Cast", {"n"}, "fn"), "to", onnx::TensorProto::FLOAT);
  b.Node("Mul", {"x", "fn"}, "y");
  b.Output("y", {-1, 4});
  EXPECT_FALSE(b.Analyse().separable);
}

TEST(BatchSeparabilityTest, StaticModelsAreNot) {
  GraphBuilder b;
  b.Input("x", {2, 4});
  b.Node("Relu", {"x"}, "y");
  b.Output("y", {2, 4});
  BatchSeparability s = b.Analyse();
  EXPECT_FALSE(s.separable);
  EXPECT_NE(s.reason.find("no symbolic batch"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace cuvil
