// If, Loop and Scan end to end (import → compile → JIT → run) on small hand-written models: a
// Loop with a constant trip count and a scan output whose body holds an If that captures values
// from two scopes out, a reversed Scan along axis 1, and the clear refusals for shapes that change
// (If branches of different ranks, a loop-carried value that grows, scan outputs of unknown
// length); If branches of different sizes give a size the data decides.
#include "absl/strings/str_cat.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace cuvil {
namespace {

// A model from the text form of a GraphProto (opset 13).
std::string Model(const std::string& graph_text) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(graph_text, model.mutable_graph()));
  return model.SerializeAsString();
}

// Without onnx::checker: it wants shapes on the value infos these models leave to inference.
absl::StatusOr<CompiledModel> Compile(const std::string& graph_text) {
  CompileOptions options;
  options.import.run_checker = false;
  return CompileOnnxBytes(Model(graph_text), options);
}

HostTensor Floats(std::vector<int64_t> shape, const std::vector<float>& v) {
  HostTensor t(DType::kFloat32, std::move(shape));
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

HostTensor Bool(bool b) {
  HostTensor t(DType::kBool, {});
  t.data()[0] = b ? 1 : 0;
  return t;
}

void ExpectFloats(const HostTensor& t, const std::vector<float>& want) {
  ASSERT_EQ(t.num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(t.data_as<float>()[i], want[i]) << i;
}

// y0 = x [batch, 2]; three iterations of y = flag ? y + w : y - w, where the If inside the body
// captures y (the body's) and w, flag (the model's); every y is also a scan output.
constexpr char kNestedLoop[] = R"pb(
  name: "nested"
  initializer { name: "M" data_type: 7 int64_data: 3 }
  initializer { name: "c" data_type: 9 int32_data: 1 }
  node {
    input: "M"
    input: "c"
    input: "x"
    output: "y"
    output: "ys"
    op_type: "Loop"
    attribute {
      name: "body"
      type: GRAPH
      g {
        name: "body"
        input {
          name: "i"
          type {
            tensor_type {
              elem_type: 7
              shape {}
            }
          }
        }
        input {
          name: "cond"
          type {
            tensor_type {
              elem_type: 9
              shape {}
            }
          }
        }
        input {
          name: "y_in"
          type { tensor_type { elem_type: 1 } }
        }
        node { input: "cond" output: "cond_out" op_type: "Identity" }
        node {
          input: "flag"
          output: "y_out"
          op_type: "If"
          attribute {
            name: "then_branch"
            type: GRAPH
            g {
              name: "then"
              node { input: "y_in" input: "w" output: "t" op_type: "Add" }
              output {
                name: "t"
                type { tensor_type { elem_type: 1 } }
              }
            }
          }
          attribute {
            name: "else_branch"
            type: GRAPH
            g {
              name: "else"
              node { input: "y_in" input: "w" output: "e" op_type: "Sub" }
              output {
                name: "e"
                type { tensor_type { elem_type: 1 } }
              }
            }
          }
        }
        node { input: "y_out" output: "scan" op_type: "Identity" }
        output {
          name: "cond_out"
          type {
            tensor_type {
              elem_type: 9
              shape {}
            }
          }
        }
        output {
          name: "y_out"
          type { tensor_type { elem_type: 1 } }
        }
        output {
          name: "scan"
          type { tensor_type { elem_type: 1 } }
        }
      }
    }
  }
  input {
    name: "x"
    type {
      tensor_type {
        elem_type: 1
        shape {
          dim { dim_param: "batch" }
          dim { dim_value: 2 }
        }
      }
    }
  }
  input {
    name: "w"
    type {
      tensor_type {
        elem_type: 1
        shape { dim { dim_value: 2 } }
      }
    }
  }
  input {
    name: "flag"
    type {
      tensor_type {
        elem_type: 9
        shape {}
      }
    }
  }
  output {
    name: "y"
    type { tensor_type { elem_type: 1 } }
  }
  output {
    name: "ys"
    type { tensor_type { elem_type: 1 } }
  }
)pb";

TEST(ControlFlowTest, LoopWithNestedIfCapturingTwoScopesOut) {
  auto compiled = Compile(kNestedLoop);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto model = (*engine)->Load("nested/1", std::move(*compiled));
  ASSERT_TRUE(model.ok()) << model.status();
  HostTensor x = Floats({2, 2}, {1, 2, 3, 4});
  HostTensor w = Floats({2}, {10, 100});
  for (bool flag : {true, false}) {
    SCOPED_TRACE(flag);
    auto out = (*model)->Run({x, w, Bool(flag)});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 2u);
    float s = flag ? 1 : -1;
    ExpectFloats((*out)[0], {1 + 30 * s, 2 + 300 * s, 3 + 30 * s, 4 + 300 * s});
    std::vector<float> ys;
    for (int k = 1; k <= 3; ++k) {
      for (float v : {1 + 10 * k * s, 2 + 100 * k * s, 3 + 10 * k * s, 4 + 100 * k * s}) {
        ys.push_back(v);
      }
    }
    EXPECT_EQ((*out)[1].shape(), (std::vector<int64_t>{3, 2, 2}));
    ExpectFloats((*out)[1], ys);
  }
  // Batch 1 from the same compile.
  auto out = (*model)->Run({Floats({1, 2}, {0, 0}), w, Bool(true)});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectFloats((*out)[0], {30, 300});
}

// Running sum over the columns of x [2, 3], last column first; the scan output is written along
// axis 1 in iteration order.
constexpr char kReverseScan[] = R"pb(
  name: "scan"
  node {
    input: "s0"
    input: "x"
    output: "s"
    output: "sums"
    op_type: "Scan"
    attribute { name: "num_scan_inputs" type: INT i: 1 }
    attribute { name: "scan_input_axes" type: INTS ints: 1 }
    attribute { name: "scan_input_directions" type: INTS ints: 1 }
    attribute { name: "scan_output_axes" type: INTS ints: -1 }
    attribute {
      name: "body"
      type: GRAPH
      g {
        name: "body"
        input {
          name: "acc"
          type { tensor_type { elem_type: 1 } }
        }
        input {
          name: "col"
          type { tensor_type { elem_type: 1 } }
        }
        node { input: "acc" input: "col" output: "acc_out" op_type: "Add" }
        node { input: "acc_out" output: "out" op_type: "Identity" }
        output {
          name: "acc_out"
          type { tensor_type { elem_type: 1 } }
        }
        output {
          name: "out"
          type { tensor_type { elem_type: 1 } }
        }
      }
    }
  }
  input {
    name: "s0"
    type {
      tensor_type {
        elem_type: 1
        shape { dim { dim_value: 2 } }
      }
    }
  }
  input {
    name: "x"
    type {
      tensor_type {
        elem_type: 1
        shape {
          dim { dim_value: 2 }
          dim { dim_value: 3 }
        }
      }
    }
  }
  output {
    name: "s"
    type { tensor_type { elem_type: 1 } }
  }
  output {
    name: "sums"
    type { tensor_type { elem_type: 1 } }
  }
)pb";

TEST(ControlFlowTest, ReversedScanAlongAxisOne) {
  auto compiled = Compile(kReverseScan);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto model = (*engine)->Load("scan/1", std::move(*compiled));
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = (*model)->Run({Floats({2}, {0, 1000}), Floats({2, 3}, {1, 2, 3, 10, 20, 30})});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectFloats((*out)[0], {6, 1060});
  ExpectFloats((*out)[1], {3, 5, 6, 1030, 1050, 1060});
}

// r = If(c) then x else <else_node>(x) (its output "xx"), x float32[2]: branches whose
// outputs may differ.
std::string IfOverX(const std::string& else_node) {
  // Plain raw strings: a split textproto does not survive clang-format's proto layout.
  const char* head = R"(
    name: "if"
    node {
      input: "c"
      output: "r"
      op_type: "If"
      attribute {
        name: "then_branch"
        type: GRAPH
        g {
          name: "t"
          output { name: "x" type { tensor_type { elem_type: 1 } } }
        }
      }
      attribute {
        name: "else_branch"
        type: GRAPH
        g {
          name: "e"
  )";
  const char* tail = R"(
          output { name: "xx" type { tensor_type { elem_type: 1 } } }
        }
      }
    }
    input { name: "c" type { tensor_type { elem_type: 9 shape {} } } }
    input { name: "x" type { tensor_type { elem_type: 1 shape { dim { dim_value: 2 } } } } }
    output { name: "r" type { tensor_type { elem_type: 1 } } }
  )";
  return absl::StrCat(head, else_node, tail);
}

// Branches whose outputs differ in size (SSD's empty then-branch beside NonMaxSuppression's
// count): the If's output gets a size the branch that ran decides, its buffer the larger bound.
TEST(ControlFlowTest, BranchesOfDifferentSizesDecideTheOutputSize) {
  auto compiled = Compile(IfOverX(R"pb(node {
                                         input: "x"
                                         input: "x"
                                         output: "xx"
                                         op_type: "Concat"
                                         attribute { name: "axis" type: INT i: 0 }
                                       })pb"));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(compiled->data_dependent_dims.size(), 1u);
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto model = (*engine)->Load("if_sizes/1", std::move(*compiled));
  ASSERT_TRUE(model.ok()) << model.status();
  for (bool c : {true, false, true}) {
    SCOPED_TRACE(c);
    auto out = (*model)->Run({Bool(c), Floats({2}, {1, 2})});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
    EXPECT_EQ((*out)[0].shape(), (std::vector<int64_t>{c ? 2 : 4}));
    ExpectFloats((*out)[0], c ? std::vector<float>{1, 2} : std::vector<float>{1, 2, 1, 2});
  }
}

// A branch of another rank is still refused, naming the output and both types.
TEST(ControlFlowTest, RefusesBranchesOfDifferentRanks) {
  auto compiled =
      Compile(IfOverX(R"pb(node { input: "x" input: "axes" output: "xx" op_type: "Unsqueeze" }
                           initializer { name: "axes" data_type: 7 dims: 1 int64_data: 0 })pb"));
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(compiled.status().message().find("differs between the branches"), std::string::npos)
      << compiled.status();
}

TEST(ControlFlowTest, RefusesLoopCarriedValueThatGrows) {
  auto compiled = Compile(R"pb(
    name: "grow"
    node {
      input: "M"
      input: ""
      input: "x"
      output: "y"
      op_type: "Loop"
      attribute {
        name: "body"
        type: GRAPH
        g {
          name: "body"
          input {
            name: "i"
            type {
              tensor_type {
                elem_type: 7
                shape {}
              }
            }
          }
          input {
            name: "cond"
            type {
              tensor_type {
                elem_type: 9
                shape {}
              }
            }
          }
          input {
            name: "y_in"
            type { tensor_type { elem_type: 1 } }
          }
          node { input: "cond" output: "cond_out" op_type: "Identity" }
          node {
            input: "y_in"
            input: "y_in"
            output: "y_out"
            op_type: "Concat"
            attribute { name: "axis" type: INT i: 0 }
          }
          output {
            name: "cond_out"
            type {
              tensor_type {
                elem_type: 9
                shape {}
              }
            }
          }
          output {
            name: "y_out"
            type { tensor_type { elem_type: 1 } }
          }
        }
      }
    }
    input {
      name: "M"
      type {
        tensor_type {
          elem_type: 7
          shape {}
        }
      }
    }
    input {
      name: "x"
      type {
        tensor_type {
          elem_type: 1
          shape { dim { dim_value: 2 } }
        }
      }
    }
    output {
      name: "y"
      type { tensor_type { elem_type: 1 } }
    }
  )pb");
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(compiled.status().message().find("loop-carried value 0"), std::string::npos)
      << compiled.status();
}

TEST(ControlFlowTest, RefusesScanOutputsOfDataDependentLength) {
  // The body may stop the loop early, so the scan output's length is known only at run time.
  auto compiled = Compile(R"pb(
    name: "early"
    initializer { name: "M" data_type: 7 int64_data: 4 }
    node {
      input: "M"
      input: ""
      input: "x"
      output: "y"
      output: "ys"
      op_type: "Loop"
      attribute {
        name: "body"
        type: GRAPH
        g {
          name: "body"
          input {
            name: "i"
            type {
              tensor_type {
                elem_type: 7
                shape {}
              }
            }
          }
          input {
            name: "cond"
            type {
              tensor_type {
                elem_type: 9
                shape {}
              }
            }
          }
          input {
            name: "y_in"
            type { tensor_type { elem_type: 1 } }
          }
          node {
            input: "y_in"
            output: "s"
            op_type: "ReduceSum"
            attribute { name: "keepdims" type: INT i: 0 }
          }
          node { input: "s" input: "limit" output: "cond_out" op_type: "Less" }
          node { input: "y_in" input: "y_in" output: "y_out" op_type: "Add" }
          node { input: "y_out" output: "scan" op_type: "Identity" }
          output {
            name: "cond_out"
            type {
              tensor_type {
                elem_type: 9
                shape {}
              }
            }
          }
          output {
            name: "y_out"
            type { tensor_type { elem_type: 1 } }
          }
          output {
            name: "scan"
            type { tensor_type { elem_type: 1 } }
          }
        }
      }
    }
    input {
      name: "x"
      type {
        tensor_type {
          elem_type: 1
          shape { dim { dim_value: 2 } }
        }
      }
    }
    input {
      name: "limit"
      type {
        tensor_type {
          elem_type: 1
          shape {}
        }
      }
    }
    output {
      name: "y"
      type { tensor_type { elem_type: 1 } }
    }
    output {
      name: "ys"
      type { tensor_type { elem_type: 1 } }
    }
  )pb");
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(compiled.status().message().find("data-dependent"), std::string::npos)
      << compiled.status();
}

}  // namespace
}  // namespace cuvil
