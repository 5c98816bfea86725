// Private: where every tensor of a compiled graph lives at run time.
//
// Graph inputs and outputs are the caller's buffers; constants are packed into one read-only
// weights blob; intermediates share one per-execution arena, reusing space between values whose
// lifetimes do not overlap. Batch-scaled values live in the arena's first region (offsets scale
// with the batch), static ones after it, so one plan serves every batch size.
#ifndef CUVIL_COMPILER_SRC_MEMORY_PLAN_H_
#define CUVIL_COMPILER_SRC_MEMORY_PLAN_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/compiler/ir.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil {

struct BufferLocation {
  enum class Kind { kInput, kOutput, kWeight, kArena };
  Kind kind = Kind::kArena;
  int index = 0;       // Input / output position.
  int64_t offset = 0;  // Weight offset; arena offset is per_batch * batch + offset.
  int64_t per_batch = 0;
  // Set when the plan is symbolic (ArenaPlan::bytes_program): the arena offset as an expression
  // in the symbols, replacing per_batch and offset.
  std::optional<DimExpr> offset_expr;
};

struct MemoryPlan {
  std::unordered_map<const ir::Value*, BufferLocation> locations;
  ArenaPlan arena;
  // Every constant at its location's offset (64-byte aligned), in a read-only, page-aligned
  // mapping; at least 64 bytes.
  WeightsBlob weights;
};

// A constant whose bytes in the weights blob are not its tensor's: `bytes` bytes that `write`
// puts at the constant's place, given the constant's bytes as `src` (called once, from any
// thread; the destination is 64-byte aligned and zero-filled). Lets a pass hand the plan a
// transformed layout, such as packed convolution weights, without keeping a second tensor of it,
// and lets a deferred constant (still in its model file) be read only into a reused buffer.
// Thread-compatible value.
struct ConstantImage {
  int64_t bytes = 0;
  std::function<void(const uint8_t* src, uint8_t* dst)> write;
};
using ConstantImages = std::unordered_map<const ir::Value*, ConstantImage>;

// Plans every value the graph's nodes read or write. When every intermediate's size is linear in
// the batch the arena is a batch-scaled region plus a static one; otherwise (several free
// dimensions, or sizes such as batch + 1) it is a SymbolicArena whose offsets are expressions
// (BufferLocation::offset_expr) and whose size is ArenaPlan::bytes_program.
absl::StatusOr<MemoryPlan> PlanMemory(const ir::Graph& graph);

// Copies a plan's constants into its weights blob and seals the blob read-only. Made by
// PlanMemoryDeferringWeights. Several threads may fill one blob together: each claims whole
// items, largest first, so a thread that is done with other work (code generation) can share the
// rest instead of waiting for it. Thread-safe.
class WeightsFill {
 public:
  struct Item {
    const HostTensor* tensor;  // The graph's constant: unchanged and alive until Run returns.
    int64_t offset;
    int64_t bytes;  // Bytes it takes in the blob (its image's, else its tensor's).
    // Its ConstantImage's writer, else empty (a copy).
    std::function<void(const uint8_t* src, uint8_t* dst)> write;
    std::string name;  // The constant's, for errors.
  };
  WeightsFill(std::shared_ptr<const void> owner, uint8_t* blob, size_t bytes,
              std::vector<Item> items);

  // Claims and writes items until none is left to claim; whichever thread writes the last one
  // seals the blob. Returns without waiting for items other threads are still writing.
  void Help();

  // Help, then waits until every item is written and the blob sealed: OK, DataLoss when a
  // deferred constant could not be read from its model file, or Internal when the blob could not
  // be made read-only.
  absl::Status Run();

 private:
  // Faults `bytes` at `dst` in. Huge pages make that several times cheaper, but where the host
  // has not backed the memory yet (a VM whose free memory went back to the host) a 2 MiB fault
  // can take 10-20 ms, far worse than 512 small ones: each 2 MiB is timed, and after a slow one
  // the rest of the blob takes small pages.
  void Prefault(uint8_t* dst, size_t bytes);
  void Seal();
  // A thread's buffer for the deferred tensors its images read: grown to the largest, reused.
  struct ReadBuffer {
    std::unique_ptr<uint8_t[]> data;
    size_t bytes = 0;
    uint8_t* Get(size_t n) {
      if (bytes < n) {
        data.reset(new uint8_t[n]);
        bytes = n;
      }
      return data.get();
    }
  };
  // Writes one item; false when its deferred tensor could not be read.
  bool Write(const Item& item, ReadBuffer* buffer);

  std::shared_ptr<const void> owner_;  // Keeps the mapping alive while it is filled.
  uint8_t* const blob_;
  const size_t bytes_;
  std::atomic<bool> huge_pages_;   // Whether the blob is still advised for huge pages.
  const std::vector<Item> items_;  // Largest first: the order they are claimed in.
  std::atomic<size_t> next_{0};    // The next item to claim.
  std::atomic<size_t> written_{0};
  absl::Mutex mu_;
  std::optional<absl::Status> sealed_ ABSL_GUARDED_BY(mu_);
  std::string unreadable_ ABSL_GUARDED_BY(mu_);  // The first constant that could not be read.
};

// PlanMemory, except that the weights blob is mapped but not filled: `*fill` fills it. Nothing may
// read plan.weights' bytes until fill->Run() returned OK, and the graph's constants must stay
// unchanged until then; code generation needs only the offsets, so it can run while the weights
// are written. A constant in `images` (may be null) takes its image's place and bytes.
absl::StatusOr<MemoryPlan> PlanMemoryDeferringWeights(const ir::Graph& graph,
                                                      const ConstantImages* images,
                                                      std::unique_ptr<WeightsFill>* fill);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_MEMORY_PLAN_H_
