// cuvil._cuvil: the Python binding of Cuvil's compiler, JIT engine and AOT writer. The cuvil
// package (python/cuvil/__init__.py) turns paths, bytes, onnx.ModelProto and torch.nn.Module into
// the two entry points here, _compile_file and _compile_bytes, which return a CompiledModel.
//
// Errors cross into Python as exceptions only at this boundary: a failed absl::Status becomes
// ValueError (InvalidArgument, NotFound: the caller's model or tensors are at fault) or
// RuntimeError (everything else), carrying Cuvil's message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/compiler/aot_writer.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/parallel.h"

#ifndef CUVIL_AOT_RUNTIME_DIR
#define CUVIL_AOT_RUNTIME_DIR ""
#endif

namespace py = pybind11;

namespace cuvil {
namespace {

// Raises the Python exception for a failed status (see the file comment).
[[noreturn]] void Raise(const absl::Status& status) {
  std::string message(status.message());
  if (status.code() == absl::StatusCode::kInvalidArgument ||
      status.code() == absl::StatusCode::kNotFound) {
    throw py::value_error(message);
  }
  throw std::runtime_error(message);
}

// The process-wide JIT engine, created on first use and never destroyed (models may be collected
// after the interpreter has started tearing down static state). Thread-safe.
absl::StatusOr<JitEngine*> SharedEngine() {
  static absl::StatusOr<std::unique_ptr<JitEngine>>* engine =
      new absl::StatusOr<std::unique_ptr<JitEngine>>(JitEngine::Create());
  if (!engine->ok()) return engine->status();
  return engine->value().get();
}

// The numpy dtype for a Cuvil dtype (bfloat16, which numpy lacks, as its uint16 bit pattern).
py::dtype NumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return py::dtype("float32");
    case DType::kFloat64:
      return py::dtype("float64");
    case DType::kFloat16:
      return py::dtype("float16");
    case DType::kBFloat16:
    case DType::kUInt16:
      return py::dtype("uint16");
    case DType::kInt8:
      return py::dtype("int8");
    case DType::kUInt8:
      return py::dtype("uint8");
    case DType::kInt16:
      return py::dtype("int16");
    case DType::kInt32:
      return py::dtype("int32");
    case DType::kInt64:
      return py::dtype("int64");
    case DType::kUInt32:
      return py::dtype("uint32");
    case DType::kUInt64:
      return py::dtype("uint64");
    case DType::kBool:
      return py::dtype("bool");
    case DType::kString:  // Refused when the model compiles.
    case DType::kUndefined:
      break;
  }
  throw std::runtime_error(absl::StrCat("dtype ", DTypeName(dtype), " has no numpy equivalent"));
}

// numpy's dtype.kind letter for a Cuvil dtype.
char NumpyKind(DType dtype) {
  if (dtype == DType::kBool) return 'b';
  if (IsFloat(dtype) && dtype != DType::kBFloat16) return 'f';
  if (IsSigned(dtype)) return 'i';
  return 'u';
}

// A graph input's or output's description, as Python sees it. Thread-compatible value type.
struct TensorInfo {
  std::string name;
  std::string dtype;  // Cuvil's (ONNX-style) name: "float32", "int64", "bool".
  // Fixed dims as ints, symbolic ones as their expression ("batch", "4*batch").
  std::vector<std::variant<int64_t, std::string>> shape;

  // "TensorInfo(name='x', dtype='float32', shape=['batch', 784])".
  std::string Repr() const {
    std::vector<std::string> dims;
    for (const auto& d : shape) {
      dims.push_back(std::holds_alternative<int64_t>(d) ? absl::StrCat(std::get<int64_t>(d))
                                                        : "'" + std::get<std::string>(d) + "'");
    }
    return absl::StrCat("TensorInfo(name='", name, "', dtype='", dtype, "', shape=[",
                        absl::StrJoin(dims, ", "), "])");
  }
};

// The TensorInfo of a signature whose symbolic dimension is called `symbol`.
TensorInfo MakeInfo(const TensorSignature& sig, const std::string& symbol) {
  TensorInfo info{sig.name, DTypeName(sig.dtype), {}};
  for (const SymDim& d : sig.shape) {
    if (d.IsStatic()) {
      info.shape.emplace_back(d.Eval(1));
    } else {
      info.shape.emplace_back(d.ToString(symbol.empty() ? "batch" : symbol));
    }
  }
  return info;
}

// Where a model came from: compile again from it for another target (save_aot).
// Thread-compatible value type.
struct ModelSource {
  std::string path;   // Read when bytes is empty.
  std::string bytes;  // Serialized ModelProto.
};

// Per-call scratch buffers, reused across calls: a call takes one exclusively and gives it back.
// Thread-safe.
class ArenaPool {
 public:
  // A buffer of at least `bytes` (64-byte aligned), exclusive to the caller until Give.
  std::pair<AlignedBuffer, size_t> Take(size_t bytes) {
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = free_.size(); i-- > 0;) {
        if (free_[i].second >= bytes) {
          auto out = std::move(free_[i]);
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return out;
        }
      }
    }
    return {AlignedAlloc(bytes), bytes};
  }
  // Returns a buffer from Take; keeps at most kMaxFree of them (the largest).
  void Give(std::pair<AlignedBuffer, size_t> arena) {
    absl::MutexLock lock(&mu_);
    free_.push_back(std::move(arena));
    if (free_.size() > kMaxFree) {
      size_t smallest = 0;
      for (size_t i = 1; i < free_.size(); ++i) {
        if (free_[i].second < free_[smallest].second) smallest = i;
      }
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(smallest));
    }
  }

 private:
  static constexpr size_t kMaxFree = 4;
  absl::Mutex mu_;
  std::vector<std::pair<AlignedBuffer, size_t>> free_ ABSL_GUARDED_BY(mu_);
};

// Reads the options compile() accepts (see python/cuvil/__init__.py) into `options`.
// TypeError for an unknown option; ValueError for a bad value.
void ParseOptions(const py::dict& given, CompileOptions* options, int* intra_op_threads) {
  for (const auto& [key_obj, value] : given) {
    const std::string key = py::cast<std::string>(key_obj);
    if (key == "opt_level") {
      int level = py::cast<int>(value);
      if (level < 0 || level > 3) {
        throw py::value_error(absl::StrCat("opt_level must be 0..3, not ", level));
      }
      options->opt_level = level;
    } else if (key == "intra_op_threads") {
      int threads = py::cast<int>(value);
      if (threads < 1) {
        throw py::value_error(absl::StrCat("intra_op_threads must be at least 1, not ", threads));
      }
      *intra_op_threads = threads;
    } else if (key == "dim_overrides") {
      options->import.dim_overrides = py::cast<std::map<std::string, int64_t>>(value);
    } else if (key == "dim_multiples") {
      options->import.dim_multiples = py::cast<std::map<std::string, int64_t>>(value);
    } else if (key == "input_shapes") {
      options->import.input_shapes = py::cast<std::map<std::string, std::vector<int64_t>>>(value);
    } else if (key == "run_checker") {
      options->import.run_checker = py::cast<bool>(value);
    } else if (key == "emit_llvm") {
      options->emit_llvm_path =
          py::cast<std::string>(py::module_::import("os").attr("fspath")(value));
    } else {
      throw py::type_error(absl::StrCat(
          "compile() got an unknown option '", key,
          "' (known: intra_op_threads, opt_level, dim_overrides, dim_multiples, input_shapes, "
          "run_checker, emit_llvm)"));
    }
  }
}

// A compiled model linked into the shared JIT engine. Thread-safe: calls may run concurrently
// (each takes its own arena; the GIL is released while the generated code runs).
class PyCompiledModel {
 public:
  // Compiles `source` with `options` and loads it (the GIL is released meanwhile). `name` is the
  // default name of save_aot's library.
  static std::unique_ptr<PyCompiledModel> Compile(ModelSource source, CompileOptions options,
                                                  int intra_op_threads, std::string name) {
    auto model = std::unique_ptr<PyCompiledModel>(new PyCompiledModel());
    model->source_ = std::move(source);
    model->options_ = std::move(options);
    model->threads_ = intra_op_threads;
    model->name_ = std::move(name);
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = model->CompileAndLoad();
    }
    if (!status.ok()) Raise(status);
    const CompiledModel& m = model->loaded_->model();
    for (const TensorSignature& sig : m.inputs) {
      model->inputs_.push_back(MakeInfo(sig, m.symbol));
      model->input_dtypes_.push_back(NumpyDType(sig.dtype));
    }
    for (const TensorSignature& sig : m.outputs) {
      model->outputs_.push_back(MakeInfo(sig, m.symbol));
      model->output_dtypes_.push_back(NumpyDType(sig.dtype));
    }
    return model;
  }

  // model(*arrays, **arrays_by_name): runs the model on numpy arrays (or torch tensors, or
  // anything numpy.asarray accepts) and returns the outputs as a list of numpy arrays (torch
  // tensors when any input was one). ValueError for missing, unknown or duplicate inputs and for
  // wrong dtypes or shapes.
  py::list Call(const py::args& args, const py::kwargs& kwargs) {
    const CompiledModel& m = loaded_->model();
    const size_t n = m.inputs.size();
    if (args.size() > n) {
      throw py::value_error(absl::StrCat("expected ", n, " inputs, got ", args.size()));
    }
    absl::InlinedVector<py::object, 8> given(n);
    for (size_t i = 0; i < args.size(); ++i) given[i] = args[i];
    if (kwargs.size() > 0) {
      for (const auto& [key, value] : kwargs) {
        const std::string name = py::cast<std::string>(key);
        size_t i = 0;
        while (i < n && m.inputs[i].name != name) ++i;
        if (i == n) throw py::value_error(absl::StrCat("the model has no input '", name, "'"));
        if (given[i]) throw py::value_error(absl::StrCat("input '", name, "' given twice"));
        given[i] = py::reinterpret_borrow<py::object>(value);
      }
    }
    bool torch_io = false;
    absl::InlinedVector<py::array, 8> arrays(n);
    std::vector<std::vector<int64_t>> shapes(n);
    absl::InlinedVector<const void*, 8> in_ptrs(n);
    for (size_t i = 0; i < n; ++i) {
      if (!given[i]) throw py::value_error(absl::StrCat("missing input '", m.inputs[i].name, "'"));
      arrays[i] = AsArray(given[i], i, &torch_io);
      const py::array& a = arrays[i];
      shapes[i].assign(a.shape(), a.shape() + a.ndim());
      in_ptrs[i] = a.data();
    }
    // Binds every free dimension (just the batch for most models) and checks each input dim.
    auto syms = loaded_->ResolveSymbols(shapes);
    if (!syms.ok()) Raise(syms.status());
    const int64_t* batch = syms->data();
    if (*batch < 1)
      throw py::value_error(
          absl::StrCat(m.symbol.empty() ? "batch" : m.symbol, " must be at least 1, got ", *batch));
    const int64_t arena_bytes = ArenaBytesFor(*syms);
    absl::InlinedVector<py::array, 8> outputs;
    absl::InlinedVector<void*, 8> out_ptrs;
    for (size_t i = 0; i < m.outputs.size(); ++i) {
      // ResolveSymbols checked that every output shape evaluates.
      outputs.emplace_back(output_dtypes_[i], *EvalShape(m.outputs[i].shape, *syms));
      out_ptrs.push_back(outputs.back().mutable_data());
    }
    int32_t rc;
    {
      auto arena = arenas_.Take(static_cast<size_t>(arena_bytes));
      py::gil_scoped_release release;
      SetIntraOpThreads(threads_);
      rc = loaded_->Execute(in_ptrs.data(), out_ptrs.data(), *batch, arena.first.get(),
                            syms->data());
      arenas_.Give(std::move(arena));
    }
    if (rc != 0) Raise(EntryStatus(rc));
    if (!m.data_dependent_dims.empty()) {
      // The run decided some output sizes: keep the leading elements it wrote.
      std::vector<std::vector<int64_t>> exact = loaded_->OutputShapesAfterRun(*syms);
      for (size_t i = 0; i < outputs.size(); ++i) {
        const std::vector<int64_t> had(outputs[i].shape(), outputs[i].shape() + outputs[i].ndim());
        if (exact[i] == had) continue;
        py::array trimmed(output_dtypes_[i], exact[i]);
        std::memcpy(trimmed.mutable_data(), outputs[i].data(),
                    std::min<size_t>(trimmed.nbytes(), outputs[i].nbytes()));
        outputs[i] = std::move(trimmed);
      }
    }
    py::list result(outputs.size());
    if (torch_io) {
      py::object from_numpy = py::module_::import("torch").attr("from_numpy");
      for (size_t i = 0; i < outputs.size(); ++i) result[i] = from_numpy(outputs[i]);
    } else {
      for (size_t i = 0; i < outputs.size(); ++i) result[i] = std::move(outputs[i]);
    }
    return result;
  }

  // Mean nanoseconds of one LoadedModel::Execute on `inputs` (validated once; outputs and the
  // arena allocated once), over `number` executions in a C++ loop without the GIL: the generated
  // code's own time, which bench/python_overhead.py subtracts from a Python call's.
  double TimeExecute(const py::list& inputs, int64_t number) {
    const CompiledModel& m = loaded_->model();
    if (inputs.size() != m.inputs.size() || number < 1) {
      throw py::value_error("_time_execute: one array per input and number >= 1");
    }
    bool torch_io = false;
    std::vector<py::array> arrays;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<const void*> in_ptrs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      arrays.push_back(AsArray(inputs[i], i, &torch_io));
      shapes.emplace_back(arrays.back().shape(), arrays.back().shape() + arrays.back().ndim());
      in_ptrs.push_back(arrays.back().data());
    }
    auto syms = loaded_->ResolveSymbols(shapes);
    if (!syms.ok()) Raise(syms.status());
    const int64_t* batch = syms->data();
    std::vector<HostTensor> outputs;
    std::vector<void*> out_ptrs;
    for (const TensorSignature& sig : m.outputs) {
      outputs.emplace_back(sig.dtype, *EvalShape(sig.shape, *syms));
      out_ptrs.push_back(outputs.back().data());
    }
    AlignedBuffer arena = AlignedAlloc(static_cast<size_t>(ArenaBytesFor(*syms)));
    int32_t rc = 0;
    std::chrono::steady_clock::duration elapsed{};
    {
      py::gil_scoped_release release;
      SetIntraOpThreads(threads_);
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < number && rc == 0; ++i) {
        rc = loaded_->Execute(in_ptrs.data(), out_ptrs.data(), *batch, arena.get(), syms->data());
      }
      elapsed = std::chrono::steady_clock::now() - t0;
    }
    if (rc != 0) Raise(EntryStatus(rc));
    return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(number);
  }

  // The graph inputs and outputs in signature order (the order calls take and return them).
  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  // The symbolic (batch) dimension's name; empty for a static model.
  const std::string& symbol() const { return loaded_->model().symbol; }
  // save_aot's default library name (the file's stem, "model" for bytes).
  const std::string& name() const { return name_; }
  // Threads one call may use (the caller included) and the LLVM optimisation level.
  int intra_op_threads() const { return threads_; }
  int opt_level() const { return options_.opt_level; }

  // Every kernel as a dict: index, symbol, op_type, node, signature.
  py::list Kernels() const {
    py::list out;
    for (const KernelFunction& k : loaded_->model().kernels) {
      py::dict d;
      d["index"] = k.index;
      d["symbol"] = k.symbol;
      d["op_type"] = k.op_type;
      d["node"] = k.node_name;
      d["signature"] = k.signature;
      out.append(d);
    }
    return out;
  }

  // Compile phases in order, phase -> milliseconds (repeated phases summed), then jit_load.
  py::dict Timings() const {
    py::dict out;
    for (const PhaseTiming& t : loaded_->model().timings) {
      py::str key(t.phase);
      out[key] = out.contains(key) ? py::cast<double>(out[key]) + t.ms : t.ms;
    }
    out["jit_load"] = load_ms_;
    return out;
  }

  // Arena bytes one call at `batch` uses (models whose only free dimension is the batch).
  int64_t ArenaBytes(int64_t batch) const {
    const CompiledModel& m = loaded_->model();
    if (m.symbols.size() > 1) {
      throw py::value_error(absl::StrCat("this model's scratch depends on ",
                                         absl::StrJoin(m.symbols, ", "),
                                         ", not on the batch alone; each call sizes its own"));
    }
    return ArenaBytesFor({batch});
  }

  // Arena bytes one call with symbol values `syms` (syms[0] the batch) uses.
  int64_t ArenaBytesFor(const std::vector<int64_t>& syms) const {
    const std::optional<int64_t> bytes = loaded_->model().arena.CheckedBytesForSymbols(syms);
    if (!bytes)
      throw py::value_error(absl::StrCat("batch ", syms[0], " is too large for this model"));
    return *bytes;
  }

  // What `cuvilc compile --aot DIR --target TARGET --name NAME` writes, through the same
  // function: DIR/libNAME.a and DIR/NAME.h, compiled again from the model's source (for this
  // x86-64 host, one body per CPU level with run-time dispatch). Returns a dict describing the
  // library (paths, sizes, external symbols).
  py::dict SaveAot(const std::string& dir, const std::string& target,
                   const std::optional<std::string>& name,
                   const std::optional<std::string>& runtime_archive) const {
    CompileOptions options = options_;
    options.emit_llvm_path.clear();
    AotOptions aot;
    aot.out_dir = dir;
    aot.name = name.value_or(name_);
    aot.runtime_archive = runtime_archive.value_or("");
    aot.source = source_.bytes.empty() ? source_.path : "<in-memory ONNX model>";
    AotReport report;
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = CompileAotLibrary(AotSource{source_.path, source_.bytes}, options, aot, target,
                                 CUVIL_AOT_RUNTIME_DIR, &report);
    }
    if (!status.ok()) Raise(status);
    py::dict out;
    out["library"] = report.library_path;
    out["header"] = report.header_path;
    out["library_bytes"] = report.library_bytes;
    out["code_bytes"] = report.code_bytes;
    out["weights_bytes"] = report.weights_bytes;
    out["runtime_bytes"] = report.runtime_bytes;
    out["external_symbols"] = report.external_symbols;
    return out;
  }

  // "<cuvil.CompiledModel 'NAME' inputs=[...] outputs=[...]>".
  std::string Repr() const {
    std::vector<std::string> ins, outs;
    for (const auto& t : inputs_) ins.push_back(t.Repr());
    for (const auto& t : outputs_) outs.push_back(t.Repr());
    return absl::StrCat("<cuvil.CompiledModel '", name_, "' inputs=[", absl::StrJoin(ins, ", "),
                        "] outputs=[", absl::StrJoin(outs, ", "), "]>");
  }

 private:
  PyCompiledModel() = default;

  // Compiles source_ with options_ and links the code into the shared engine (touches no Python
  // object: runs without the GIL).
  absl::Status CompileAndLoad() {
    auto compiled = source_.bytes.empty() ? CompileOnnxFile(source_.path, options_)
                                          : CompileOnnxBytes(source_.bytes, options_);
    if (!compiled.ok()) return compiled.status();
    if (compiled->HasStringTensors()) {
      return absl::UnimplementedError(
          "the model has string tensors, which cuvil.compile does not take yet (cuvilc runs them)");
    }
    static std::atomic<uint64_t> next_id{1};
    auto t0 = std::chrono::steady_clock::now();
    auto engine = SharedEngine();
    if (!engine.ok()) return engine.status();
    auto loaded =
        (*engine)->Load(absl::StrCat("python/", name_, "/", next_id++), std::move(*compiled));
    if (!loaded.ok()) return loaded.status();
    load_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    loaded_ = std::move(*loaded);
    return absl::OkStatus();
  }

  // Input `i` as an array the generated code may read in place: a C-contiguous, aligned,
  // native-order numpy array of the input's dtype. numpy arrays that already are one are used
  // as they are (no copy); other layouts are copied; torch tensors are viewed through numpy
  // (sets *torch_io); other objects go through numpy.asarray with the input's dtype. ValueError
  // for an array or tensor of another dtype.
  py::array AsArray(const py::object& obj, size_t i, bool* torch_io) const {
    py::array a;
    if (py::isinstance<py::array>(obj)) {
      a = py::reinterpret_borrow<py::array>(obj);
    } else if (IsTorchTensor(obj)) {
      *torch_io = true;
      a = py::reinterpret_steal<py::array>(
          obj.attr("detach")().attr("cpu")().attr("numpy")().release());
    } else {
      a = py::array::ensure(py::module_::import("numpy").attr("asarray")(obj, input_dtypes_[i]));
      if (!a)
        throw py::value_error(absl::StrCat("input '", loaded_->model().inputs[i].name,
                                           "': not convertible to an array"));
    }
    const TensorSignature& sig = loaded_->model().inputs[i];
    py::dtype dt = a.dtype();
    if (dt.kind() != NumpyKind(sig.dtype) || dt.itemsize() != DTypeSize(sig.dtype) ||
        dt.byteorder() == '>') {
      throw py::value_error(absl::StrCat("input '", sig.name, "': expected dtype ",
                                         DTypeName(sig.dtype), ", got ",
                                         py::cast<std::string>(py::str(dt))));
    }
    constexpr int kInPlace = static_cast<int>(py::array::c_style) |
                             static_cast<int>(py::detail::npy_api::NPY_ARRAY_ALIGNED_);
    if ((a.flags() & kInPlace) != kInPlace) {
      a = py::array::ensure(a, kInPlace);
      if (!a) throw std::runtime_error(absl::StrCat("input '", sig.name, "': cannot copy it"));
    }
    return a;
  }

  // True for a torch.Tensor (only looked for once torch has been imported).
  static bool IsTorchTensor(const py::object& obj) {
    static PyObject* tensor_type = nullptr;
    if (tensor_type == nullptr) {
      PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");
      if (torch == nullptr) return false;
      tensor_type = PyObject_GetAttrString(torch, "Tensor");  // Kept for the process.
      if (tensor_type == nullptr) {
        PyErr_Clear();
        return false;
      }
    }
    return PyObject_IsInstance(obj.ptr(), tensor_type) == 1;
  }

  ModelSource source_;
  CompileOptions options_;
  int threads_ = 1;
  std::string name_;
  double load_ms_ = 0;
  std::unique_ptr<LoadedModel> loaded_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<py::dtype> input_dtypes_, output_dtypes_;
  mutable ArenaPool arenas_;
};

// _compile_file(path, name, options) and _compile_bytes(data, name, options): see
// python/cuvil/__init__.py's compile() for the options.
std::unique_ptr<PyCompiledModel> CompileFile(const std::string& path, const std::string& name,
                                             const py::dict& options) {
  CompileOptions compile_options;
  int threads = 1;
  ParseOptions(options, &compile_options, &threads);
  return PyCompiledModel::Compile(ModelSource{path, ""}, std::move(compile_options), threads, name);
}

std::unique_ptr<PyCompiledModel> CompileBytes(const py::bytes& bytes, const std::string& name,
                                              const py::dict& options) {
  CompileOptions compile_options;
  int threads = 1;
  ParseOptions(options, &compile_options, &threads);
  std::string data = bytes;
  if (data.empty()) throw py::value_error("not a valid ONNX model (no bytes)");
  return PyCompiledModel::Compile(ModelSource{"", std::move(data)}, std::move(compile_options),
                                  threads, name);
}

}  // namespace
}  // namespace cuvil

PYBIND11_MODULE(_cuvil, m) {
  using cuvil::PyCompiledModel;
  using cuvil::TensorInfo;
  m.doc() = "Cuvil's compiler and JIT engine (use the cuvil package, not this module).";

  py::class_<TensorInfo>(m, "TensorInfo", "A model input's or output's name, dtype and shape.")
      .def_readonly("name", &TensorInfo::name)
      .def_readonly("dtype", &TensorInfo::dtype, "Cuvil's dtype name: float32, int64, bool, ...")
      .def_readonly("shape", &TensorInfo::shape, "Dims: ints, symbolic ones as strings ('batch').")
      .def("__repr__", &TensorInfo::Repr);

  py::class_<PyCompiledModel>(m, "CompiledModel",
                              "A model compiled to native code (cuvil.compile).")
      .def("__call__", &PyCompiledModel::Call,
           "Runs the model: inputs positionally or by name (numpy arrays or torch tensors); "
           "returns the outputs as a list of numpy arrays (torch tensors for torch inputs).")
      .def_property_readonly("inputs", &PyCompiledModel::inputs)
      .def_property_readonly("outputs", &PyCompiledModel::outputs)
      .def_property_readonly("symbol", &PyCompiledModel::symbol,
                             "Name of the symbolic (batch) dimension, empty for static models.")
      .def_property_readonly("name", &PyCompiledModel::name)
      .def_property_readonly("intra_op_threads", &PyCompiledModel::intra_op_threads)
      .def_property_readonly("opt_level", &PyCompiledModel::opt_level)
      .def_property_readonly("kernels", &PyCompiledModel::Kernels)
      .def_property_readonly("timings", &PyCompiledModel::Timings,
                             "Compile phases (ms) in order, then jit_load.")
      .def("arena_bytes", &PyCompiledModel::ArenaBytes, py::arg("batch"),
           "Scratch bytes one call at this batch size uses.")
      .def("save_aot", &PyCompiledModel::SaveAot, py::arg("dir"),
           py::arg("target") = std::string(cuvil::AotHostArch()), py::arg("name") = py::none(),
           py::arg("runtime_archive") = py::none(),
           "Writes DIR/libNAME.a and DIR/NAME.h like `cuvilc compile --aot`.")
      .def("_time_execute", &PyCompiledModel::TimeExecute, py::arg("inputs"), py::arg("number"),
           "Mean ns of the generated code alone over `number` runs (for benchmarks).")
      .def("__repr__", &PyCompiledModel::Repr);

  m.def("_compile_file", &cuvil::CompileFile, py::arg("path"), py::arg("name"), py::arg("options"));
  m.def("_compile_bytes", &cuvil::CompileBytes, py::arg("data"), py::arg("name"),
        py::arg("options"));
  m.def("host_arch", &cuvil::AotHostArch, "The architecture save_aot's default target names.");
}
