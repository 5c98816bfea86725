// Private: Triton's sequence batcher over a model version's scheduler. A request names a sequence
// (sequence_id, sequence_start, sequence_end); the server fills the model's control inputs
// (START, END, READY, CORRID) and carries its implicit state — each step's state outputs become
// the next step's state inputs — so clients send only their own inputs. Steps of one sequence run
// one at a time, in arrival order; steps of different sequences are independent requests, which
// the scheduler's dynamic batcher may execute together.
#ifndef CUVIL_SERVER_SRC_SEQUENCE_BATCHER_H_
#define CUVIL_SERVER_SRC_SEQUENCE_BATCHER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/observability/server_metrics.h"
#include "cuvil/scheduler/inference_request.h"
#include "cuvil/server/infer_request_builder.h"
#include "model_config.pb.h"
#include "sequence_log.h"

namespace cuvil {

// Limits of one model's sequences (model parameters cuvil_max_sequences and
// cuvil_max_sequence_state_bytes; Triton has neither, so a server cannot be made to keep state
// without bound), and how often their state is checkpointed.
struct SequenceLimits {
  int64_t max_sequences = 4096;
  int64_t max_state_bytes = int64_t{1} << 30;
  // Steps of one sequence queued behind its running step; more are refused.
  int64_t max_pending_steps = 64;
  // With checkpoints on (--snapshot-dir): a sequence's state is recorded every this many steps
  // (cuvil_sequence_checkpoint_every).
  int64_t checkpoint_every = 5;
};

// Thread-safe. Answers never wait on a lock held across a model execution.
class SequenceBatcher {
 public:
  // Runs `wire` (completed with the control and state inputs) as a request and calls `finish`
  // exactly once with its response, on any thread, possibly before returning. `on_step_thread`:
  // called on the thread that called Step (the sequence was idle), which may execute the
  // request itself; false when the previous step's answer starts it (on whichever thread
  // completed that step, which must not be kept executing: a scheduler thread).
  using RunStep = std::function<void(WireRequest wire, bool on_step_thread,
                                     std::function<void(InferenceResponse)> finish)>;

  // The batcher for `config` (completed: every model input and output listed), or
  // InvalidArgument naming the control or state entry that does not fit the model's tensors
  // (unknown name, data type, a control without its two false/true values, a state whose input
  // and output differ). An initial_state's data_file is read from `<model_dir>/initial_state/`
  // (Triton's place: the model's folder, beside its versions), its first bytes the state's
  // values in row-major order: InvalidArgument when the model has no folder (inline load), the
  // path leaves that folder, or the file is missing or shorter than the state.
  static absl::StatusOr<std::unique_ptr<SequenceBatcher>> Create(
      const inference::ModelConfig& config, const std::string& model_dir = "");

  // The limits in `config`'s parameters, or InvalidArgument for a value that is not a positive
  // integer.
  static absl::StatusOr<SequenceLimits> LimitsFromConfig(const inference::ModelConfig& config);

  // True for a model input the server fills (a control or state input): requests may not send it.
  bool FillsInput(const std::string& name) const;

  // Takes one step of the sequence `wire` names and calls `done` exactly once with its answer:
  // when the sequence's earlier steps have answered, `run` gets `wire` with the control and state
  // inputs added (and the state outputs requested); the state outputs of a successful answer
  // become the sequence's state and are left out of the answer unless the client asked for them.
  // A failed step leaves the state as it was. Refused at once (InvalidArgument): no sequence_id,
  // a control or state input sent by the client, a step without sequence_start for a sequence
  // that is not open (never started, ended, or idle longer than max_sequence_idle_microseconds);
  // ResourceExhausted "server is busy: ..." (HTTP 503 with Retry-After, as for the in-flight
  // budget): a new sequence beyond max_sequences or the state budget, or too many steps queued
  // behind a running one.
  void Step(WireRequest wire, RunStep run, std::function<void(InferenceResponse)> done);

  // Step for a caller that runs its request on its own thread (the HTTP front end): waits for
  // the step's turn, then runs `execute` on the calling thread with the completed request and
  // returns the answer. A step whose turn has not come within `wait` (a stuck earlier step)
  // gets DeadlineExceeded, and is answered so when its turn comes.
  InferenceResponse StepBlocking(WireRequest wire,
                                 const std::function<InferenceResponse(WireRequest)>& execute,
                                 std::chrono::milliseconds wait = std::chrono::seconds(60));

  // Checkpoints the sequences to the log at `path` (a file of the server's private snapshot
  // folder), for the model build `build_identity` (the model file's digest and the code
  // generator's identity): restores the sequences it holds (each at its last checkpoint, idle
  // time starting now; a log written for other states or by another build is dropped whole with
  // a warning saying which), then records each sequence's state at its START and every
  // checkpoint_every steps, a tombstone at its END or expiry, and, for the steps since its last
  // record, when the batcher is destroyed (an unload or a graceful exit). Call once, before the
  // first Step. Warnings about dropped or damaged records go to the log. InvalidArgument / Internal
  // when the file cannot be used.
  absl::Status EnableCheckpoints(const std::string& path, const std::string& build_identity = "");
  ~SequenceBatcher();

  // Where the open sequences, their state bytes, checkpoint writes and the sequences restored at
  // load are reported from now on (may be null). Set once the version serves.
  void set_metrics(std::shared_ptr<observability::ModelMetrics> metrics);

  // One open sequence as the admin API lists it. Plain data.
  struct SequenceInfo {
    uint64_t id = 0;               // A numeric id (0 for a string id).
    std::string string_id;         // A string id (empty for a numeric id).
    uint64_t steps = 0;            // Steps taken since its START.
    uint64_t checkpoint_step = 0;  // The step its last checkpoint recorded; 0 without checkpoints.
    int64_t state_bytes = 0;
    double idle_seconds = 0;    // Since its last step was queued or answered.
    int64_t pending_steps = 0;  // Steps waiting behind its running one.
    bool running = false;       // A step is running.
  };
  // The open sequences (not ended, not expired), in no particular order.
  std::vector<SequenceInfo> List();
  // Ends the open sequence `id` (`string_id` when not empty) as its END step would: its state is
  // freed and, with checkpoints on, a tombstone recorded so a restart does not restore it. Steps
  // queued behind its running step are answered Aborted without running (`*refused_steps`
  // counts them; a step already taken off the queue to start next is refused Aborted as well,
  // uncounted); a running step answers as computed but its state is not kept. Returns the steps
  // the sequence had taken; NotFound when no such sequence is open.
  absl::StatusOr<uint64_t> End(uint64_t id, const std::string& string_id, int64_t* refused_steps);

 private:
  struct Control {
    inference::ModelSequenceBatching::Control::Kind kind;
    inference::DataType dtype;
    double false_value = 0;
    double true_value = 1;
  };
  struct ControlInput {
    std::string name;
    std::vector<int64_t> shape;  // The request's shape (batch row included when batched).
    std::vector<Control> controls;
  };
  struct StateSpec {
    std::string input_name;
    std::string output_name;
    inference::DataType dtype;
    std::vector<int64_t> initial_shape;         // Batch row included when batched.
    std::shared_ptr<const HostTensor> initial;  // From a data_file; null: zeros.
  };
  struct PendingStep {
    WireRequest wire;
    RunStep run;
    std::function<void(InferenceResponse)> done;
  };
  struct Sequence {
    std::vector<std::shared_ptr<const HostTensor>> state;  // StateSpec order.
    int64_t state_bytes = 0;
    uint64_t steps = 0;
    uint64_t checkpointed_steps = 0;  // Steps when its state was last recorded.
    bool busy = false;                // A step is running.
    bool ended = false;               // Its END step answered; only a START may follow.
    // Forgotten (ended by the admin API, or expired) while a step ran: that step's answer
    // changes nothing.
    bool removed = false;
    std::chrono::steady_clock::time_point last_used;
    std::deque<PendingStep> pending;
  };

  SequenceBatcher(const inference::ModelConfig& config, SequenceLimits limits);

  // Runs `step` on `seq` (marked busy by the caller), outside mu_.
  void Dispatch(const std::string& key, std::shared_ptr<Sequence> seq, PendingStep step,
                bool on_step_thread);
  // The sequence's state at START: zeros in each state's initial shape.
  std::vector<std::shared_ptr<const HostTensor>> InitialState(int64_t* bytes) const;
  // Drops idle sequences (DropLocked).
  void ReapIdleLocked(std::chrono::steady_clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the sequence at `it`, its tombstone appended to the log (when on).
  void DropLocked(absl::flat_hash_map<std::string, std::shared_ptr<Sequence>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends `records` to the checkpoint log (when on), logging a failure.
  void Record(const std::vector<SequenceRecord>& records);
  // The string the checkpoint log's states must match: the states' names, types and shapes
  // (SequenceLog's "states" line).
  std::string StateIdentity() const;

  const std::string model_name_;
  const bool batched_;
  const std::chrono::microseconds idle_limit_;
  const SequenceLimits limits_;
  std::vector<ControlInput> controls_;
  std::vector<StateSpec> states_;
  std::unique_ptr<SequenceLog> log_;    // Set once by EnableCheckpoints, before any Step.
  int64_t restored_ = 0, dropped_ = 0;  // By EnableCheckpoints, for set_metrics.
  std::shared_ptr<observability::ModelMetrics> metrics_ ABSL_GUARDED_BY(mu_);
  // Publishes the open sequences and their state bytes to metrics_.
  void ReportLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Sequence>> sequences_ ABSL_GUARDED_BY(mu_);
  int64_t state_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point last_reap_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_SEQUENCE_BATCHER_H_
