#include "batch_split.h"

#include <algorithm>
#include <atomic>

#include "absl/container/inlined_vector.h"
#include "cuvil/runtime/parallel.h"

namespace cuvil::jitcache_internal {
namespace {

// Activation bytes one call should touch at most: about what this class of CPU keeps in its
// last-level cache share. Memory-bound networks (MobileNet's depthwise and 1x1 layers) run
// 1.3x faster per item on one item at a time than on eight (measured, bench/RESULTS.md), while
// GEMM-bound models with small activations (MLP) keep whole batches for weight reuse.
constexpr int64_t kSliceBudgetBytes = int64_t{8} << 20;

// Bytes of one batch item of a tensor whose leading dim is coef * batch and whose other dims are
// static; 0 for a tensor without a batch dim; -1 when it cannot be addressed per item.
int64_t ItemBytes(const TensorSignature& sig) {
  const int size = DTypeSize(sig.dtype);
  if (size <= 0) return -1;
  if (IsStaticShape(sig.shape)) return 0;
  if (sig.shape.empty() || sig.shape[0].power() != 1 || sig.shape[0].coef() <= 0) return -1;
  int64_t bytes = sig.shape[0].coef() * size;
  for (size_t i = 1; i < sig.shape.size(); ++i) {
    if (!sig.shape[i].IsStatic() || __builtin_mul_overflow(bytes, sig.shape[i].coef(), &bytes)) {
      return -1;
    }
  }
  return bytes;
}

struct SplitJob {
  const BatchSplitPlan* plan;
  EntryWithTable entry;
  const void* const* inputs;
  void* const* outputs;
  int64_t batch;
  uint8_t* arena;
  void* const* table;
  int64_t parts;
  int threads_per_part;
  std::atomic<int32_t> rc{0};

  // Part `p`: items [lo, hi) in slices, on the arena region after the earlier parts' regions.
  void RunPart(int64_t p) {
    const int64_t lo = batch * p / parts, hi = batch * (p + 1) / parts;
    uint8_t* region = arena + plan->per_batch_bytes * lo + plan->fixed_bytes * p;
    absl::InlinedVector<const void*, 8> in(plan->input_item_bytes.size());
    absl::InlinedVector<void*, 8> out(plan->output_item_bytes.size());
    for (int64_t first = lo; first < hi; first += plan->items_per_call) {
      const int64_t n = std::min(plan->items_per_call, hi - first);
      for (size_t i = 0; i < in.size(); ++i) {
        in[i] = static_cast<const uint8_t*>(inputs[i]) + plan->input_item_bytes[i] * first;
      }
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<uint8_t*>(outputs[i]) + plan->output_item_bytes[i] * first;
      }
      const int32_t r = entry(in.data(), out.data(), n, region, table, nullptr);
      if (r != 0) {
        int32_t expected = 0;
        rc.compare_exchange_strong(expected, r, std::memory_order_relaxed);
        return;
      }
    }
  }

  static void Body(void* ctx, int64_t begin, int64_t end) {
    auto* job = static_cast<SplitJob*>(ctx);
    const int saved = IntraOpThreads();
    SetIntraOpThreads(job->threads_per_part);
    for (int64_t p = begin; p < end; ++p) job->RunPart(p);
    SetIntraOpThreads(saved);
  }
};

}  // namespace

BatchSplitPlan MakeBatchSplitPlan(const CompiledModel& model) {
  BatchSplitPlan plan;
  plan.per_batch_bytes = model.arena.per_batch_bytes;
  plan.fixed_bytes = model.arena.fixed_bytes;
  if (model.arena.max_shards <= 1 || model.arena.symbolic() || model.symbols.size() > 1 ||
      plan.per_batch_bytes % kArenaAlign != 0 || plan.fixed_bytes % kArenaAlign != 0) {
    return plan;
  }
  for (const TensorSignature& sig : model.inputs) {
    const int64_t bytes = ItemBytes(sig);
    if (bytes < 0) return plan;
    plan.input_item_bytes.push_back(bytes);
  }
  for (const TensorSignature& sig : model.outputs) {
    const int64_t bytes = ItemBytes(sig);
    if (bytes <= 0) return plan;  // Every output is written per item.
    plan.output_item_bytes.push_back(bytes);
  }
  plan.max_shards = model.arena.max_shards;
  plan.items_per_call =
      std::max<int64_t>(1, kSliceBudgetBytes / std::max<int64_t>(plan.per_batch_bytes, 1));
  return plan;
}

int32_t ExecuteSplit(const BatchSplitPlan& plan, EntryWithTable entry, const void* const* inputs,
                     void* const* outputs, int64_t batch, void* arena, void* const* table,
                     int64_t* syms) {
  const int threads = IntraOpThreads();
  const int64_t parts = std::min<int64_t>({threads, batch, plan.max_shards});
  if (plan.max_shards <= 1 || batch <= 1 || (parts <= 1 && batch <= plan.items_per_call)) {
    return entry(inputs, outputs, batch, arena, table, syms);
  }
  SplitJob job;
  job.plan = &plan;
  job.entry = entry;
  job.inputs = inputs;
  job.outputs = outputs;
  job.batch = batch;
  job.arena = static_cast<uint8_t*>(arena);
  job.table = table;
  job.parts = std::max<int64_t>(parts, 1);
  job.threads_per_part = std::max(1, static_cast<int>(threads / job.parts));
  if (job.parts == 1) {
    SplitJob::Body(&job, 0, 1);
  } else {
    cuvil_rt_parallel_for(job.parts, kMinParallelWork, &SplitJob::Body, &job);
  }
  return job.rc.load(std::memory_order_relaxed);
}

}  // namespace cuvil::jitcache_internal
