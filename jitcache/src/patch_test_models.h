// Private to the jitcache tests: small two-kernel models and hand-written LLVM IR patches for them.
#ifndef CUVIL_JITCACHE_SRC_PATCH_TEST_MODELS_H_
#define CUVIL_JITCACHE_SRC_PATCH_TEST_MODELS_H_

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "onnx/onnx_pb.h"

namespace cuvil::testing {

// y = op2(op1(x, c1), c2) over float32[batch, width] with c1, c2 float32[width] constants of
// `v1`, `v2`: two kernels, k0 (op1, node "t_node") and k1 (op2, node "y_node").
inline std::string TwoBinaryOps(const std::string& graph_name, int64_t width, const char* op1,
                                float v1, const char* op2, float v2) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name(graph_name);
  auto add_io = [&](onnx::ValueInfoProto* info, const std::string& name) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(width);
  };
  add_io(g->add_input(), "x");
  add_io(g->add_output(), "y");
  for (auto [name, value] : {std::pair{"c1", v1}, std::pair{"c2", v2}}) {
    onnx::TensorProto* c = g->add_initializer();
    c->set_name(name);
    c->set_data_type(onnx::TensorProto::FLOAT);
    c->add_dims(width);
    for (int64_t i = 0; i < width; ++i) c->add_float_data(value);
  }
  auto add_node = [&](const char* op, const std::string& a, const std::string& b,
                      const std::string& out) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out + "_node");
    n->add_input(a);
    n->add_input(b);
    n->add_output(out);
  };
  add_node(op1, "x", "c1", "t");
  add_node(op2, "t", "c2", "y");
  return model.SerializeAsString();
}

// y = If(cond, then: x + c_then, else: x + c_else) over float32[batch, width], cond a bool
// scalar input: one kernel cuvil_entry calls (k0_If) and one Add kernel in each branch's
// subgraph, which the constants of `then_value` / `else_value` feed.
inline std::string IfOfTwoAdds(int64_t width, float then_value, float else_value) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("if_of_two_adds");
  auto float_io = [&](onnx::ValueInfoProto* info, const std::string& name) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(width);
  };
  float_io(g->add_input(), "x");
  onnx::ValueInfoProto* cond = g->add_input();
  cond->set_name("cond");
  cond->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BOOL);
  cond->mutable_type()->mutable_tensor_type()->mutable_shape();
  float_io(g->add_output(), "y");
  auto branch = [&](const std::string& tag, float value) {
    onnx::GraphProto b;
    b.set_name(tag);
    onnx::TensorProto* c = b.add_initializer();
    c->set_name(tag + "_c");
    c->set_data_type(onnx::TensorProto::FLOAT);
    c->add_dims(width);
    for (int64_t i = 0; i < width; ++i) c->add_float_data(value);
    onnx::NodeProto* n = b.add_node();
    n->set_op_type("Add");
    n->set_name(tag + "_add");
    n->add_input("x");
    n->add_input(tag + "_c");
    n->add_output(tag + "_y");
    float_io(b.add_output(), tag + "_y");
    return b;
  };
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("If");
  n->set_name("if");
  n->add_input("cond");
  n->add_output("y");
  for (auto [attr, value] : {std::pair{"then_branch", then_value}, {"else_branch", else_value}}) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = branch(attr, value);
  }
  return model.SerializeAsString();
}

// LLVM IR of a kernel `name` computing out = scale * (a + b[col]) over batch*width floats, where
// args = {a, b, out}: the Add kernel of a [batch, width] tensor and a [width] constant, scaled.
inline std::string ScaledAddIr(const std::string& name, int64_t width, float scale) {
  std::string ir = R"(
define i32 @NAME(ptr %args, i64 %batch) {
entry:
  %a = load ptr, ptr %args
  %bp = getelementptr ptr, ptr %args, i64 1
  %b = load ptr, ptr %bp
  %op = getelementptr ptr, ptr %args, i64 2
  %o = load ptr, ptr %op
  %n = mul i64 %batch, WIDTH
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %exit, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %j = urem i64 %i, WIDTH
  %aa = getelementptr float, ptr %a, i64 %i
  %av = load float, ptr %aa
  %ba = getelementptr float, ptr %b, i64 %j
  %bv = load float, ptr %ba
  %s = fadd float %av, %bv
  %d = fmul float %s, SCALE
  %oa = getelementptr float, ptr %o, i64 %i
  store float %d, ptr %oa
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}
)";
  char scale_text[32];
  // LLVM IR spells float constants exactly as 64-bit hex.
  double d = scale;
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  std::snprintf(scale_text, sizeof scale_text, "0x%016llX", static_cast<unsigned long long>(bits));
  return absl::StrReplaceAll(
      ir, {{"NAME", name}, {"WIDTH", absl::StrCat(width)}, {"SCALE", scale_text}});
}

}  // namespace cuvil::testing

#endif  // CUVIL_JITCACHE_SRC_PATCH_TEST_MODELS_H_
