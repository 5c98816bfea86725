// The steps cuvil-perf sends to a model with sequence_batching, as Triton's perf_analyzer does:
// every slot (a concurrency slot, or in rate mode one of --num-of-sequences) runs one sequence
// after another, each of --sequence-length steps (varied by --sequence-length-variation), the
// first step carrying sequence_start and the last sequence_end, ids taken in turn from
// --sequence-id-range and never one still open in another slot.
#ifndef CUVIL_TOOLS_CUVIL_PERF_SEQUENCE_PLAN_H_
#define CUVIL_TOOLS_CUVIL_PERF_SEQUENCE_PLAN_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "args.h"

namespace cuvil::perf {

// One request's sequence parameters.
struct SequenceStep {
  int64_t slot = 0;
  uint64_t id = 0;
  bool start = false;
  bool end = false;
  int64_t number = 0;  // 1 for the START step.
};

// Thread-safe.
class SequencePlan {
 public:
  // `slots` sequences at once. InvalidArgument when the id range holds no more ids than slots
  // (an id could not be kept apart from the open ones).
  static absl::Status Check(const PerfOptions& options, int64_t slots);
  SequencePlan(const PerfOptions& options, int64_t slots);

  // Rate mode: waits for a slot with no step in flight and takes it (round robin); Release gives
  // it back. Concurrency mode uses slot i from thread i without them.
  int64_t Acquire();
  void Release(int64_t slot);

  // The next step of `slot`'s sequence, starting a new sequence (the next free id, a new length)
  // after the last one ended or was abandoned.
  SequenceStep Next(int64_t slot);
  // A step of `slot` failed: its sequence is given up (the next step starts a new one) and its id
  // is free again.
  void Abandon(int64_t slot);
  // For every slot with an open sequence, the END step that closes it; the slots are then idle.
  std::vector<SequenceStep> CloseOpen();

  // Sequences begun (their START step handed out) and completed (their END step handed out).
  uint64_t started() const;
  uint64_t completed() const;

 private:
  struct Slot {
    bool open = false;
    bool busy = false;
    uint64_t id = 0;
    int64_t length = 0;
    int64_t taken = 0;  // Steps handed out.
  };
  int64_t NewLength();  // Needs mu_.
  uint64_t NewId();     // Needs mu_.
  void Close(Slot& s);  // Needs mu_.

  const PerfOptions options_;
  mutable std::mutex mu_;
  std::condition_variable free_;
  std::vector<Slot> slots_;
  absl::flat_hash_set<uint64_t> in_use_;
  uint64_t next_id_;
  int64_t next_slot_ = 0;
  std::mt19937_64 rng_;
  uint64_t started_ = 0, completed_ = 0;
};

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_SEQUENCE_PLAN_H_
