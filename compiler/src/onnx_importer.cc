#include "cuvil/compiler/onnx_importer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/runtime/file_window.h"
#include "cuvil/runtime/status_macros.h"
#include "file_copy.h"
#include "google/protobuf/io/coded_stream.h"
#include "initializer_data.h"
#include "model_file_bytes.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx_tensor.h"
#include "op_table.h"
#include "sequence_resolution.h"
#include "subgraph_import.h"

namespace cuvil {
namespace {

constexpr int64_t kMaxModelBytes = (int64_t{2} << 30) - 1;

absl::Status ParseModel(const uint8_t* data, size_t size, onnx::ModelProto* model) {
  if (size > static_cast<size_t>(kMaxModelBytes)) {
    return absl::InvalidArgumentError("model is larger than 2 GB; store weights as external data");
  }
  google::protobuf::io::CodedInputStream stream(data, static_cast<int>(size));
  stream.SetTotalBytesLimit(static_cast<int>(kMaxModelBytes));
  if (!model->ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError("not a valid ONNX model (protobuf parse failed)");
  }
  if (!model->has_graph()) return absl::InvalidArgumentError("ONNX model has no graph");
  return absl::OkStatus();
}

absl::Status RunChecker(const onnx::ModelProto& model, const std::string& model_dir) {
  try {
    onnx::checker::CheckerContext ctx;
    ctx.set_ir_version(static_cast<int>(model.ir_version()));
    std::unordered_map<std::string, int> opsets;
    for (const auto& op : model.opset_import())
      opsets[op.domain()] = static_cast<int>(op.version());
    ctx.set_opset_imports(opsets);
    if (!model_dir.empty()) ctx.set_model_dir(model_dir);
    onnx::checker::LexicalScopeContext lex;
    onnx::checker::check_graph(model.graph(), ctx, lex);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto pos = msg.find('\n'); pos != std::string::npos) msg.resize(pos);
    return absl::InvalidArgumentError(absl::StrCat("ONNX checker: ", msg));
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::Attribute> ConvertAttribute(const onnx::AttributeProto& a,
                                               const std::string& model_dir) {
  switch (a.type()) {
    case onnx::AttributeProto::INT:
      return ir::Attribute(static_cast<int64_t>(a.i()));
    case onnx::AttributeProto::FLOAT:
      return ir::Attribute(a.f());
    case onnx::AttributeProto::STRING:
      return ir::Attribute(a.s());
    case onnx::AttributeProto::INTS:
      return ir::Attribute(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case onnx::AttributeProto::FLOATS:
      return ir::Attribute(std::vector<float>(a.floats().begin(), a.floats().end()));
    case onnx::AttributeProto::STRINGS:
      return ir::Attribute(std::vector<std::string>(a.strings().begin(), a.strings().end()));
    case onnx::AttributeProto::TENSOR: {
      auto t = TensorFromProto(a.t(), model_dir);
      if (!t.ok()) return t.status();
      return ir::Attribute(std::move(*t));
    }
    default:
      return absl::UnimplementedError(absl::StrCat(
          "attribute '", a.name(), "' has an unsupported type (graphs, sparse tensors)"));
  }
}

// Builds the constant a Constant node defines from whichever value attribute it carries. A value
// attribute of the wrong type is an error (std::get would throw across the loader thread).
absl::StatusOr<HostTensor> ConstantNodeValue(const ir::Node& node) {
  for (const auto& [key, attr] : node.attrs) {
    if (key == "value") {
      if (auto* t = std::get_if<HostTensor>(&attr)) return *t;
    } else if (key == "value_float") {
      if (auto* f = std::get_if<float>(&attr)) {
        HostTensor t(DType::kFloat32, {});
        t.data_as<float>()[0] = *f;
        return t;
      }
    } else if (key == "value_floats") {
      if (auto* v = std::get_if<std::vector<float>>(&attr)) {
        HostTensor t(DType::kFloat32, {static_cast<int64_t>(v->size())});
        std::copy(v->begin(), v->end(), t.data_as<float>());
        return t;
      }
    } else if (key == "value_int") {
      if (auto* i = std::get_if<int64_t>(&attr)) {
        HostTensor t(DType::kInt64, {});
        t.data_as<int64_t>()[0] = *i;
        return t;
      }
    } else if (key == "value_ints") {
      if (auto* v = std::get_if<std::vector<int64_t>>(&attr)) {
        HostTensor t(DType::kInt64, {static_cast<int64_t>(v->size())});
        std::copy(v->begin(), v->end(), t.data_as<int64_t>());
        return t;
      }
    } else {
      continue;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(node.Describe(), ": attribute '", key, "' has the wrong type"));
  }
  return absl::UnimplementedError(
      absl::StrCat(node.Describe(), ": unsupported Constant form (sparse or string value)"));
}

// Domains besides ai.onnx whose ops Cuvil runs: the optimizers of ai.onnx.preview.training (its
// other ops, Gradient, are not supported) and ONNX Runtime's 4-bit block-quantized MatMul. Which
// op belongs to which is the op table's OpDef::domain.
constexpr char kTrainingDomain[] = "ai.onnx.preview.training";
constexpr char kMicrosoftDomain[] = "com.microsoft";

// True when the op table has `op_type` in `domain`.
bool InDomain(const std::string& op_type, OpDomain domain) {
  const OpDef* def = OpTable::Get().Find(op_type);
  return def != nullptr && def->domain == domain;
}

class Importer {
 public:
  Importer(const ImportOptions& options, std::string model_dir)
      : options_(options), model_dir_(std::move(model_dir)) {}

  // `raw_data`: one per initializer of the split bytes `model` was parsed from (moved raw_data,
  // or null for a field the proto holds), or empty.
  absl::StatusOr<std::unique_ptr<ir::Graph>> Import(
      const onnx::ModelProto& model, const std::vector<std::optional<MovedRawData>>& raw_data) {
    graph_ = std::make_unique<ir::Graph>();
    const onnx::GraphProto& g = model.graph();
    graph_->name = g.name();
    bool training_domain = false;
    for (const auto& op : model.opset_import()) {
      if (op.domain().empty() || op.domain() == "ai.onnx")
        graph_->opset = static_cast<int>(op.version());
      if (op.domain() == kTrainingDomain) training_domain = true;
    }
    // A model of training optimizers alone imports only their domain; its version 1 came with
    // ai.onnx opset 12, which then stands for the (unused) ai.onnx opset.
    if (graph_->opset == 0 && training_domain) graph_->opset = 12;
    if (graph_->opset == 0)
      return absl::InvalidArgumentError("model does not import the ai.onnx opset");
    if (graph_->opset < 1 || graph_->opset > 18) {
      return absl::UnimplementedError(
          absl::StrCat("ai.onnx opset ", graph_->opset, " is outside the supported range 1..18"));
    }

    for (int i = 0; i < g.initializer_size(); ++i) {
      const onnx::TensorProto& init = g.initializer(i);
      const MovedRawData* moved =
          static_cast<size_t>(i) < raw_data.size() && raw_data[i] ? &*raw_data[i] : nullptr;
      auto t = TensorFromProto(init, model_dir_, moved);
      if (!t.ok()) return t.status();
      ir::Value* v = Define(init.name());
      graph_->MakeConstant(v, std::move(*t));
    }
    for (const auto& input : g.input()) {
      if (by_name_.count(input.name())) continue;  // Initializer listed as input (IR < 4).
      if (auto it = options_.bound_inputs.find(input.name()); it != options_.bound_inputs.end()) {
        graph_->MakeConstant(Define(input.name()), it->second);
        continue;
      }
      ir::Value* v = Define(input.name());
      if (auto s = SetInputType(input, v); !s.ok()) return s;
      v->is_graph_input = true;
      graph_->inputs.push_back(v);
    }
    graph_->symbols = symbols_;
    for (const auto& [id, name] : symbol_names_) graph_->symbols[id] = name;
    if (!symbols_.empty()) graph_->symbol = graph_->symbols[0];

    for (const auto& np : g.node()) {
      if (auto s = ImportNode(np); !s.ok()) return s;
    }
    // Nothing to compute, and an entry point without outputs is not worth its corner cases.
    if (g.output_size() == 0) return absl::InvalidArgumentError("the graph declares no outputs");
    for (const auto& out : g.output()) {
      auto it = by_name_.find(out.name());
      if (it == by_name_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph output '", out.name(), "' is never produced"));
      }
      it->second->is_graph_output = true;
      graph_->outputs.push_back(it->second);
      graph_->output_names.push_back(out.name());
    }
    return std::move(graph_);
  }

 private:
  ir::Value* Define(const std::string& name) {
    ir::Value* v = graph_->NewValue(name);
    by_name_[name] = v;
    return v;
  }

  absl::Status SetInputType(const onnx::ValueInfoProto& info, ir::Value* v) {
    if (!info.type().has_tensor_type()) {
      return absl::UnimplementedError(absl::StrCat("input '", info.name(), "' is not a tensor"));
    }
    const auto& tt = info.type().tensor_type();
    auto dtype = DTypeFromOnnx(tt.elem_type());
    if (!dtype.ok()) {
      return absl::UnimplementedError(
          absl::StrCat("input '", info.name(), "': ", dtype.status().message()));
    }
    v->type.dtype = *dtype;
    if (!tt.has_shape()) {
      return absl::UnimplementedError(absl::StrCat("input '", info.name(), "' has unknown rank"));
    }
    const std::vector<int64_t>* requested = nullptr;  // input_shapes' entry
    if (auto it = options_.input_shapes.find(info.name()); it != options_.input_shapes.end()) {
      requested = &it->second;
    }
    auto mismatch = [&](absl::string_view where) {
      std::vector<std::string> model_dims;
      for (const auto& d : tt.shape().dim()) {
        model_dims.push_back(d.has_dim_value()       ? absl::StrCat(d.dim_value())
                             : d.dim_param().empty() ? "?"
                                                     : d.dim_param());
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", info.name(), "': dims [", absl::StrJoin(*requested, ","),
          "] do not match the model's shape [", absl::StrJoin(model_dims, ","), "]", where,
          options_.input_shapes_origin.empty()
              ? " (-1 keeps the model's dim)"
              : absl::StrCat(" (from ", options_.input_shapes_origin, ")")));
    };
    // The model's dim `i`, or `fixed` when that is not -1 (input_shapes): a fixed value over a
    // symbolic dim makes it static; over a static dim it must agree.
    auto add_dim = [&](const onnx::TensorShapeProto::Dimension& d, int i,
                       int64_t fixed) -> absl::Status {
      if (fixed != -1) {
        if (fixed < 0 || (d.has_dim_value() && d.dim_value() != fixed)) {
          return mismatch(absl::StrCat(" at dim ", i));
        }
        v->type.shape.push_back(SymDim::Const(fixed));
        return absl::OkStatus();
      }
      if (d.has_dim_value()) {
        v->type.shape.push_back(SymDim::Const(d.dim_value()));
        return absl::OkStatus();
      }
      std::string sym = d.has_dim_param() && !d.dim_param().empty()
                            ? d.dim_param()
                            : absl::StrCat("unk__", info.name(), "_", i);
      if (auto it = options_.dim_overrides.find(sym); it != options_.dim_overrides.end()) {
        v->type.shape.push_back(SymDim::Const(it->second));
        return absl::OkStatus();
      }
      // Symbol ids in order of first appearance: the first input's leading free dim, the
      // batch, is symbol 0.
      auto known = std::find(symbols_.begin(), symbols_.end(), sym);
      const auto id = static_cast<int32_t>(known - symbols_.begin());
      if (known == symbols_.end()) symbols_.push_back(sym);
      auto multiple = options_.dim_multiples.find(sym);
      if (multiple == options_.dim_multiples.end()) {
        v->type.shape.push_back(id == 0 ? SymDim::Batch() : SymDim::Symbol(id, sym));
        return absl::OkStatus();
      }
      const int64_t k = multiple->second;
      if (k < 2 || k > (int64_t{1} << 20)) {
        return absl::InvalidArgumentError(
            absl::StrCat("dim_multiples: '", sym, "' = ", k, " must be from 2 to 1048576"));
      }
      // The symbol is the dim divided by k (named so in messages): binding solves
      // k * x = dim and refuses a dim that k does not divide.
      symbol_names_[id] = absl::StrCat(sym, "/", k);
      v->type.shape.push_back(
          id == 0 ? SymDim::Batch(k)
                  : SymDim(*DimMul(DimExpr::Const(k), DimExpr::Symbol(id, symbol_names_[id]))));
      return absl::OkStatus();
    };
    if (requested != nullptr && static_cast<int>(requested->size()) != tt.shape().dim_size()) {
      return mismatch(
          absl::StrCat(": rank ", requested->size(), ", the model's ", tt.shape().dim_size()));
    }
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      CUVIL_RETURN_IF_ERROR(
          add_dim(tt.shape().dim(i), i, requested != nullptr ? (*requested)[i] : -1));
    }
    v->type.shape_known = true;
    // A dim of 2^40 (or a negative one) must fail here, not wrap in later size arithmetic.
    return ir::ValidateTensorType(v->type, absl::StrCat("input '", info.name(), "'"));
  }

  absl::Status ImportNode(const onnx::NodeProto& np) {
    bool training_op =
        np.domain() == kTrainingDomain && InDomain(np.op_type(), OpDomain::kTraining);
    bool microsoft_op =
        np.domain() == kMicrosoftDomain && InDomain(np.op_type(), OpDomain::kMicrosoft);
    if (!np.domain().empty() && np.domain() != "ai.onnx" && !training_op && !microsoft_op) {
      return absl::UnimplementedError(
          absl::StrCat("unsupported op ", np.domain(), "::", np.op_type(), " (node '", np.name(),
                       "'): only the ai.onnx domain, the ", kTrainingDomain, " optimizers and ",
                       kMicrosoftDomain, "::MatMulNBits are supported"));
    }
    std::string name =
        np.name().empty() ? absl::StrCat(np.op_type(), "_", node_counter_) : np.name();
    ++node_counter_;
    ir::Node* node = graph_->NewNode(np.op_type(), name);
    std::vector<const onnx::AttributeProto*> graphs;
    for (const auto& a : np.attribute()) {
      if (a.type() == onnx::AttributeProto::GRAPH) {  // If/Loop/Scan bodies, imported below.
        graphs.push_back(&a);
        continue;
      }
      auto attr = ConvertAttribute(a, model_dir_);
      if (!attr.ok()) {
        return absl::Status(attr.status().code(),
                            absl::StrCat(node->Describe(), ": ", attr.status().message()));
      }
      node->attrs.emplace(a.name(), std::move(*attr));
    }
    for (const auto& in : np.input()) {
      if (in.empty()) {
        node->inputs.push_back(nullptr);
        continue;
      }
      auto it = by_name_.find(in);
      if (it == by_name_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(node->Describe(), ": input '", in, "' is undefined"));
      }
      node->inputs.push_back(it->second);
    }
    // Trailing omitted inputs carry no information.
    while (!node->inputs.empty() && node->inputs.back() == nullptr) node->inputs.pop_back();
    if (!graphs.empty()) {
      auto s = ImportSubgraphAttributes(
          node, np.input_size(), graphs,
          [this](const std::string& n) -> ir::Value* {
            auto it = by_name_.find(n);
            return it == by_name_.end() ? nullptr : it->second;
          },
          [this](const onnx::AttributeProto& a) { return ConvertAttribute(a, model_dir_); });
      if (!s.ok()) return s;
    }
    for (const auto& out : np.output()) {
      if (out.empty()) {
        node->outputs.push_back(nullptr);
        continue;
      }
      if (by_name_.count(out)) {
        return absl::InvalidArgumentError(
            absl::StrCat(node->Describe(), ": output '", out, "' is defined twice"));
      }
      ir::Value* v = Define(out);
      v->producer = node;
      node->outputs.push_back(v);
    }
    if (node->op_type == "Constant") {
      if (node->outputs.size() != 1 || node->outputs[0] == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(node->Describe(), ": Constant must have exactly one named output"));
      }
      auto t = ConstantNodeValue(*node);
      if (!t.ok()) return t.status();
      graph_->MakeConstant(node->outputs[0], std::move(*t));
      graph_->EraseNodes({node});
    }
    return absl::OkStatus();
  }

  const ImportOptions& options_;
  std::string model_dir_;
  std::unique_ptr<ir::Graph> graph_;
  std::unordered_map<std::string, ir::Value*> by_name_;
  std::vector<std::string> symbols_;  // By symbol id.
  // Names of symbols that are not their dim's (dim_multiples: "height/8"), by id.
  std::map<int32_t, std::string> symbol_names_;
  int node_counter_ = 0;
};

// Parses a split model's skeleton; false (and `model` cleared) when it does not parse or does
// not hold one initializer per range, so the caller lets the parser judge the original bytes.
bool ParseSkeleton(const std::string& skeleton, size_t initializers, onnx::ModelProto* model) {
  auto s = ParseModel(reinterpret_cast<const uint8_t*>(skeleton.data()), skeleton.size(), model);
  if (s.ok() && model->graph().initializer_size() == static_cast<int>(initializers)) return true;
  model->Clear();
  return false;
}

absl::StatusOr<std::unique_ptr<ir::Graph>> ImportParsed(
    onnx::ModelProto* model, const std::string& model_dir, const ImportOptions& options,
    const std::vector<std::optional<MovedRawData>>& raw_data) {
  const bool resolve = UsesSequencesOrOptionals(model->graph());
  // The checker only reads the model, and so does the importer (which checks what it relies on
  // itself, as with run_checker off): unless sequences are resolved first (which rewrites the
  // model), the checker runs on a helper thread while the importer reads the weights. Its verdict
  // still comes first.
  std::future<absl::Status> checked;
  if (options.run_checker && !resolve) {
    try {
      checked = std::async(std::launch::async, [&] { return RunChecker(*model, model_dir); });
    } catch (const std::system_error&) {  // No thread to be had: check here.
    }
  }
  if (options.run_checker && !checked.valid()) {
    if (auto s = RunChecker(*model, model_dir); !s.ok()) return s;
  }
  std::vector<OutputLayout> layout;
  if (resolve) {
    // Sequences and optionals become their element tensors before the IR sees them.
    if (auto s = ResolveSequences(model, options, raw_data, &layout); !s.ok()) return s;
  } else {
    layout = TensorOutputLayout(model->graph());
  }
  auto graph = Importer(options, model_dir).Import(*model, raw_data);
  if (checked.valid()) {
    if (auto s = checked.get(); !s.ok()) return s;
  }
  if (graph.ok() && options.output_layout != nullptr) *options.output_layout = std::move(layout);
  return graph;
}

// Raw data moved out of a model held in memory (the caller's bytes, alive while it imports).
class MemoryBytes : public DeferredBytes {
 public:
  explicit MemoryBytes(std::string_view bytes) : bytes_(bytes) {}
  bool Read(uint8_t* dst) const override {
    std::memcpy(dst, bytes_.data(), bytes_.size());
    return true;
  }
  bool failed() const override { return false; }

 private:
  const std::string_view bytes_;
};

absl::StatusOr<std::unique_ptr<ir::Graph>> ImportModel(const uint8_t* data, size_t size,
                                                       const std::string& model_dir,
                                                       const ImportOptions& options) {
  onnx::ModelProto model;
  // Parse a skeleton without the weights, which are then copied once, from `data` to the graph.
  std::optional<SplitModel> split = SplitInitializerData(data, size);
  std::vector<std::optional<MovedRawData>> raw;
  if (split.has_value() && ParseSkeleton(split->skeleton, split->raw_data.size(), &model)) {
    for (std::string_view r : split->raw_data) {
      if (r.data() == nullptr) {
        raw.emplace_back();
        continue;
      }
      raw.push_back(MovedRawData{r.size(), std::make_shared<MemoryBytes>(r)});
    }
  } else {
    if (auto s = ParseModel(data, size, &model); !s.ok()) return s;
  }
  return ImportParsed(&model, model_dir, options, raw);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ir::Graph>> ImportOnnxFile(const std::string& path,
                                                          const ImportOptions& options) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  // The model file is never mapped: a mapping raises SIGBUS (and kills the server) when the file
  // is truncated in place while it is touched. The skeleton is read through a small window; each
  // large raw_data stays in the file until read with pread (model_file_bytes.h), and a file that
  // changes meanwhile is an error.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open model ", path, ": ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("cannot open model ", path, ": not a regular file"));
  }
  if (st.st_size > kMaxModelBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is larger than 2 GB; store weights as external data"));
  }
  FileWindow window(fd, static_cast<uint64_t>(st.st_size));
  absl::StatusOr<std::unique_ptr<ir::Graph>> g = absl::UnknownError("unset");
  std::optional<SplitFile> split = SplitInitializerDataOfFile(window);
  onnx::ModelProto model;
  if (split.has_value() && ParseSkeleton(split->skeleton, split->raw_data.size(), &model)) {
    // The large raw_data stay in the file until read (deferred tensors), through a descriptor of
    // their own that outlives this function.
    auto file = ModelFileBytes::Open(fd, st);
    if (!file.ok()) return file.status();
    std::vector<std::optional<MovedRawData>> raw;
    for (const RawDataRange& r : split->raw_data) {
      if (!r.moved) {
        raw.emplace_back();
        continue;
      }
      raw.push_back(MovedRawData{r.length, (*file)->Range(r.offset, r.length), /*defer=*/true});
    }
    g = ImportParsed(&model, dir, options, raw);
  } else {
    // Not plainly splittable (or changed while read): parse a private copy of the whole file.
    auto file = FileCopy::Open(path, kMaxModelBytes);
    if (!file.ok()) return file.status();
    g = ImportModel(file->data(), file->size(), dir, options);
  }
  if (!g.ok())
    return absl::Status(g.status().code(), absl::StrCat(path, ": ", g.status().message()));
  return g;
}

namespace {

// The declared inputs and outputs of a parsed model; `path` (or what stands for it) prefixes
// errors.
absl::StatusOr<DeclaredModelIo> DeclaredIoOf(const onnx::ModelProto& model,
                                             const std::string& path) {
  const onnx::GraphProto& g = model.graph();
  std::set<std::string> initializers;
  for (const auto& init : g.initializer()) initializers.insert(init.name());
  DeclaredModelIo io;
  for (const auto& in : g.input()) {
    if (initializers.count(in.name())) continue;
    auto kind = IoKindOf(in.type(), absl::StrCat("graph input '", in.name(), "'"));
    if (!kind.ok())
      return absl::Status(kind.status().code(), absl::StrCat(path, ": ", kind.status().message()));
    DeclaredIo declared{in.name(), *kind};
    if (*kind == IoKind::kTensor && in.type().tensor_type().has_shape()) {
      declared.ranked = true;
      for (const auto& d : in.type().tensor_type().shape().dim())
        declared.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
    io.inputs.push_back(std::move(declared));
  }
  for (const auto& out : g.output()) {
    auto kind = IoKindOf(out.type(), absl::StrCat("graph output '", out.name(), "'"));
    if (!kind.ok())
      return absl::Status(kind.status().code(), absl::StrCat(path, ": ", kind.status().message()));
    io.outputs.push_back({out.name(), *kind});
  }
  return io;
}

}  // namespace

absl::StatusOr<DeclaredModelIo> ReadDeclaredIo(const std::string& path) {
  auto file = FileCopy::Open(path, kMaxModelBytes);  // Never a mapping: see ImportOnnxFile.
  if (!file.ok()) return file.status();
  onnx::ModelProto model;
  if (auto s = ParseModel(file->data(), file->size(), &model); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return DeclaredIoOf(model, path);
}

absl::StatusOr<DeclaredModelIo> ReadDeclaredIoBytes(const std::string& bytes) {
  onnx::ModelProto model;
  if (auto s = ParseModel(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &model);
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("model bytes: ", s.message()));
  }
  return DeclaredIoOf(model, "model bytes");
}

absl::StatusOr<std::map<std::string, std::vector<int64_t>>> WithoutDeclaredDims(
    std::map<std::string, std::vector<int64_t>> shapes, const std::string& path,
    const std::string& bytes) {
  if (shapes.empty()) return shapes;
  absl::StatusOr<DeclaredModelIo> io =
      bytes.empty() ? ReadDeclaredIo(path) : ReadDeclaredIoBytes(bytes);
  if (!io.ok()) return io.status();
  for (const DeclaredIo& in : io->inputs) {
    auto it = shapes.find(in.name);
    if (it == shapes.end() || !in.ranked || it->second.size() != in.dims.size()) continue;
    bool fixes_nothing = true;
    for (size_t d = 0; d < in.dims.size(); ++d) {
      if (in.dims[d] != -1 && it->second[d] == in.dims[d]) it->second[d] = -1;
      fixes_nothing = fixes_nothing && it->second[d] == -1;
    }
    if (fixes_nothing) shapes.erase(it);
  }
  return shapes;
}

absl::StatusOr<std::unique_ptr<ir::Graph>> ImportOnnxBytes(const std::string& bytes,
                                                           const ImportOptions& options) {
  return ImportModel(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "", options);
}

}  // namespace cuvil
