// Small ONNX models built in memory for tests.
#ifndef CUVIL_TESTS_TEST_MODELS_H_
#define CUVIL_TESTS_TEST_MODELS_H_

#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace cuvil::testing {

// y = op(x, c) where x is float32[batch, width] and c a float32[width] constant of `value`.
inline std::string BinaryWithConstant(const std::string& op, int64_t width, float value,
                                      int opset = 13) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(opset);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("test_" + op);
  auto add_io = [&](onnx::ValueInfoProto* info, const std::string& name) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(width);
  };
  add_io(g->add_input(), "x");
  add_io(g->add_output(), "y");
  onnx::TensorProto* c = g->add_initializer();
  c->set_name("c");
  c->set_data_type(onnx::TensorProto::FLOAT);
  c->add_dims(width);
  for (int64_t i = 0; i < width; ++i) c->add_float_data(value);
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_node");
  n->add_input("x");
  n->add_input("c");
  n->add_output("y");
  return model.SerializeAsString();
}

}  // namespace cuvil::testing

#endif  // CUVIL_TESTS_TEST_MODELS_H_
