#include "cuvil/server/model_config.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cuvil {
namespace {

using inference::DataType;
using inference::ModelConfig;
using inference::ModelInstanceGroup;

// Triton's ORT backend autocompletes max_batch_size to 4; Cuvil compiles one kernel for every
// batch size, so a larger default costs nothing but arena space and lets the batcher work.
constexpr int32_t kDefaultMaxBatchSize = 32;

constexpr char kIntraOpThreads[] = "intra_op_threads";
// Triton's ORT backend spelling, accepted so existing repositories keep their setting.
constexpr char kIntraOpThreadCount[] = "intra_op_thread_count";

// Cuvil extension (see SchedulerOptions::inline_execution_max_us): requests on an idle instance
// run on the front-end thread while executions take at most this many microseconds.
constexpr char kInlineExecutionMaxUs[] = "cuvil_inline_execution_max_us";
constexpr uint64_t kDefaultInlineExecutionMaxUs = 500;
// A front-end thread held longer than this would stall other calls; larger values are refused.
constexpr uint64_t kMaxInlineExecutionMaxUs = 100000;

// Cuvil extension (CompileOptionsFromConfig): "NAME=K,NAME=K" free dims that are multiples of K.
constexpr char kDimMultiples[] = "cuvil_dim_multiples";
// Cuvil extension (CompileOptionsFromConfig): "true" / "false", batch-invariant kernels
// (CompileOptions::batch_invariant); default true for models with sequence_batching.
constexpr char kBatchInvariant[] = "cuvil_batch_invariant";

// Bounds on config values that size allocations or work at load time.
constexpr uint64_t kMaxPriorityLevels = 1024;
constexpr int64_t kMaxInstances = 256;
constexpr uint32_t kMaxWarmupCount = 1000;

std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

std::string DimsToString(const google::protobuf::RepeatedField<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

bool IsBatchDim(const SymDim& d) { return d.coef() == 1 && d.power() == 1; }

// Model dims as the config shows them: batch dim dropped when batching, symbolic dims as -1.
std::vector<int64_t> ConfigDims(const SymShape& shape, bool batched) {
  std::vector<int64_t> dims;
  for (size_t i = batched ? 1 : 0; i < shape.size(); ++i) {
    dims.push_back(shape[i].IsStatic() ? shape[i].Eval(1) : -1);
  }
  return dims;
}

template <typename Tensor>
void FillTensor(const TensorSignature& sig, bool batched, Tensor* t) {
  t->set_name(sig.name);
  t->set_data_type(ConfigFromDType(sig.dtype));
  for (int64_t d : ConfigDims(sig.shape, batched)) t->add_dims(d);
}

// Checks config tensors against the model's, fills missing ones and leaves the list in the
// model's order, so InputSpecs()[i] is the compiled entry's i-th argument.
template <typename Tensor>
absl::Status ReconcileTensors(const char* kind, const std::vector<TensorSignature>& model,
                              int32_t max_batch_size, bool require_all,
                              google::protobuf::RepeatedPtrField<Tensor>* tensors) {
  const bool batched = max_batch_size > 0;
  std::set<std::string> seen;
  for (const Tensor& t : *tensors) {
    if (!seen.insert(t.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " ", Quote(t.name()), " is listed twice"));
    }
    auto it = std::find_if(model.begin(), model.end(),
                           [&](const TensorSignature& s) { return s.name == t.name(); });
    if (it == model.end()) {
      std::vector<std::string> names;
      for (const auto& s : model) names.push_back(Quote(s.name));
      return absl::InvalidArgumentError(absl::StrCat(kind, " ", Quote(t.name()),
                                                     " is not in the model (model ", kind,
                                                     "s: ", absl::StrJoin(names, ", "), ")"));
    }
    if (t.has_reshape()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " ", Quote(t.name()), ": reshape is not supported"));
    }
  }
  if (require_all && !tensors->empty()) {
    for (const auto& s : model) {
      if (!seen.count(s.name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("model ", kind, " ", Quote(s.name), " is missing from the config"));
      }
    }
  }

  google::protobuf::RepeatedPtrField<Tensor> ordered;
  for (const TensorSignature& sig : model) {
    auto it = std::find_if(tensors->begin(), tensors->end(),
                           [&](const Tensor& t) { return t.name() == sig.name; });
    const std::string what = absl::StrCat(kind, " ", Quote(sig.name));
    if (batched && (sig.shape.empty() || !IsBatchDim(sig.shape[0]))) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": max_batch_size ", max_batch_size,
                       " requires dim 0 to be the batch dimension, but the model's shape is ",
                       SymShapeToString(sig.shape)));
    }
    Tensor* out = ordered.Add();
    if (it == tensors->end()) {  // Not listed (no inputs at all, or an output): filled in.
      FillTensor(sig, batched, out);
      continue;
    }
    *out = *it;
    if (out->data_type() == inference::TYPE_INVALID) out->set_data_type(ConfigFromDType(sig.dtype));
    if (DTypeFromConfig(out->data_type()) != sig.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": data_type ", inference::DataType_Name(out->data_type()),
                       " does not match the model's ", DTypeName(sig.dtype)));
    }
    const size_t first = batched ? 1 : 0;
    bool match = static_cast<size_t>(out->dims_size()) == sig.shape.size() - first;
    for (int i = 0; match && i < out->dims_size(); ++i) {
      int64_t d = out->dims(i);
      const SymDim& m = sig.shape[first + i];
      if (d < -1) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": dims ", DimsToString(out->dims()), " has a negative dim"));
      }
      if (d != -1 && !(m.IsStatic() && m.Eval(1) == d)) match = false;
      // A config may narrow the model's dims, never loosen them: -1 over a fixed model dim
      // becomes that dim, so requests are checked against what the compiled code reads.
      if (d == -1 && m.IsStatic()) out->set_dims(i, m.Eval(1));
    }
    if (!match) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": dims ", DimsToString(out->dims()),
                       " do not match the model's shape ", SymShapeToString(sig.shape),
                       batched ? " (max_batch_size > 0: dims leave out the batch dim 0)"
                               : " (max_batch_size is 0: dims include dim 0)"));
    }
  }
  tensors->Swap(&ordered);
  return absl::OkStatus();
}

bool SupportedPlatform(const std::string& p) {
  return p.empty() || p == "onnxruntime_onnx" || p == "onnxruntime" || p == "cuvil";
}

absl::Status ValidateDynamicBatching(const ModelConfig& config) {
  if (!config.has_dynamic_batching()) return absl::OkStatus();
  const auto& db = config.dynamic_batching();
  if (config.max_batch_size() <= 0) {
    return absl::InvalidArgumentError(
        "dynamic_batching requires max_batch_size > 0 (the model must have a batch dimension)");
  }
  for (int32_t size : db.preferred_batch_size()) {
    if (size < 1 || size > config.max_batch_size()) {
      return absl::InvalidArgumentError(absl::StrCat("dynamic_batching.preferred_batch_size ", size,
                                                     " is outside 1..", config.max_batch_size(),
                                                     " (max_batch_size)"));
    }
  }
  // The scheduler keeps one queue per level: the count is bounded like any other allocation.
  if (db.priority_levels() > kMaxPriorityLevels) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic_batching.priority_levels ",
                                                   db.priority_levels(), " exceeds the limit of ",
                                                   kMaxPriorityLevels));
  }
  if (db.default_priority_level() > db.priority_levels()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic_batching.default_priority_level ", db.default_priority_level(),
                     " exceeds priority_levels ", db.priority_levels()));
  }
  for (const auto& [level, policy] : db.priority_queue_policy()) {
    if (level < 1 || level > db.priority_levels()) {
      return absl::InvalidArgumentError(absl::StrCat("dynamic_batching.priority_queue_policy key ",
                                                     level, " is outside 1..", db.priority_levels(),
                                                     " (priority_levels)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CompleteInstanceGroups(ModelConfig* config) {
  if (config->instance_group_size() == 0) config->add_instance_group();
  int64_t total = 0;
  for (int i = 0; i < config->instance_group_size(); ++i) {
    ModelInstanceGroup* g = config->mutable_instance_group(i);
    if (g->kind() != ModelInstanceGroup::KIND_CPU && g->kind() != ModelInstanceGroup::KIND_AUTO) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance_group ", i, ": kind ", ModelInstanceGroup::Kind_Name(g->kind()),
                       " is not supported (Cuvil runs on the CPU: use KIND_CPU)"));
    }
    if (g->gpus_size() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance_group ", i, ": gpus cannot be set for KIND_CPU"));
    }
    if (g->count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance_group ", i, ": count ", g->count(), " must be >= 1"));
    }
    // As Triton normalises: unset count is 1, AUTO resolves to CPU, groups get names.
    if (g->count() == 0) g->set_count(1);
    total += g->count();
    // Each instance owns a worker thread and buffers for a full batch.
    if (total > kMaxInstances) {
      return absl::InvalidArgumentError(absl::StrCat(
          "instance_group counts add up to more than the limit of ", kMaxInstances, " instances"));
    }
    g->set_kind(ModelInstanceGroup::KIND_CPU);
    if (g->name().empty()) g->set_name(absl::StrCat(config->name(), "_", i));
  }
  return absl::OkStatus();
}

absl::Status ValidateVersionPolicy(const inference::ModelVersionPolicy& policy) {
  if (policy.has_latest() && policy.latest().num_versions() < 1) {
    return absl::InvalidArgumentError("version_policy.latest.num_versions must be >= 1");
  }
  if (policy.has_specific()) {
    if (policy.specific().versions_size() == 0) {
      return absl::InvalidArgumentError("version_policy.specific lists no versions");
    }
    for (int64_t v : policy.specific().versions()) {
      if (v < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("version_policy.specific.versions ", v, " must be positive"));
      }
    }
  }
  return absl::OkStatus();
}

// Returns the thread count a parameter asks for, 0 when absent.
absl::StatusOr<int> IntraOpThreads(const ModelConfig& config) {
  for (const char* key : {kIntraOpThreads, kIntraOpThreadCount}) {
    auto it = config.parameters().find(key);
    if (it == config.parameters().end()) continue;
    int n = 0;
    if (!absl::SimpleAtoi(it->second.string_value(), &n) || n < 1) {
      return absl::InvalidArgumentError(absl::StrCat("parameters[\"", key,
                                                     "\"] = ", Quote(it->second.string_value()),
                                                     " must be a positive integer"));
    }
    return n;
  }
  return 0;
}

absl::StatusOr<uint64_t> InlineExecutionMaxUs(const ModelConfig& config) {
  auto it = config.parameters().find(kInlineExecutionMaxUs);
  if (it == config.parameters().end()) return kDefaultInlineExecutionMaxUs;
  uint64_t us = 0;
  if (!absl::SimpleAtoi(it->second.string_value(), &us) || us > kMaxInlineExecutionMaxUs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters[\"", kInlineExecutionMaxUs, "\"] = ", Quote(it->second.string_value()),
        " must be an integer from 0 (off) to ", kMaxInlineExecutionMaxUs));
  }
  return us;
}

absl::Status ValidateWarmup(const ModelConfig& config) {
  for (const auto& w : config.model_warmup()) {
    const std::string what = absl::StrCat("model_warmup ", Quote(w.name()));
    if (w.count() > kMaxWarmupCount) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": count ", w.count(), " exceeds the limit of ", kMaxWarmupCount));
    }
    if (config.max_batch_size() > 0 &&
        w.batch_size() > static_cast<uint32_t>(config.max_batch_size())) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": batch_size ", w.batch_size(),
                                                     " exceeds max_batch_size ",
                                                     config.max_batch_size()));
    }
    for (const auto& [name, input] : w.inputs()) {
      auto it = std::find_if(config.input().begin(), config.input().end(),
                             [&](const inference::ModelInput& in) { return in.name() == name; });
      if (it == config.input().end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": input ", Quote(name), " is not a model input"));
      }
      if (input.data_type() != it->data_type()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": input ", Quote(name), " data_type ",
                                                       inference::DataType_Name(input.data_type()),
                                                       " does not match ",
                                                       inference::DataType_Name(it->data_type())));
      }
    }
  }
  return absl::OkStatus();
}

QueuePolicy ToQueuePolicy(const inference::ModelQueuePolicy& p) {
  QueuePolicy q;
  q.timeout_action = p.timeout_action() == inference::ModelQueuePolicy::DELAY
                         ? QueuePolicy::TimeoutAction::kDelay
                         : QueuePolicy::TimeoutAction::kReject;
  q.default_timeout_us = p.default_timeout_microseconds();
  q.allow_timeout_override = p.allow_timeout_override();
  q.max_queue_size = p.max_queue_size();
  return q;
}

std::vector<TensorSpec> Specs(const ModelConfig& config, const auto& tensors) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& t : tensors) {
    TensorSpec spec;
    spec.name = t.name();
    spec.dtype = DTypeFromConfig(t.data_type());
    spec.dims.assign(t.dims().begin(), t.dims().end());
    spec.batched = config.max_batch_size() > 0;
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace

absl::Status CompleteModelConfig(const CompiledModel& model, ModelConfig* config) {
  if (config->name().empty()) config->set_name(model.name);
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("model ", Quote(config->name()), ": ", s.message()));
  };
  if (!SupportedPlatform(config->platform())) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("platform ", Quote(config->platform()),
                     " is not supported (use \"onnxruntime_onnx\" or leave it empty)")));
  }
  if (!SupportedPlatform(config->backend())) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("backend ", Quote(config->backend()),
                     " is not supported (use \"onnxruntime\" or leave it empty)")));
  }
  if (config->platform().empty() && config->backend() != "cuvil") {
    config->set_platform("onnxruntime_onnx");
  }
  if (config->max_batch_size() < 0) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("max_batch_size ", config->max_batch_size(), " must be >= 0")));
  }

  // proto3 cannot tell "max_batch_size: 0" from unset, so 0 counts as unset only when the config
  // describes no tensors (whose dims would otherwise be read with the wrong rank).
  if (config->max_batch_size() == 0 && config->input_size() == 0 && config->output_size() == 0) {
    auto batch_first = [](const std::vector<TensorSignature>& sigs) {
      return std::all_of(sigs.begin(), sigs.end(), [](const TensorSignature& s) {
        return !s.shape.empty() && IsBatchDim(s.shape[0]);
      });
    };
    if (!model.inputs.empty() && batch_first(model.inputs) && batch_first(model.outputs)) {
      config->set_max_batch_size(kDefaultMaxBatchSize);
    }
  }

  // BYTES tensors are not served yet: the wire format (length-prefixed strings) is not decoded.
  if (model.makes_strings) {
    return fail(absl::UnimplementedError(
        "the model makes string tensors; the server does not serve string (BYTES) models yet"));
  }
  for (const auto* sigs : {&model.inputs, &model.outputs}) {
    for (const TensorSignature& sig : *sigs) {
      if (sig.dtype == DType::kString) {
        return fail(absl::UnimplementedError(absl::StrCat(
            "tensor ", Quote(sig.name),
            " is a string tensor; the server does not serve string (BYTES) models yet")));
      }
    }
  }
  if (auto s = ReconcileTensors("input", model.inputs, config->max_batch_size(),
                                /*require_all=*/true, config->mutable_input());
      !s.ok()) {
    return fail(s);
  }
  // Outputs the config leaves out are still computed, so they are filled in rather than refused.
  if (auto s = ReconcileTensors("output", model.outputs, config->max_batch_size(),
                                /*require_all=*/false, config->mutable_output());
      !s.ok()) {
    return fail(s);
  }
  if (auto s = ValidateDynamicBatching(*config); !s.ok()) return fail(s);
  if (auto s = CompleteInstanceGroups(config); !s.ok()) return fail(s);
  if (auto s = ValidateVersionPolicy(config->version_policy()); !s.ok()) return fail(s);
  // Triton shows the default policy explicitly in the config endpoint.
  if (!config->has_version_policy()) {
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  if (auto s = IntraOpThreads(*config).status(); !s.ok()) return fail(s);
  if (auto s = CompileOptionsFromConfig(*config).status(); !s.ok()) return fail(s);
  if (auto s = InlineExecutionMaxUs(*config).status(); !s.ok()) return fail(s);
  if (auto s = ValidateWarmup(*config); !s.ok()) return fail(s);
  return absl::OkStatus();
}

absl::StatusOr<CompileOptions> CompileOptionsFromConfig(const ModelConfig& config) {
  CompileOptions options;
  // A streaming model's state must not depend on which steps share an execution.
  options.batch_invariant = config.has_sequence_batching();
  if (auto bi = config.parameters().find(kBatchInvariant); bi != config.parameters().end()) {
    const std::string& v = bi->second.string_value();
    if (v != "true" && v != "false") {
      return absl::InvalidArgumentError(absl::StrCat("parameters[\"", kBatchInvariant, "\"] = ",
                                                     Quote(v), ": expected \"true\" or \"false\""));
    }
    options.batch_invariant = v == "true";
  }
  // Triton's config may narrow a model's free dims (dims: [3, 224, 224] for a model exported with
  // free height and width): requests are then checked against those dims, so the code is
  // compiled for them (its kernels and memory plan chosen for the size, as for a model exported
  // at that size). The batch dim (max_batch_size > 0) stays free.
  // Malformed dims (below -1, an input listed twice) are left to CompleteModelConfig's messages.
  std::map<std::string, int> listed;
  for (const auto& in : config.input()) ++listed[in.name()];
  for (const auto& in : config.input()) {
    if (listed[in.name()] > 1 ||
        std::any_of(in.dims().begin(), in.dims().end(), [](int64_t d) { return d < -1; }) ||
        std::all_of(in.dims().begin(), in.dims().end(), [](int64_t d) { return d == -1; })) {
      continue;
    }
    options.import.input_shapes_origin =
        config.max_batch_size() > 0
            ? "the config's dims; max_batch_size > 0: dims leave out the batch dim 0"
            : "the config's dims; max_batch_size is 0: dims include dim 0";
    std::vector<int64_t>& shape = options.import.input_shapes[in.name()];
    if (config.max_batch_size() > 0) shape.push_back(-1);
    shape.insert(shape.end(), in.dims().begin(), in.dims().end());
  }
  auto it = config.parameters().find(kDimMultiples);
  if (it == config.parameters().end()) return options;
  const std::string& text = it->second.string_value();
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameters[\"", kDimMultiples, "\"] = ", Quote(text), ": ", why));
  };
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, '=');
    int64_t k = 0;
    if (kv.size() != 2 || absl::StripAsciiWhitespace(kv[0]).empty() ||
        !absl::SimpleAtoi(kv[1], &k)) {
      return bad("expected NAME=K entries separated by commas (e.g. \"height=8,width=8\")");
    }
    if (k < 2 || k > (int64_t{1} << 20)) return bad("each K must be from 2 to 1048576");
    options.import.dim_multiples[std::string(absl::StripAsciiWhitespace(kv[0]))] = k;
  }
  if (options.import.dim_multiples.empty()) return bad("names no dim");
  return options;
}

SchedulerOptions SchedulerOptionsFromConfig(const ModelConfig& config) {
  SchedulerOptions options;
  options.max_batch_size = std::max(config.max_batch_size(), 0);
  options.dynamic_batching = config.has_dynamic_batching();
  if (options.dynamic_batching) {
    const auto& db = config.dynamic_batching();
    DynamicBatchingOptions& b = options.batching;
    b.preferred_batch_sizes.assign(db.preferred_batch_size().begin(),
                                   db.preferred_batch_size().end());
    b.max_queue_delay_us = db.max_queue_delay_microseconds();
    b.preserve_ordering = db.preserve_ordering();
    constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
    b.priority_levels = static_cast<uint32_t>(std::min<uint64_t>(db.priority_levels(), kMax));
    b.default_priority_level =
        static_cast<uint32_t>(std::min<uint64_t>(db.default_priority_level(), kMax));
    b.default_queue_policy = ToQueuePolicy(db.default_queue_policy());
    for (const auto& [level, policy] : db.priority_queue_policy()) {
      if (level <= kMax)
        b.priority_queue_policy[static_cast<uint32_t>(level)] = ToQueuePolicy(policy);
    }
    // Lone requests on an idle model skip the delay unless the config asks for Triton's
    // strict behaviour (parameters { key: "cuvil_strict_queue_delay" value: { string_value: "true"
    // } }).
    auto strict = config.parameters().find("cuvil_strict_queue_delay");
    b.skip_delay_when_idle =
        strict == config.parameters().end() || strict->second.string_value() != "true";
  }
  if (config.has_sequence_batching() && options.max_batch_size > 0) {
    // Steps of different sequences are independent requests: they batch like dynamic batching's,
    // with the oldest strategy's preferred sizes and either strategy's queue delay.
    const auto& sb = config.sequence_batching();
    options.dynamic_batching = true;
    DynamicBatchingOptions& b = options.batching;
    if (sb.has_oldest()) {
      b.preferred_batch_sizes.assign(sb.oldest().preferred_batch_size().begin(),
                                     sb.oldest().preferred_batch_size().end());
      b.max_queue_delay_us = sb.oldest().max_queue_delay_microseconds();
    } else {
      b.max_queue_delay_us = sb.direct().max_queue_delay_microseconds();
    }
    auto strict = config.parameters().find("cuvil_strict_queue_delay");
    b.skip_delay_when_idle =
        strict == config.parameters().end() || strict->second.string_value() != "true";
  }
  int instances = 0;
  for (const auto& g : config.instance_group()) instances += std::max(g.count(), 1);
  options.instance_count = std::max(instances, 1);
  auto threads = IntraOpThreads(config);
  // By default the instances share the cores: workers x intra-op threads never exceed them.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  options.intra_op_threads =
      threads.ok() && *threads > 0 ? *threads : std::max(1, cores / options.instance_count);
  options.inline_execution_max_us = InlineExecutionMaxUs(config).value_or(0);
  return options;
}

std::vector<TensorSpec> InputSpecs(const ModelConfig& config) {
  return Specs(config, config.input());
}

std::vector<TensorSpec> OutputSpecs(const ModelConfig& config) {
  return Specs(config, config.output());
}

DType DTypeFromConfig(DataType type) {
  switch (type) {
    case inference::TYPE_BOOL:
      return DType::kBool;
    case inference::TYPE_UINT8:
      return DType::kUInt8;
    case inference::TYPE_UINT16:
      return DType::kUInt16;
    case inference::TYPE_UINT32:
      return DType::kUInt32;
    case inference::TYPE_UINT64:
      return DType::kUInt64;
    case inference::TYPE_INT8:
      return DType::kInt8;
    case inference::TYPE_INT16:
      return DType::kInt16;
    case inference::TYPE_INT32:
      return DType::kInt32;
    case inference::TYPE_INT64:
      return DType::kInt64;
    case inference::TYPE_FP32:
      return DType::kFloat32;
    case inference::TYPE_FP64:
      return DType::kFloat64;
    case inference::TYPE_FP16:
      return DType::kFloat16;
    case inference::TYPE_BF16:
      return DType::kBFloat16;
    default:
      return DType::kUndefined;  // STRING: no kernels for it.
  }
}

DataType ConfigFromDType(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return inference::TYPE_BOOL;
    case DType::kUInt8:
      return inference::TYPE_UINT8;
    case DType::kUInt16:
      return inference::TYPE_UINT16;
    case DType::kUInt32:
      return inference::TYPE_UINT32;
    case DType::kUInt64:
      return inference::TYPE_UINT64;
    case DType::kInt8:
      return inference::TYPE_INT8;
    case DType::kInt16:
      return inference::TYPE_INT16;
    case DType::kInt32:
      return inference::TYPE_INT32;
    case DType::kInt64:
      return inference::TYPE_INT64;
    case DType::kFloat32:
      return inference::TYPE_FP32;
    case DType::kFloat64:
      return inference::TYPE_FP64;
    case DType::kFloat16:
      return inference::TYPE_FP16;
    case DType::kBFloat16:
      return inference::TYPE_BF16;
    case DType::kString:  // Refused before a config is filled (not served).
    case DType::kUndefined:
      break;
  }
  return inference::TYPE_INVALID;
}

}  // namespace cuvil
