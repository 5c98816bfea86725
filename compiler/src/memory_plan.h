// Private: where every tensor of a compiled graph lives at run time.
//
// Graph inputs and outputs are the caller's buffers; constants are packed into one read-only
// weights blob; intermediates share one per-execution arena, reusing space between values whose
// lifetimes do not overlap. Batch-scaled values live in the arena's first region (offsets scale
// with the batch), static ones after it, so one plan serves every batch size.
#ifndef CUVIL_COMPILER_SRC_MEMORY_PLAN_H_
#define CUVIL_COMPILER_SRC_MEMORY_PLAN_H_

#include <unordered_map>

#include "absl/status/statusor.h"
#include "cuvil/compiler/compiled_model.h"
#include "cuvil/compiler/ir.h"

namespace cuvil {

struct BufferLocation {
  enum class Kind { kInput, kOutput, kWeight, kArena };
  Kind kind = Kind::kArena;
  int index = 0;       // Input / output position.
  int64_t offset = 0;  // Weight offset; arena offset is per_batch * batch + offset.
  int64_t per_batch = 0;
};

struct MemoryPlan {
  std::unordered_map<const ir::Value*, BufferLocation> locations;
  ArenaPlan arena;
  // Every constant at its location's offset (64-byte aligned), in a read-only, page-aligned
  // mapping; at least 64 bytes.
  WeightsBlob weights;
};

// Plans every value the graph's nodes read or write. Unimplemented for sizes that are not linear
// in the batch.
absl::StatusOr<MemoryPlan> PlanMemory(const ir::Graph& graph);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_MEMORY_PLAN_H_
