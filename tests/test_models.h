// Small ONNX models built in memory for tests.
#ifndef CUVIL_TESTS_TEST_MODELS_H_
#define CUVIL_TESTS_TEST_MODELS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "onnx/onnx_pb.h"

namespace cuvil::testing {

// `info` names a float32[batch, width] value.
inline void SetBatchRows(onnx::ValueInfoProto* info, const std::string& name, int64_t width) {
  info->set_name(name);
  auto* tt = info->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  tt->mutable_shape()->add_dim()->set_dim_value(width);
}

// y = op(x, c) where x is float32[batch, width] and c a float32[width] constant of `value`.
inline std::string BinaryWithConstant(const std::string& op, int64_t width, float value,
                                      int opset = 13) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(opset);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("test_" + op);
  SetBatchRows(g->add_input(), "x", width);
  SetBatchRows(g->add_output(), "y", width);
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

// A dim of a value's type: a named free dimension or a fixed size.
struct TestDim {
  TestDim(const char* param) : param(param) {}  // NOLINT(google-explicit-constructor)
  TestDim(int64_t value) : value(value) {}      // NOLINT(google-explicit-constructor)
  std::string param;
  int64_t value = 0;
};

// `info` names a float32 value of shape `dims`.
inline void SetFloatValue(onnx::ValueInfoProto* info, const std::string& name,
                          const std::vector<TestDim>& dims) {
  info->set_name(name);
  auto* tt = info->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (const TestDim& d : dims) {
    auto* dim = tt->mutable_shape()->add_dim();
    if (d.param.empty()) {
      dim->set_dim_value(d.value);
    } else {
      dim->set_dim_param(d.param);
    }
  }
}

// Appends node `op` (named after its output) reading `inputs` ("" for an omitted one).
inline onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op,
                                const std::vector<std::string>& inputs, const std::string& output) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(output + "_node");
  for (const auto& i : inputs) n->add_input(i);
  n->add_output(output);
  return n;
}

inline void AddIntAttr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void AddIntsAttr(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

inline void AddStringAttr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

// y = ReduceMax(Tile(x, [1, rows]) ^ 2, axis 1) = the largest x * x of each row, where x is
// float32[batch, n]: a request of 4 * batch * n bytes whose execution needs rows times that in
// scratch memory.
inline std::string WideScratchModel(int64_t rows) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("wide_scratch");
  SetFloatValue(g->add_input(), "x", {"batch", "n"});
  SetFloatValue(g->add_output(), "y", {"batch", 1});
  onnx::TensorProto* repeats = g->add_initializer();
  repeats->set_name("repeats");
  repeats->set_data_type(onnx::TensorProto::INT64);
  repeats->add_dims(2);
  repeats->add_int64_data(1);
  repeats->add_int64_data(rows);
  AddNode(g, "Tile", {"x", "repeats"}, "t");
  AddNode(g, "Mul", {"t", "t"}, "u");
  AddIntsAttr(AddNode(g, "ReduceMax", {"u"}, "y"), "axes", {1});
  return model.SerializeAsString();
}

// `layers` blocks y = Relu(y * s_i + b_i) over x float32[batch, width], each with its own
// weights s_i = 1 + i / 8 and b_i = -i / 16 (vectors of `width`): identical code, different
// data, as a network's repeated blocks are.
inline std::string RepeatedBlocksModel(int layers, int64_t width) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("repeated_blocks");
  SetFloatValue(g->add_input(), "x", {"batch", width});
  SetFloatValue(g->add_output(), "y", {"batch", width});
  std::string in = "x";
  for (int i = 0; i < layers; ++i) {
    const std::string n = std::to_string(i);
    for (const auto& [name, value] : {std::pair<std::string, float>{"s" + n, 1.0f + i / 8.0f},
                                      std::pair<std::string, float>{"b" + n, -i / 16.0f}}) {
      onnx::TensorProto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      t->add_dims(width);
      for (int64_t j = 0; j < width; ++j) t->add_float_data(value);
    }
    AddNode(g, "Mul", {in, "s" + n}, "m" + n);
    AddNode(g, "Add", {"m" + n, "b" + n}, "a" + n);
    in = i + 1 == layers ? "y" : "r" + n;
    AddNode(g, "Relu", {"a" + n}, in);
  }
  return model.SerializeAsString();
}

// RAFT's shape pattern in miniature: x float32[batch, 4, height] reshaped to
// [batch, floor(4 * H / (8 * floor(H / 8))), 8 * floor(H / 8)] and through a 1-D Conv with
// all-ones weights [5, 4, 1], so y[n, o, t] = the sum over channels of x[n, :, t]. The Conv's
// channel count is the constant 4 only when H is a multiple of 8: it compiles only with height
// declared one (ImportOptions::dim_multiples).
inline std::string DimMultipleModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("dim_multiple");
  SetFloatValue(g->add_input(), "x", {"batch", 4, "height"});
  SetFloatValue(g->add_output(), "y", {"batch", 5, "length"});
  auto ints = [g](const std::string& name, std::vector<int64_t> dims, std::vector<int64_t> v) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t x : v) t->add_int64_data(x);
  };
  ints("two", {}, {2});
  ints("four", {}, {4});
  ints("eight", {}, {8});
  ints("keep_1d", {1}, {0});  // Reshape's 0: the batch as it is.
  ints("shape_1", {1}, {1});
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {5, 4, 1}) w->add_dims(d);
  for (int i = 0; i < 20; ++i) w->add_float_data(1.0f);
  AddNode(g, "Shape", {"x"}, "s");
  AddNode(g, "Gather", {"s", "two"}, "h");
  AddNode(g, "Div", {"h", "eight"}, "h8");
  AddNode(g, "Mul", {"h8", "eight"}, "len");
  AddNode(g, "Mul", {"h", "four"}, "h4");
  AddNode(g, "Div", {"h4", "len"}, "ch");
  AddNode(g, "Reshape", {"ch", "shape_1"}, "ch_1d");
  AddNode(g, "Reshape", {"len", "shape_1"}, "len_1d");
  AddIntAttr(AddNode(g, "Concat", {"keep_1d", "ch_1d", "len_1d"}, "to"), "axis", 0);
  AddNode(g, "Reshape", {"x", "to"}, "r");
  AddNode(g, "Conv", {"r", "w"}, "y");
  return model.SerializeAsString();
}

// A streaming accumulator for sequence batching: state_out = state_in + x and y = state_out,
// where x, state_in, state_out and y are float32[batch, 4]; started = float(START), START an
// int32[batch, 1] control input. Server-side state makes y the running sum of a sequence's x.
inline std::string AccumulatorModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("accumulator");
  SetFloatValue(g->add_input(), "x", {"batch", 4});
  onnx::ValueInfoProto* start = g->add_input();
  start->set_name("START");
  auto* tt = start->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::INT32);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  tt->mutable_shape()->add_dim()->set_dim_value(1);
  SetFloatValue(g->add_input(), "state_in", {"batch", 4});
  SetFloatValue(g->add_output(), "y", {"batch", 4});
  SetFloatValue(g->add_output(), "state_out", {"batch", 4});
  SetFloatValue(g->add_output(), "started", {"batch", 1});
  AddNode(g, "Add", {"state_in", "x"}, "state_out");
  AddNode(g, "Identity", {"state_out"}, "y");
  AddIntAttr(AddNode(g, "Cast", {"START"}, "started"), "to", onnx::TensorProto::FLOAT);
  return model.SerializeAsString();
}

// z = Concat((x + y) * (x + y), x, axis 1) where x and y are float32[batch, seq]: two free
// dimensions, intermediates sized batch*seq, an output of [batch, 2*seq].
inline std::string TwoSymbolModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("two_symbols");
  SetFloatValue(g->add_input(), "x", {"batch", "seq"});
  SetFloatValue(g->add_input(), "y", {"batch", "seq"});
  SetFloatValue(g->add_output(), "z", {"batch", "seq2"});
  AddNode(g, "Add", {"x", "y"}, "s");
  AddNode(g, "Mul", {"s", "s"}, "t");
  AddIntAttr(AddNode(g, "Concat", {"t", "x"}, "z"), "axis", 1);
  return model.SerializeAsString();
}

// y = Concat(x, Resize(MaxPool(x, 2x2 stride 2), nearest x2), axis 1) where x is
// float32[batch, 1, height, width]: valid only for even height and width, where 2*floor(H/2) == H.
// `batch` 1 makes a model whose free dims are all spatial (an image model exported at batch 1).
inline std::string PoolUpsampleConcatModel(TestDim batch = "batch") {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("pool_upsample_concat");
  SetFloatValue(g->add_input(), "x", {batch, 1, "height", "width"});
  SetFloatValue(g->add_output(), "y", {batch, 2, "height", "width"});
  onnx::TensorProto* scales = g->add_initializer();
  scales->set_name("scales");
  scales->set_data_type(onnx::TensorProto::FLOAT);
  scales->add_dims(4);
  for (float v : {1.0f, 1.0f, 2.0f, 2.0f}) scales->add_float_data(v);
  onnx::NodeProto* pool = AddNode(g, "MaxPool", {"x"}, "p");
  AddIntsAttr(pool, "kernel_shape", {2, 2});
  AddIntsAttr(pool, "strides", {2, 2});
  onnx::NodeProto* up = AddNode(g, "Resize", {"p", "", "scales"}, "u");
  AddStringAttr(up, "mode", "nearest");
  AddStringAttr(up, "coordinate_transformation_mode", "asymmetric");
  AddIntAttr(AddNode(g, "Concat", {"x", "u"}, "y"), "axis", 1);
  return model.SerializeAsString();
}

// y = (x . A) . B where x is float32[batch, width] and A, B float32[width, width] constants
// filled with `a` and `b`: the product x . A is an intermediate no fusion removes, so the model
// has a batch-scaled arena region.
inline std::string MatMulChain(int64_t width, float a, float b) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("matmul_chain");
  SetBatchRows(g->add_input(), "x", width);
  SetBatchRows(g->add_output(), "y", width);
  auto add_weight = [&](const std::string& name, float value) {
    onnx::TensorProto* w = g->add_initializer();
    w->set_name(name);
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(width);
    w->add_dims(width);
    for (int64_t i = 0; i < width * width; ++i) w->add_float_data(value);
  };
  add_weight("a", a);
  add_weight("b", b);
  auto add_matmul = [&](const std::string& lhs, const std::string& rhs, const std::string& out) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type("MatMul");
    n->set_name(out + "_matmul");
    n->add_input(lhs);
    n->add_input(rhs);
    n->add_output(out);
  };
  add_matmul("x", "a", "xa");
  add_matmul("xa", "b", "y");
  return model.SerializeAsString();
}

// y = Gather(table, ids): `table` a float32[rows, cols] constant with table[r][c] = value(r, c)
// (stored as raw_data, as exporters write large weights), ids int64[batch], y float32[batch, cols].
inline std::string GatherTableModel(int64_t rows, int64_t cols,
                                    const std::function<float(int64_t, int64_t)>& value) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("gather_table");
  onnx::ValueInfoProto* ids = g->add_input();
  ids->set_name("ids");
  ids->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  ids->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("batch");
  onnx::ValueInfoProto* y = g->add_output();
  y->set_name("y");
  auto* yt = y->mutable_type()->mutable_tensor_type();
  yt->set_elem_type(onnx::TensorProto::FLOAT);
  yt->mutable_shape()->add_dim()->set_dim_param("batch");
  yt->mutable_shape()->add_dim()->set_dim_value(cols);
  onnx::TensorProto* table = g->add_initializer();
  table->set_name("table");
  table->set_data_type(onnx::TensorProto::FLOAT);
  table->add_dims(rows);
  table->add_dims(cols);
  std::string raw(static_cast<size_t>(rows * cols) * sizeof(float), '\0');
  float* v = reinterpret_cast<float*>(raw.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = value(r, c);
  }
  table->set_raw_data(std::move(raw));
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Gather");
  n->add_input("table");
  n->add_input("ids");
  n->add_output("y");
  return model.SerializeAsString();
}

// The positive elements of x (float32[rows, 4]), found with NonZero, whose count the data
// decides: idx = Transpose(NonZero(x > 0)) (int64[count, 2], row-major order) and
// y = GatherND(x, idx) * 2 (float32[count]), so kernels after NonZero read the count too.
inline std::string PositiveValuesModel(TestDim rows = "batch") {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("positive_values");
  SetFloatValue(g->add_input(), "x", {rows, 4});
  for (const char* name : {"zero", "two"}) {
    onnx::TensorProto* c = g->add_initializer();
    c->set_name(name);
    c->set_data_type(onnx::TensorProto::FLOAT);
    c->add_float_data(name[0] == 'z' ? 0.0f : 2.0f);
  }
  AddNode(g, "Greater", {"x", "zero"}, "mask");
  AddNode(g, "NonZero", {"mask"}, "where");
  AddIntsAttr(AddNode(g, "Transpose", {"where"}, "idx"), "perm", {1, 0});
  AddNode(g, "GatherND", {"x", "idx"}, "picked");
  AddNode(g, "Mul", {"picked", "two"}, "y");
  // Declared as an exporter writes them: the count is a dim_param of its own.
  SetFloatValue(g->add_output(), "idx", {"count", 2});
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::INT64);
  SetFloatValue(g->add_output(), "y", {"count"});
  return model.SerializeAsString();
}

// words = StringNormalizer(Reshape(Cast(x, STRING), [-1]), UPPER, stopwords ["0"]) and
// back = Cast(words, FLOAT), x float32[batch, 3]: strings made, moved, filtered to a size the data
// decides, and read back. A batch of zeros leaves one empty word, which does not read as a number.
inline std::string StringRoundTripModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("string_round_trip");
  SetFloatValue(g->add_input(), "x", {"batch", 3});
  onnx::TensorProto* flat = g->add_initializer();
  flat->set_name("flat");
  flat->set_data_type(onnx::TensorProto::INT64);
  flat->add_dims(1);
  flat->add_int64_data(-1);
  AddIntAttr(AddNode(g, "Cast", {"x"}, "text"), "to", onnx::TensorProto::STRING);
  AddNode(g, "Reshape", {"text", "flat"}, "flat_text");
  onnx::NodeProto* norm = AddNode(g, "StringNormalizer", {"flat_text"}, "words");
  AddStringAttr(norm, "case_change_action", "UPPER");
  AddIntAttr(norm, "is_case_sensitive", 1);
  onnx::AttributeProto* stop = norm->add_attribute();
  stop->set_name("stopwords");
  stop->set_type(onnx::AttributeProto::STRINGS);
  stop->add_strings("0");
  AddIntAttr(AddNode(g, "Cast", {"words"}, "back"), "to", onnx::TensorProto::FLOAT);
  SetFloatValue(g->add_output(), "words", {"count"});
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::STRING);
  SetFloatValue(g->add_output(), "back", {"count"});
  return model.SerializeAsString();
}

}  // namespace cuvil::testing

#endif  // CUVIL_TESTS_TEST_MODELS_H_
