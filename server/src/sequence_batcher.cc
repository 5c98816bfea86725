#include "sequence_batcher.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/runtime/tensor_size.h"
#include "cuvil/server/model_config.h"
#include "model_warmup.h"
#include "spdlog/spdlog.h"

namespace cuvil {
namespace {

using Batching = inference::ModelSequenceBatching;
using Kind = Batching::Control::Kind;

// Triton's default when max_sequence_idle_microseconds is 0, and the most we take (a year:
// larger values would overflow the clock arithmetic).
constexpr uint64_t kDefaultIdleUs = 1000000;
constexpr uint64_t kMaxIdleUs = uint64_t{365} * 24 * 3600 * 1000000;

const char* KindName(Kind kind) {
  switch (kind) {
    case Batching::Control::CONTROL_SEQUENCE_START:
      return "CONTROL_SEQUENCE_START";
    case Batching::Control::CONTROL_SEQUENCE_READY:
      return "CONTROL_SEQUENCE_READY";
    case Batching::Control::CONTROL_SEQUENCE_END:
      return "CONTROL_SEQUENCE_END";
    case Batching::Control::CONTROL_SEQUENCE_CORRID:
      return "CONTROL_SEQUENCE_CORRID";
    default:
      return "an unknown control kind";
  }
}

const inference::ModelInput* FindInput(const inference::ModelConfig& config,
                                       const std::string& name) {
  for (const auto& in : config.input()) {
    if (in.name() == name) return &in;
  }
  return nullptr;
}

const inference::ModelOutput* FindOutput(const inference::ModelConfig& config,
                                         const std::string& name) {
  for (const auto& out : config.output()) {
    if (out.name() == name) return &out;
  }
  return nullptr;
}

// The map key of a sequence id: numeric and string ids never collide.
std::string SequenceKey(const WireSequence& s) {
  return s.string_id.empty() ? absl::StrCat("n", s.id) : absl::StrCat("s", s.string_id);
}

std::string SequenceName(const WireSequence& s) {
  return s.string_id.empty() ? absl::StrCat(s.id) : absl::StrCat("\"", s.string_id, "\"");
}

InferenceResponse Failed(absl::Status status) {
  InferenceResponse r;
  r.status = std::move(status);
  return r;
}

// What a step's answer holds besides the client's: the previous holder and the tensors added.
struct StepHolder {
  std::shared_ptr<const void> client;
  std::vector<HostTensor> controls;
  std::vector<std::shared_ptr<const HostTensor>> state;
};

}  // namespace

absl::StatusOr<SequenceLimits> SequenceBatcher::LimitsFromConfig(
    const inference::ModelConfig& config) {
  SequenceLimits limits;
  for (auto [key, field] :
       {std::pair<const char*, int64_t*>{"cuvil_max_sequences", &limits.max_sequences},
        {"cuvil_max_sequence_state_bytes", &limits.max_state_bytes},
        {"cuvil_sequence_checkpoint_every", &limits.checkpoint_every}}) {
    auto it = config.parameters().find(key);
    if (it == config.parameters().end()) continue;
    int64_t v = 0;
    if (!absl::SimpleAtoi(it->second.string_value(), &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", key, " is \"",
                                                     it->second.string_value(),
                                                     "\"; it must be a positive integer"));
    }
    *field = v;
  }
  return limits;
}

absl::StatusOr<std::unique_ptr<SequenceBatcher>> SequenceBatcher::Create(
    const inference::ModelConfig& config, const std::string& model_dir) {
  auto limits = LimitsFromConfig(config);
  if (!limits.ok()) return limits.status();
  std::unique_ptr<SequenceBatcher> b(new SequenceBatcher(config, *limits));
  const Batching& sb = config.sequence_batching();
  const bool batched = config.max_batch_size() > 0;
  auto request_shape = [&](const google::protobuf::RepeatedField<int64_t>& dims) {
    std::vector<int64_t> shape;
    if (batched) shape.push_back(1);
    for (int64_t d : dims) shape.push_back(d < 0 ? 1 : d);
    return shape;
  };
  for (const auto& ci : sb.control_input()) {
    const std::string what = absl::StrCat("sequence_batching control_input '", ci.name(), "'");
    const inference::ModelInput* in = FindInput(config, ci.name());
    if (in == nullptr) return absl::InvalidArgumentError(what + " is not a model input");
    ControlInput control{ci.name(), request_shape(in->dims()), {}};
    if (ci.control_size() == 0) return absl::InvalidArgumentError(what + " has no control");
    for (const auto& c : ci.control()) {
      Control out{c.kind(), c.data_type(), 0, 1};
      if (c.kind() == Batching::Control::CONTROL_SEQUENCE_CORRID) {
        const inference::DataType t = c.data_type();
        if (t != inference::TYPE_INT64 && t != inference::TYPE_UINT64 &&
            t != inference::TYPE_INT32 && t != inference::TYPE_UINT32) {
          return absl::InvalidArgumentError(
              what +
              ": CONTROL_SEQUENCE_CORRID needs data_type TYPE_INT64, TYPE_UINT64, "
              "TYPE_INT32 or TYPE_UINT32");
        }
      } else if (c.kind() >= Batching::Control::CONTROL_SEQUENCE_START &&
                 c.kind() <= Batching::Control::CONTROL_SEQUENCE_END) {
        const int lists = (c.int32_false_true_size() > 0) + (c.fp32_false_true_size() > 0) +
                          (c.bool_false_true_size() > 0);
        const int values =
            c.int32_false_true_size() + c.fp32_false_true_size() + c.bool_false_true_size();
        if (lists != 1 || values != 2) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": ", KindName(c.kind()),
              " needs exactly one of int32_false_true, fp32_false_true or bool_false_true, "
              "with two values (false, true)"));
        }
        if (c.int32_false_true_size() > 0) {
          out.dtype = inference::TYPE_INT32;
          out.false_value = c.int32_false_true(0);
          out.true_value = c.int32_false_true(1);
        } else if (c.fp32_false_true_size() > 0) {
          out.dtype = inference::TYPE_FP32;
          out.false_value = c.fp32_false_true(0);
          out.true_value = c.fp32_false_true(1);
        } else {
          out.dtype = inference::TYPE_BOOL;
          out.false_value = c.bool_false_true(0);
          out.true_value = c.bool_false_true(1);
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": unknown control kind ", static_cast<int>(c.kind())));
      }
      if (out.dtype != in->data_type()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": ", KindName(c.kind()), " is ", inference::DataType_Name(out.dtype),
            " but the model input is ", inference::DataType_Name(in->data_type())));
      }
      control.controls.push_back(out);
    }
    int64_t elements = 1;
    for (int64_t d : control.shape) elements *= d;
    if (elements != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must hold one value per request (dims [1]); it has ", elements));
    }
    b->controls_.push_back(std::move(control));
  }
  for (const auto& st : sb.state()) {
    const std::string what = absl::StrCat("sequence_batching state '", st.input_name(), "'");
    const inference::ModelInput* in = FindInput(config, st.input_name());
    const inference::ModelOutput* out = FindOutput(config, st.output_name());
    if (in == nullptr) return absl::InvalidArgumentError(what + " is not a model input");
    if (out == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": output_name '", st.output_name(), "' is not a model output"));
    }
    if (st.data_type() != in->data_type() || st.data_type() != out->data_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": data_type ", inference::DataType_Name(st.data_type()),
                       " must match input ", inference::DataType_Name(in->data_type()),
                       " and output ", inference::DataType_Name(out->data_type())));
    }
    if (st.data_type() == inference::TYPE_STRING) {
      return absl::InvalidArgumentError(what + ": string (BYTES) states are not supported");
    }
    StateSpec spec{st.input_name(), st.output_name(), st.data_type(), {}, nullptr};
    if (batched) spec.initial_shape.push_back(1);
    const google::protobuf::RepeatedField<int64_t>* dims = &in->dims();
    if (st.initial_state_size() > 1) {
      return absl::InvalidArgumentError(what + " has more than one initial_state");
    }
    const inference::ModelSequenceBatching::InitialState* init = nullptr;
    if (st.initial_state_size() == 1) {
      init = &st.initial_state(0);
      if (init->data_type() != inference::TYPE_INVALID && init->data_type() != st.data_type()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": initial_state data_type ", inference::DataType_Name(init->data_type()),
            " is not the state's ", inference::DataType_Name(st.data_type())));
      }
      dims = &init->dims();
    }
    for (int64_t d : *dims) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            what + " has a free dim: give its starting shape in initial_state { dims }");
      }
      spec.initial_shape.push_back(d);
    }
    if (init != nullptr && init->has_data_file()) {
      const std::string file_what =
          absl::StrCat(what, ": initial_state data_file \"", init->data_file(), "\"");
      auto path = ModelDataFilePath(model_dir, "initial_state", init->data_file(), file_what);
      if (!path.ok()) return path.status();
      auto t = std::make_shared<HostTensor>(DTypeFromConfig(st.data_type()), spec.initial_shape);
      std::ifstream f(*path, std::ios::binary);
      if (!f) return absl::InvalidArgumentError(absl::StrCat(file_what, ": cannot read ", *path));
      f.read(reinterpret_cast<char*>(t->data()), static_cast<std::streamsize>(t->byte_size()));
      if (f.gcount() != static_cast<std::streamsize>(t->byte_size())) {
        return absl::InvalidArgumentError(absl::StrCat(file_what, ": ", *path, " holds ",
                                                       f.gcount(), " bytes; the state needs ",
                                                       t->byte_size()));
      }
      spec.initial = std::move(t);
    }
    b->states_.push_back(std::move(spec));
  }
  for (const auto& c : b->controls_) {
    for (const auto& s : b->states_) {
      if (c.name == s.input_name) {
        return absl::InvalidArgumentError(
            absl::StrCat("model input '", c.name, "' is both a control and a state input"));
      }
    }
  }
  return b;
}

SequenceBatcher::SequenceBatcher(const inference::ModelConfig& config, SequenceLimits limits)
    : model_name_(config.name()),
      batched_(config.max_batch_size() > 0),
      idle_limit_(
          std::min<uint64_t>(config.sequence_batching().max_sequence_idle_microseconds() > 0
                                 ? config.sequence_batching().max_sequence_idle_microseconds()
                                 : kDefaultIdleUs,
                             kMaxIdleUs)),
      limits_(limits) {}

bool SequenceBatcher::FillsInput(const std::string& name) const {
  for (const auto& c : controls_) {
    if (c.name == name) return true;
  }
  for (const auto& s : states_) {
    if (s.input_name == name) return true;
  }
  return false;
}

std::vector<std::shared_ptr<const HostTensor>> SequenceBatcher::InitialState(int64_t* bytes) const {
  std::vector<std::shared_ptr<const HostTensor>> state;
  *bytes = 0;
  for (const StateSpec& s : states_) {
    // Shared, not copied: states are never written in place (each step's outputs replace them).
    std::shared_ptr<const HostTensor> t =
        s.initial != nullptr
            ? s.initial
            : std::make_shared<HostTensor>(DTypeFromConfig(s.dtype), s.initial_shape);
    *bytes += static_cast<int64_t>(t->byte_size());
    state.push_back(std::move(t));
  }
  return state;
}

void SequenceBatcher::ReapIdleLocked(std::chrono::steady_clock::time_point now) {
  if (now - last_reap_ < std::chrono::milliseconds(20)) return;
  last_reap_ = now;
  for (auto it = sequences_.begin(); it != sequences_.end();) {
    const Sequence& s = *it->second;
    if (!s.busy && s.pending.empty() && now - s.last_used > idle_limit_) {
      DropLocked(it++);
    } else {
      ++it;
    }
  }
}

void SequenceBatcher::DropLocked(
    absl::flat_hash_map<std::string, std::shared_ptr<Sequence>>::iterator it) {
  state_bytes_ -= it->second->state_bytes;
  it->second->removed = true;
  // The tombstone goes to the log under mu_: a later START of the same id, whose record is
  // written after it takes mu_, can never be buried by it.
  if (log_ != nullptr) {
    if (absl::Status s = log_->Append({it->first, true, it->second->steps, {}}); !s.ok()) {
      spdlog::warn("model '{}': sequence checkpoint not written: {}", model_name_,
                   std::string(s.message()));
    }
  }
  sequences_.erase(it);
}

void SequenceBatcher::Step(WireRequest wire, RunStep run,
                           std::function<void(InferenceResponse)> done) {
  const WireSequence& seq_id = wire.sequence;
  if (!seq_id.present || (seq_id.id == 0 && seq_id.string_id.empty())) {
    return done(Failed(absl::InvalidArgumentError(
        absl::StrCat("model '", model_name_,
                     "' uses sequence batching: the request must set the parameter sequence_id "
                     "(a non-zero integer or a non-empty string)"))));
  }
  for (const WireInput& in : wire.inputs) {
    if (FillsInput(in.name)) {
      return done(Failed(absl::InvalidArgumentError(
          absl::StrCat("input '", in.name, "' is a sequence control or state input of model '",
                       model_name_, "': the server fills it, the request must not send it"))));
    }
  }
  if (!seq_id.string_id.empty()) {
    for (const ControlInput& ci : controls_) {
      for (const Control& c : ci.controls) {
        if (c.kind == Batching::Control::CONTROL_SEQUENCE_CORRID) {
          return done(Failed(absl::InvalidArgumentError(
              absl::StrCat("control input '", ci.name,
                           "' carries the correlation id as a number: sequence_id must be an "
                           "integer, not a string"))));
        }
      }
    }
  }
  const std::string key = SequenceKey(seq_id);
  const auto now = std::chrono::steady_clock::now();
  std::shared_ptr<Sequence> seq;
  absl::Status refused;
  bool queued = false;
  {
    absl::MutexLock lock(&mu_);
    ReapIdleLocked(now);
    auto it = sequences_.find(key);
    if (it != sequences_.end() && !it->second->busy && it->second->pending.empty() &&
        now - it->second->last_used > idle_limit_) {
      DropLocked(it);
      it = sequences_.end();
    }
    if (it == sequences_.end()) {
      int64_t bytes = 0;
      std::vector<std::shared_ptr<const HostTensor>> state;
      if (!seq_id.start) {
        refused = absl::InvalidArgumentError(absl::StrCat(
            "sequence ", SequenceName(seq_id), " of model '", model_name_,
            "' is not open: its first request must set sequence_start (or it ended, or was "
            "idle for more than ",
            idle_limit_.count(), " us)"));
      } else if (static_cast<int64_t>(sequences_.size()) >= limits_.max_sequences) {
        refused = absl::ResourceExhaustedError(
            absl::StrCat("server is busy: model '", model_name_, "' has ", sequences_.size(),
                         " open sequences, its limit (cuvil_max_sequences); end one or retry "
                         "after idle ones expire"));
      } else if (state = InitialState(&bytes); state_bytes_ + bytes > limits_.max_state_bytes) {
        refused = absl::ResourceExhaustedError(
            absl::StrCat("server is busy: model '", model_name_, "': a new sequence's ", bytes,
                         " bytes of state beside the ", state_bytes_,
                         " held exceed cuvil_max_sequence_state_bytes ", limits_.max_state_bytes));
      } else {
        seq = std::make_shared<Sequence>();
        seq->state = std::move(state);
        seq->state_bytes = bytes;
        state_bytes_ += bytes;
        sequences_[key] = seq;
      }
    } else {
      seq = it->second;
    }
    if (refused.ok()) {
      seq->last_used = now;
      if (!seq->busy) {
        seq->busy = true;
      } else if (static_cast<int64_t>(seq->pending.size()) >= limits_.max_pending_steps) {
        refused = absl::ResourceExhaustedError(absl::StrCat(
            "server is busy: sequence ", SequenceName(seq_id), " has ", seq->pending.size(),
            " steps waiting behind its running step; wait for their answers"));
      } else {
        seq->pending.push_back({std::move(wire), std::move(run), std::move(done)});
        queued = true;
      }
    }
    ReportLocked();
  }
  // Callbacks run without mu_.
  if (!refused.ok()) return done(Failed(std::move(refused)));
  if (queued) return;
  Dispatch(key, std::move(seq), {std::move(wire), std::move(run), std::move(done)},
           /*on_step_thread=*/true);
}

void SequenceBatcher::Dispatch(const std::string& key, std::shared_ptr<Sequence> seq,
                               PendingStep step, bool on_step_thread) {
  WireRequest& wire = step.wire;
  const WireSequence seq_id = wire.sequence;
  auto holder = std::make_shared<StepHolder>();
  holder->client = std::move(wire.holder);
  absl::Status refused;
  std::optional<PendingStep> next;
  {
    absl::MutexLock lock(&mu_);
    if (seq->removed) {
      // Taken off the queue just before the admin API ended the sequence (End answers the steps
      // still queued): refused the same way, a START too (it would start a forgotten sequence).
      refused = absl::AbortedError(
          absl::StrCat("sequence ", SequenceName(seq_id), " of model '", model_name_,
                       "' was ended by an administrator before this step ran"));
    } else if (seq_id.step != 0 && seq_id.step != (seq_id.start ? 1 : seq->steps + 1) &&
               !seq->ended) {
      // The client numbers its steps: this one is not the next the server's state is after
      // (e.g. the server restarted from an older checkpoint). Nothing is applied.
      refused = absl::FailedPreconditionError(
          absl::StrCat("sequence ", SequenceName(seq_id), " of model '", model_name_,
                       "' is at step ", seq->steps, ": send its step ", seq->steps + 1,
                       " next (this request is step ", seq_id.step, ")"));
    }
    if (refused.ok() && seq->ended && !seq_id.start) {
      // A step queued behind an END: the sequence is closed unless a later step starts it again.
      refused = absl::InvalidArgumentError(
          absl::StrCat("sequence ", SequenceName(seq_id), " of model '", model_name_,
                       "' ended before this request: set sequence_start to open it again"));
    }
    if (!refused.ok()) {
      if (!seq->pending.empty()) {
        next = std::move(seq->pending.front());
        seq->pending.pop_front();
      } else {
        seq->busy = false;
      }
    } else if (seq_id.start) {
      // START runs on the initial state; the sequence takes it (and its step count restarts)
      // only when the step succeeds.
      int64_t bytes = 0;
      holder->state = InitialState(&bytes);
    } else {
      holder->state = seq->state;
    }
  }
  if (!refused.ok()) {
    step.done(Failed(std::move(refused)));
    if (next.has_value()) Dispatch(key, std::move(seq), *std::move(next), on_step_thread);
    return;
  }
  // Control inputs: one value per request.
  for (const ControlInput& ci : controls_) {
    HostTensor t(DTypeFromConfig(ci.controls.front().dtype), ci.shape);
    for (const Control& c : ci.controls) {
      double v = 0;
      switch (c.kind) {
        case Batching::Control::CONTROL_SEQUENCE_START:
          v = seq_id.start ? c.true_value : c.false_value;
          break;
        case Batching::Control::CONTROL_SEQUENCE_END:
          v = seq_id.end ? c.true_value : c.false_value;
          break;
        case Batching::Control::CONTROL_SEQUENCE_READY:
          v = c.true_value;
          break;
        default:
          break;
      }
      if (c.kind == Batching::Control::CONTROL_SEQUENCE_CORRID) {
        t.SetFromInt64(0, static_cast<int64_t>(seq_id.id));
      } else if (t.dtype() == DType::kFloat32) {
        t.data_as<float>()[0] = static_cast<float>(v);
      } else {
        t.SetFromInt64(0, static_cast<int64_t>(v));
      }
    }
    holder->controls.push_back(std::move(t));
  }
  for (size_t i = 0; i < controls_.size(); ++i) {
    const HostTensor& t = holder->controls[i];
    wire.inputs.push_back(
        {controls_[i].name, DTypeKServeName(t.dtype()), t.shape(), t.data(), t.byte_size(), {}});
  }
  for (size_t i = 0; i < states_.size(); ++i) {
    const HostTensor& t = *holder->state[i];
    wire.inputs.push_back({states_[i].input_name,
                           DTypeKServeName(t.dtype()),
                           t.shape(),
                           t.data(),
                           t.byte_size(),
                           {}});
  }
  // The state outputs are always computed; the client sees them only when it asked for them.
  std::vector<std::string> hidden;
  for (const StateSpec& s : states_) {
    const auto& asked = wire.requested_outputs;
    if (!asked.empty() && std::find(asked.begin(), asked.end(), s.output_name) != asked.end()) {
      continue;
    }
    hidden.push_back(s.output_name);
    if (!asked.empty()) wire.requested_outputs.push_back(s.output_name);
  }
  wire.holder = holder;
  auto done = std::move(step.done);
  step.run(std::move(wire), on_step_thread,
           [this, key, seq, seq_id, hidden = std::move(hidden),
            done = std::move(done)](InferenceResponse response) mutable {
             std::optional<PendingStep> next;
             std::vector<SequenceRecord> records;
             {
               absl::MutexLock lock(&mu_);
               if (seq->removed) {
                 // Ended by the admin API while this step ran: its answer stands, its state is
                 // dropped.
               } else if (response.status.ok()) {
                 std::vector<std::shared_ptr<const HostTensor>> state(states_.size());
                 bool complete = true;
                 for (size_t i = 0; i < states_.size(); ++i) {
                   for (OutputTensor& out : response.outputs) {
                     if (out.name == states_[i].output_name) {
                       state[i] = std::make_shared<const HostTensor>(out.tensor);
                     }
                   }
                   complete = complete && state[i] != nullptr;
                 }
                 int64_t bytes = 0;
                 for (const auto& t : state)
                   bytes += t != nullptr ? static_cast<int64_t>(t->byte_size()) : 0;
                 if (!complete) {
                   response.status =
                       absl::InternalError("a state output is missing from the answer");
                 } else if (bytes > seq->state_bytes &&
                            state_bytes_ + (bytes - seq->state_bytes) > limits_.max_state_bytes) {
                   // A state that grows (a cache along a free dim) stays within the budget too.
                   response.status = absl::ResourceExhaustedError(
                       absl::StrCat("model '", model_name_, "': sequence ", SequenceName(seq_id),
                                    "'s state would grow to ", bytes,
                                    " bytes, beyond cuvil_max_sequence_state_bytes ",
                                    limits_.max_state_bytes, " with the other sequences' ",
                                    state_bytes_ - seq->state_bytes, "; the step is not applied"));
                   response.outputs.clear();
                 } else {
                   state_bytes_ += bytes - seq->state_bytes;
                   seq->state_bytes = bytes;
                   seq->state = std::move(state);
                   if (seq_id.start) {
                     seq->steps = 0;
                     seq->checkpointed_steps = 0;
                     seq->ended = false;
                   }
                   ++seq->steps;
                   response.sequence_step = seq->steps;
                   // A START is always recorded: the log's last record must not be the old
                   // sequence's.
                   if (log_ != nullptr && !seq_id.end &&
                       (seq_id.start || seq->steps - seq->checkpointed_steps >=
                                            static_cast<uint64_t>(limits_.checkpoint_every))) {
                     records.push_back({key, false, seq->steps, seq->state});
                     seq->checkpointed_steps = seq->steps;
                   }
                 }
               }
               seq->last_used = std::chrono::steady_clock::now();
               if (seq_id.end && response.status.ok() && !seq->removed) {
                 seq->ended = true;
                 if (log_ != nullptr) records.push_back({key, true, seq->steps, {}});
                 if (seq->pending.empty()) {
                   auto it = sequences_.find(key);
                   if (it != sequences_.end() && it->second == seq) {
                     state_bytes_ -= seq->state_bytes;
                     sequences_.erase(it);
                   }
                 }
               }
               if (!seq->pending.empty()) {
                 next = std::move(seq->pending.front());
                 seq->pending.pop_front();
               } else {
                 seq->busy = false;
               }
               ReportLocked();
             }
             // Recorded before the answer and before the next step runs: a record never follows a
             // later step's.
             if (!records.empty()) Record(records);
             auto& outs = response.outputs;
             outs.erase(std::remove_if(outs.begin(), outs.end(),
                                       [&](const OutputTensor& o) {
                                         return std::find(hidden.begin(), hidden.end(), o.name) !=
                                                hidden.end();
                                       }),
                        outs.end());
             // The next step starts before this answer goes out: after `done` the version (and this
             // batcher) may be released by the last request that held it.
             if (next.has_value()) Dispatch(key, seq, *std::move(next), /*on_step_thread=*/false);
             done(std::move(response));
           });
}

std::vector<SequenceBatcher::SequenceInfo> SequenceBatcher::List() {
  std::vector<SequenceInfo> out;
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  out.reserve(sequences_.size());
  for (const auto& [key, seq] : sequences_) {
    const bool expired = !seq->busy && seq->pending.empty() && now - seq->last_used > idle_limit_;
    if (seq->ended || expired) continue;
    SequenceInfo info;
    if (key[0] == 'n') {
      (void)absl::SimpleAtoi(absl::string_view(key).substr(1), &info.id);
    } else {
      info.string_id = key.substr(1);
    }
    info.steps = seq->steps;
    info.checkpoint_step = log_ != nullptr ? seq->checkpointed_steps : 0;
    info.state_bytes = seq->state_bytes;
    info.idle_seconds = std::chrono::duration<double>(now - seq->last_used).count();
    info.pending_steps = static_cast<int64_t>(seq->pending.size());
    info.running = seq->busy;
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<uint64_t> SequenceBatcher::End(uint64_t id, const std::string& string_id,
                                              int64_t* refused_steps) {
  WireSequence seq_id;
  seq_id.id = id;
  seq_id.string_id = string_id;
  const std::string key = SequenceKey(seq_id);
  std::deque<PendingStep> refused;
  uint64_t steps = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = sequences_.find(key);
    const auto now = std::chrono::steady_clock::now();
    if (it == sequences_.end() || it->second->ended ||
        (!it->second->busy && it->second->pending.empty() &&
         now - it->second->last_used > idle_limit_)) {
      return absl::NotFoundError(absl::StrCat("sequence ", SequenceName(seq_id), " of model '",
                                              model_name_, "' is not open"));
    }
    Sequence& seq = *it->second;
    steps = seq.steps;
    seq.ended = true;
    refused.swap(seq.pending);
    DropLocked(it);  // Its tombstone is recorded under mu_, before any later START's record.
    ReportLocked();
  }
  *refused_steps = static_cast<int64_t>(refused.size());
  spdlog::info(
      "model '{}': sequence {} ended by the admin API after {} step(s){}", model_name_,
      SequenceName(seq_id), steps,
      refused.empty() ? "" : absl::StrCat("; ", refused.size(), " queued step(s) refused"));
  // Answered without mu_, in arrival order.
  for (PendingStep& p : refused) {
    p.done(Failed(absl::AbortedError(
        absl::StrCat("sequence ", SequenceName(seq_id), " of model '", model_name_,
                     "' was ended by an administrator before this step ran"))));
  }
  return steps;
}

std::string SequenceBatcher::StateIdentity() const {
  std::string id;
  for (const StateSpec& s : states_) {
    absl::StrAppend(&id, id.empty() ? "" : ";", s.input_name, ">", s.output_name, ":",
                    inference::DataType_Name(s.dtype), "[", absl::StrJoin(s.initial_shape, ","),
                    "]");
  }
  return id;
}

void SequenceBatcher::set_metrics(std::shared_ptr<observability::ModelMetrics> metrics) {
  absl::MutexLock lock(&mu_);
  metrics_ = std::move(metrics);
  if (metrics_ == nullptr) return;
  if (log_ != nullptr) metrics_->RecordSequencesRestored(restored_, dropped_);
  ReportLocked();
}

void SequenceBatcher::ReportLocked() {
  if (metrics_ != nullptr) {
    metrics_->SetSequences(static_cast<int64_t>(sequences_.size()), state_bytes_);
  }
}

void SequenceBatcher::Record(const std::vector<SequenceRecord>& records) {
  if (log_ == nullptr || records.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  absl::Cleanup report = [&] {
    std::shared_ptr<observability::ModelMetrics> metrics;
    {
      absl::MutexLock lock(&mu_);
      metrics = metrics_;
    }
    if (metrics != nullptr) {
      metrics->RecordSequenceCheckpoint(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  };
  for (const SequenceRecord& r : records) {
    if (absl::Status s = log_->Append(r); !s.ok()) {
      spdlog::warn("model '{}': sequence checkpoint not written: {}", model_name_,
                   std::string(s.message()));
      return;
    }
  }
  if (log_->NeedsCompaction()) {
    // Under mu_ (the order DropLocked takes too: mu_, then the log's lock), so the live states
    // gathered are the newest: steps wait while the file is rewritten.
    absl::MutexLock lock(&mu_);
    std::vector<SequenceRecord> live;
    for (const auto& [key, seq] : sequences_) {
      if (!seq->ended) live.push_back({key, false, seq->steps, seq->state});
    }
    if (absl::Status s = log_->Compact(live); !s.ok()) {
      spdlog::warn("model '{}': sequence checkpoints not compacted: {}", model_name_,
                   std::string(s.message()));
    }
  }
}

absl::Status SequenceBatcher::EnableCheckpoints(const std::string& path,
                                                const std::string& build_identity) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<SequenceRecord> restored;
  std::vector<std::string> warnings;
  auto log = SequenceLog::Open(path, SequenceLog::Identity(StateIdentity(), build_identity),
                               &restored, &warnings);
  if (!log.ok()) return log.status();
  for (const std::string& w : warnings) {
    spdlog::warn("model '{}': sequence checkpoints {}: {}", model_name_, path, w);
  }
  absl::MutexLock lock(&mu_);
  log_ = *std::move(log);
  const auto now = std::chrono::steady_clock::now();
  int64_t dropped = 0;
  for (SequenceRecord& r : restored) {
    // A record whose tensors do not fit the states (same identity, so only a damaged writer)
    // is not state.
    bool fits = r.state.size() == states_.size();
    for (size_t i = 0; fits && i < states_.size(); ++i) {
      fits = r.state[i]->dtype() == DTypeFromConfig(states_[i].dtype);
    }
    if (!fits || static_cast<int64_t>(sequences_.size()) >= limits_.max_sequences) {
      ++dropped;
      continue;
    }
    auto seq = std::make_shared<Sequence>();
    for (const auto& t : r.state) seq->state_bytes += static_cast<int64_t>(t->byte_size());
    seq->state = std::move(r.state);
    seq->steps = seq->checkpointed_steps = r.steps;
    seq->last_used = now;
    state_bytes_ += seq->state_bytes;
    sequences_[r.key] = std::move(seq);
  }
  restored_ = static_cast<int64_t>(sequences_.size());
  dropped_ = dropped;
  spdlog::info(
      "model '{}': {} open sequence(s) restored from {}{} in {:.1f} ms", model_name_,
      sequences_.size(), path,
      dropped > 0 ? absl::StrCat(" (", dropped, " dropped)") : std::string(),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return absl::OkStatus();
}

SequenceBatcher::~SequenceBatcher() {
  // Teardown: what changed since each sequence's last checkpoint.
  std::vector<SequenceRecord> records;
  {
    absl::MutexLock lock(&mu_);
    if (log_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [key, seq] : sequences_) {
      if (now - seq->last_used > idle_limit_) {
        records.push_back({key, true, seq->steps, {}});  // Expired: not to be restored.
      } else if (!seq->ended && seq->steps > seq->checkpointed_steps) {
        records.push_back({key, false, seq->steps, seq->state});
      }
    }
  }
  Record(records);
}

InferenceResponse SequenceBatcher::StepBlocking(
    WireRequest wire, const std::function<InferenceResponse(WireRequest)>& execute,
    std::chrono::milliseconds wait) {
  // The handshake between the batcher's threads and the caller's, shared by both.
  struct Turn {
    absl::Mutex mu;
    bool turn ABSL_GUARDED_BY(mu) = false;
    bool answered ABSL_GUARDED_BY(mu) = false;
    bool abandoned ABSL_GUARDED_BY(mu) = false;
    WireRequest wire ABSL_GUARDED_BY(mu);
    std::function<void(InferenceResponse)> finish ABSL_GUARDED_BY(mu);
    InferenceResponse answer ABSL_GUARDED_BY(mu);
  };
  auto t = std::make_shared<Turn>();
  Step(
      std::move(wire),
      [t](WireRequest w, bool, std::function<void(InferenceResponse)> finish) {
        bool abandoned;
        {
          absl::MutexLock lock(&t->mu);
          abandoned = t->abandoned;
          if (!abandoned) {
            t->turn = true;
            t->wire = std::move(w);
            t->finish = finish;
          }
        }
        if (abandoned) {
          finish(Failed(absl::DeadlineExceededError(
              "the sequence's earlier step did not answer in time; this step was not run")));
        }
      },
      [t](InferenceResponse r) {
        absl::MutexLock lock(&t->mu);
        t->answered = true;
        t->answer = std::move(r);
      });
  WireRequest mine;
  std::function<void(InferenceResponse)> finish;
  {
    absl::MutexLock lock(&t->mu);
    auto ready = [&t]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu) { return t->turn || t->answered; };
    if (!t->mu.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(wait))) {
      t->abandoned = true;
      return Failed(absl::DeadlineExceededError(absl::StrCat(
          "the sequence's earlier step has not answered after ", wait.count(), " ms")));
    }
    if (!t->turn) return std::move(t->answer);
    mine = std::move(t->wire);
    finish = std::move(t->finish);
  }
  finish(execute(std::move(mine)));
  absl::MutexLock lock(&t->mu);
  t->mu.Await(absl::Condition(&t->answered));
  return std::move(t->answer);
}

}  // namespace cuvil
