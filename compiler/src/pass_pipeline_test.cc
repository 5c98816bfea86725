#include "pass_pipeline.h"

#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "internal_attrs.h"

namespace cuvil {
namespace {

// x -> Relu -> a -> Neg -> y, every value typed.
struct Chain {
  ir::Graph g;
  ir::Value *x, *a, *y;
  ir::Node *relu, *neg;
  Chain() {
    g.name = "chain";
    x = g.NewValue("x");
    a = g.NewValue("a");
    y = g.NewValue("y");
    for (ir::Value* v : {x, a, y})
      v->type = ir::TensorType{DType::kFloat32, {SymDim::Const(4)}, true};
    x->is_graph_input = true;
    g.inputs = {x};
    relu = g.NewNode("Relu", "r");
    relu->inputs = {x};
    relu->outputs = {a};
    a->producer = relu;
    neg = g.NewNode("Neg", "n");
    neg->inputs = {a};
    neg->outputs = {y};
    y->producer = neg;
    y->is_graph_output = true;
    g.outputs = {y};
    g.output_names = {"y"};
  }
};

TEST(VerifyGraphTest, AWellFormedGraphPasses) {
  Chain c;
  EXPECT_TRUE(VerifyGraph(c.g, true, "p").ok());
}

// Each structural rule, broken once: the error names the pass and the rule.
TEST(VerifyGraphTest, EachBrokenRuleIsNamed) {
  struct Case {
    const char* what;
    std::function<void(Chain&)> breakit;
    const char* message;
  };
  const Case cases[] = {
      {"order", [](Chain& c) { std::swap(c.g.mutable_nodes()[0], c.g.mutable_nodes()[1]); },
       "before any node produces it"},
      {"producer link", [](Chain& c) { c.a->producer = c.neg; }, "names another producer"},
      {"produced twice",
       [](Chain& c) {
         c.neg->outputs = {c.a};
         c.a->producer = c.neg;
       },
       "names another producer"},
      {"dangling input",
       [](Chain& c) {
         ir::Value* ghost = c.g.NewValue("ghost");
         ghost->type = c.x->type;
         c.neg->inputs = {ghost};
       },
       "before any node produces it"},
      {"unknown shape", [](Chain& c) { c.a->type.shape_known = false; },
       "type or shape is unknown"},
      {"undefined output",
       [](Chain& c) {
         ir::Value* z = c.g.NewValue("z");
         z->type = c.x->type;
         c.g.outputs.push_back(z);
       },
       "is never defined"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    Chain c;
    k.breakit(c);
    const absl::Status s = VerifyGraph(c.g, true, "my_pass");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("after pass 'my_pass'"), std::string::npos) << s;
    EXPECT_NE(s.message().find(k.message), std::string::npos) << s;
  }
  // Before shape inference an unknown shape is allowed.
  Chain c;
  c.a->type.shape_known = false;
  EXPECT_TRUE(VerifyGraph(c.g, false, "import").ok());
}

// Attributes: ONNX's own for the op (any opset) and Cuvil's internal ones (internal_attrs.h) pass;
// any other name is an undeclared internal attribute, refused naming the node and the name.
TEST(VerifyGraphTest, OnlyOnnxAndDeclaredInternalAttributesPass) {
  Chain c;
  c.relu->attrs[attr::kFusedRelu] = int64_t{1};                   // internal
  c.neg->attrs[attr::EinsumLabels(3)] = std::vector<int64_t>{0};  // an internal prefix
  EXPECT_TRUE(VerifyGraph(c.g, true, "p").ok());
  c.relu->op_type = "LeakyRelu";
  c.relu->attrs["alpha"] = 0.1f;  // LeakyRelu's ONNX attribute
  EXPECT_TRUE(VerifyGraph(c.g, true, "p").ok());
  c.relu->op_type = "Relu";  // not Relu's
  absl::Status s = VerifyGraph(c.g, true, "fuse_things");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("after pass 'fuse_things'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("'r'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("attribute 'alpha'"), std::string::npos) << s;

  Chain d;
  d.neg->attrs["fused_gizmo"] = int64_t{1};
  s = VerifyGraph(d.g, true, "fuse_things");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(d.neg->Describe()), std::string::npos) << s;
  EXPECT_NE(s.message().find("attribute 'fused_gizmo'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("attr::kAll"), std::string::npos) << s;

  // An op ONNX has no schema for takes the attributes its row declares.
  Chain e;
  e.neg->op_type = "MatMulNBits";
  e.neg->attrs["block_size"] = int64_t{32};
  EXPECT_TRUE(VerifyGraph(e.g, true, "p").ok());
  e.neg->attrs["alpha"] = 1.0f;
  EXPECT_EQ(VerifyGraph(e.g, true, "p").code(), absl::StatusCode::kFailedPrecondition);
}

// An If whose then-branch is a Chain reading one captured outer value: the verifier enters the
// body, and a rule broken there (or a body without the input for a capture) names the body.
TEST(VerifyGraphTest, EntersIfLoopScanBodies) {
  struct WithBody {
    Chain outer;
    // The body is a Chain of its own; the attribute shares the Chain's lifetime (aliasing).
    std::shared_ptr<Chain> body_chain = std::make_shared<Chain>();
    Chain* body = body_chain.get();
    std::shared_ptr<ir::Graph> body_holder{body_chain, &body_chain->g};
    ir::Node* cond_if = nullptr;
    WithBody() {
      ir::Value* cond = outer.g.NewValue("cond");
      cond->type = ir::TensorType{DType::kBool, {}, true};
      cond->is_graph_input = true;
      outer.g.inputs.push_back(cond);
      ir::Value* z = outer.g.NewValue("z");
      z->type = outer.x->type;
      cond_if = outer.g.NewNode("If", "branch");
      cond_if->inputs = {cond, outer.y};  // one ONNX input, then the captured y
      cond_if->outputs = {z};
      z->producer = cond_if;
      cond_if->attrs[attr::kExplicitInputs] = int64_t{1};
      cond_if->attrs["then_branch"] = body_holder;
      cond_if->attrs["else_branch"] = body_holder;
      outer.g.outputs.push_back(z);
    }
  };
  {
    WithBody w;
    EXPECT_TRUE(VerifyGraph(w.outer.g, true, "p").ok()) << VerifyGraph(w.outer.g, true, "p");
  }
  {
    WithBody w;  // a node of the body out of order
    std::swap(w.body->g.mutable_nodes()[0], w.body->g.mutable_nodes()[1]);
    const absl::Status s = VerifyGraph(w.outer.g, true, "fold");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("after pass 'fold'"), std::string::npos) << s;
    EXPECT_NE(s.message().find("in body 'else_branch' of If 'branch'"), std::string::npos) << s;
    EXPECT_NE(s.message().find("before any node produces it"), std::string::npos) << s;
  }
  {
    WithBody w;  // an undeclared attribute inside the body
    w.body->neg->attrs["fused_gizmo"] = int64_t{1};
    const absl::Status s = VerifyGraph(w.outer.g, true, "fuse");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("in body '"), std::string::npos) << s;
    EXPECT_NE(s.message().find("attribute 'fused_gizmo'"), std::string::npos) << s;
  }
  {
    WithBody w;  // a pass gave the If a second capture the bodies have no input for
    w.cond_if->inputs.push_back(w.outer.x);
    const absl::Status s = VerifyGraph(w.outer.g, true, "dce");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("captures 2 outer values but its body"), std::string::npos) << s;
  }
  {
    WithBody w;  // unknown shapes inside a body pass before shape inference only
    w.body->a->type.shape_known = false;
    EXPECT_TRUE(VerifyGraph(w.outer.g, false, "import").ok());
    EXPECT_EQ(VerifyGraph(w.outer.g, true, "infer").code(), absl::StatusCode::kFailedPrecondition);
  }
}

// Every name in attr::kAll is listed once.
TEST(VerifyGraphTest, InternalAttributeNamesAreDistinct) {
  std::set<std::string> names;
  for (const char* name : attr::kAll) EXPECT_TRUE(names.insert(name).second) << name;
}

// The pipeline runs its passes in order, times each, prints the graph after the named one and
// stops at a pass that breaks the graph, naming it, without running the rest.
TEST(RunGraphPassesTest, RunsInOrderPrintsAndStopsAtABrokenGraph) {
  Chain c;
  std::vector<std::string> ran;
  std::ostringstream printed;
  PassOptions options;
  options.print_after = "second";
  options.print_to = &printed;
  std::vector<PhaseTiming> timings;
  const std::vector<GraphPass> good = {
      {"first",
       [&](ir::Graph&) {
         ran.push_back("first");
         return absl::OkStatus();
       }},
      {"second",
       [&](ir::Graph&) {
         ran.push_back("second");
         return absl::OkStatus();
       }},
  };
  ASSERT_TRUE(RunGraphPasses(c.g, good, options, &timings).ok());
  EXPECT_EQ(ran, (std::vector<std::string>{"first", "second"}));
  ASSERT_EQ(timings.size(), 2u);
  EXPECT_EQ(timings[0].phase, "pass:first");
  EXPECT_EQ(timings[1].phase, "pass:second");
  EXPECT_NE(printed.str().find("after pass second"), std::string::npos) << printed.str();
  EXPECT_NE(printed.str().find("= Neg 'n'(%a)"), std::string::npos) << printed.str();

  ran.clear();
  const std::vector<GraphPass> bad = {
      {"breaks",
       [&](ir::Graph& g) {
         ran.push_back("breaks");
         std::swap(g.mutable_nodes()[0], g.mutable_nodes()[1]);
         return absl::OkStatus();
       }},
      {"never",
       [&](ir::Graph&) {
         ran.push_back("never");
         return absl::OkStatus();
       }},
  };
  const absl::Status s = RunGraphPasses(c.g, bad, {}, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("after pass 'breaks'"), std::string::npos) << s;
  EXPECT_EQ(ran, (std::vector<std::string>{"breaks"}));
  // A pass's own error is returned as it is.
  const std::vector<GraphPass> failing = {
      {"refuses", [](ir::Graph&) { return absl::InvalidArgumentError("no"); }}};
  EXPECT_EQ(RunGraphPasses(c.g, failing, {}, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cuvil
