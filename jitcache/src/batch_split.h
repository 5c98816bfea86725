// Private: runs one execution of a batch-separable model as several entry-point calls over parts
// of the batch, on the intra-op threads (one part per thread, no synchronisation between
// kernels) and, within a thread, in cache-sized slices.
#ifndef CUVIL_JITCACHE_SRC_BATCH_SPLIT_H_
#define CUVIL_JITCACHE_SRC_BATCH_SPLIT_H_

#include <cstdint>
#include <vector>

#include "cuvil/format/compiled_model.h"

namespace cuvil::jitcache_internal {

using EntryWithTable = int32_t (*)(const void* const* inputs, void* const* outputs, int64_t batch,
                                   void* arena, void* const* table, int64_t* syms);

// How to address one batch item of every input and output. Thread-compatible value type.
struct BatchSplitPlan {
  int32_t max_shards = 1;  // 1: never split.
  int64_t per_batch_bytes = 0;
  int64_t fixed_bytes = 0;
  // Bytes of one batch item per tensor; 0 for an input without a batch dim (shared by parts).
  std::vector<int64_t> input_item_bytes;
  std::vector<int64_t> output_item_bytes;
  // Items one call processes at most: keeps a slice's activations near the caches.
  int64_t items_per_call = 1;
};

// The plan for `model`: max_shards = 1 when the model is not separable or a tensor cannot be
// addressed per item (then ExecuteSplit is a single call).
BatchSplitPlan MakeBatchSplitPlan(const CompiledModel& model);

// Runs `entry` over `batch` items: min(intra-op threads, batch, max_shards) parts at once, each
// in slices of at most items_per_call items, each part on its own region of `arena` (which holds
// model.arena.BytesFor(batch) bytes). The caller's intra-op thread budget is shared among the
// parts. `syms` (the symbol values, syms[0] == batch) is passed to an unsplit call; a model that
// reads symbols beyond the batch is never split. Returns the first nonzero result of a call,
// else 0. Reentrant.
int32_t ExecuteSplit(const BatchSplitPlan& plan, EntryWithTable entry, const void* const* inputs,
                     void* const* outputs, int64_t batch, void* arena, void* const* table,
                     int64_t* syms);

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_BATCH_SPLIT_H_
