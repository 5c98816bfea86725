#include "memory_plan.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cuvil/runtime/dim_expr_codec.h"
#include "cuvil/runtime/lifetime_placement.h"
#include "cuvil/runtime/prefault.h"
#include "cuvil/runtime/symbolic_arena.h"

namespace cuvil {
namespace {

constexpr int64_t kAlign = 64;
// Bound on the sum of all buffer sizes of one region (weights, batch-scaled or static arena).
// Placement offsets never exceed that sum, so below 2^61 no offset, end or alignment can overflow.
// Each value is at most ir::kMaxTensorBytes, but a graph may hold very many of them.
constexpr int64_t kMaxRegionBytes = int64_t{1} << 61;

int64_t AlignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// One intermediate value and its lifetime; sizes are bytes (per batch item for batch-scaled
// values).
struct Interval {
  const ir::Value* value;
  LifetimeInterval life;
};

// The most aligned bytes of `items` live across any one of `steps` nodes: a lower bound on any
// placement's region size. Sizes were checked to sum below kMaxRegionBytes.
int64_t LivePeak(const std::vector<Interval>& items, int steps) {
  std::vector<int64_t> delta(static_cast<size_t>(steps) + 2, 0);
  for (const Interval& iv : items) {
    delta[static_cast<size_t>(iv.life.first)] += AlignUp(iv.life.size);
    delta[static_cast<size_t>(iv.life.last) + 1] -= AlignUp(iv.life.size);
  }
  int64_t live = 0, peak = 0;
  for (int64_t d : delta) peak = std::max(peak, live += d);
  return peak;
}

// Places `items` (see PlaceByLifetime) and returns the region size.
int64_t PlaceIntervals(std::vector<Interval>& items) {
  std::vector<LifetimeInterval> lives;
  lives.reserve(items.size());
  for (const Interval& iv : items) lives.push_back(iv.life);
  int64_t total = PlaceByLifetime(absl::MakeSpan(lives), kAlign);
  for (size_t i = 0; i < items.size(); ++i) items[i].life.offset = lives[i].offset;
  return total;
}

// Blobs this large are mapped for transparent huge pages (see WeightsFill::Prefault).
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeBlobBytes = 2 * kHugePage;

// The weights blob in its final place: a fresh anonymous mapping (page-aligned; a large one
// 2 MiB-aligned and advised for huge pages), then filled by a WeightsFill and sealed read-only.
// The JIT engine uses a read-only blob in place instead of copying it, and every compile tier of a
// model shares this one copy.
absl::StatusOr<std::shared_ptr<const void>> MapWeights(size_t bytes) {
  const bool huge = bytes >= kHugeBlobBytes;
  const size_t mapped = huge ? bytes + kHugePage : bytes;
  void* mem = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", bytes, " bytes of weights: ", std::strerror(errno)));
  }
  void* blob = mem;
  if (huge) {
    const uintptr_t at = (reinterpret_cast<uintptr_t>(mem) + kHugePage - 1) & ~(kHugePage - 1);
    blob = reinterpret_cast<void*>(at);
#ifdef MADV_HUGEPAGE
    madvise(blob, bytes, MADV_HUGEPAGE);  // A hint: refused where THP is off.
#endif
  }
  return std::shared_ptr<const void>(blob, [mem, mapped](const void*) { munmap(mem, mapped); });
}

}  // namespace

WeightsFill::WeightsFill(std::shared_ptr<const void> owner, uint8_t* blob, size_t bytes,
                         std::vector<Item> items)
    : owner_(std::move(owner)),
      blob_(blob),
      bytes_(bytes),
      huge_pages_(bytes >= kHugeBlobBytes),
      items_([&] {
        std::stable_sort(items.begin(), items.end(),
                         [](const Item& a, const Item& b) { return a.bytes > b.bytes; });
        return std::move(items);
      }()) {}

bool WeightsFill::Write(const Item& item, ReadBuffer* buffer) {
  uint8_t* dst = blob_ + item.offset;
  // Each item faults its own pages in, so the threads sharing the fill share that cost too.
  Prefault(dst, static_cast<size_t>(item.bytes));
  const HostTensor& t = *item.tensor;
  if (!item.write) return t.CopyTo(dst);  // A deferred tensor reads straight into the blob.
  if (!t.deferred()) {
    item.write(t.data(), dst);
    return !t.read_failed();
  }
  // Read into this thread's buffer, reused by its later items (the largest come first), so a
  // deferred tensor never takes fresh memory of its own.
  uint8_t* src = buffer->Get(t.byte_size());
  if (!t.CopyTo(src)) return false;
  item.write(src, dst);
  return true;
}

void WeightsFill::Prefault(uint8_t* dst, size_t bytes) {
  if (!huge_pages_.load(std::memory_order_relaxed)) {
    PrefaultForWrite(dst, bytes);
    return;
  }
  // Huge pages, 2 MiB at a time, each timed: the first slow one turns them off for the blob (a
  // fast 2 MiB fault takes ~0.1 ms, 512 small ones ~0.7 ms).
  for (size_t at = 0; at < bytes;) {
    const size_t n = std::min(bytes - at, kHugePage);
    const auto t0 = std::chrono::steady_clock::now();
    PrefaultForWrite(dst + at, n);
    at += n;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(1500)) {
#ifdef MADV_NOHUGEPAGE
      madvise(blob_, bytes_, MADV_NOHUGEPAGE);
#endif
      huge_pages_.store(false, std::memory_order_relaxed);
      PrefaultForWrite(dst + at, bytes - at);
      return;
    }
  }
}

void WeightsFill::Help() {
  if (items_.empty()) Seal();
  ReadBuffer buffer;
  for (size_t i = next_.fetch_add(1, std::memory_order_relaxed); i < items_.size();
       i = next_.fetch_add(1, std::memory_order_relaxed)) {
    const Item& item = items_[i];
    if (!Write(item, &buffer)) {
      absl::MutexLock lock(&mu_);
      if (unreadable_.empty()) unreadable_ = item.name;
    }
    // acq_rel: the sealing thread must see every other thread's writes before mprotect.
    if (written_.fetch_add(1, std::memory_order_acq_rel) + 1 == items_.size()) Seal();
  }
}

void WeightsFill::Seal() {
  absl::Status s = absl::OkStatus();
  if (mprotect(blob_, bytes_, PROT_READ) != 0) {
    s = absl::InternalError(
        absl::StrCat("cannot make the weights read-only: ", std::strerror(errno)));
  }
  absl::MutexLock lock(&mu_);
  if (s.ok() && !unreadable_.empty()) {
    s = absl::DataLossError(absl::StrCat("cannot read the weights of '", unreadable_,
                                         "' from the model file: it changed while the model "
                                         "was compiled"));
  }
  if (!sealed_.has_value()) sealed_ = std::move(s);
}

absl::Status WeightsFill::Run() {
  Help();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::optional<absl::Status>* sealed) { return sealed->has_value(); }, &sealed_));
  return *sealed_;
}

absl::StatusOr<MemoryPlan> PlanMemory(const ir::Graph& graph) {
  std::unique_ptr<WeightsFill> fill;
  auto plan = PlanMemoryDeferringWeights(graph, nullptr, &fill);
  if (!plan.ok()) return plan.status();
  if (auto s = fill->Run(); !s.ok()) return s;
  return plan;
}

absl::StatusOr<MemoryPlan> PlanMemoryDeferringWeights(const ir::Graph& graph,
                                                      const ConstantImages* images,
                                                      std::unique_ptr<WeightsFill>* fill) {
  MemoryPlan plan;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    plan.locations[graph.inputs[i]] = {BufferLocation::Kind::kInput, static_cast<int>(i), 0, 0};
  }
  // A node writes a graph output directly into the caller's buffer (first occurrence only).
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const ir::Value* v = graph.outputs[i];
    if (v->producer != nullptr && !plan.locations.count(v)) {
      plan.locations[v] = {BufferLocation::Kind::kOutput, static_cast<int>(i), 0, 0};
    }
  }

  // Weights: every constant read by a node or returned as an output.
  std::vector<const ir::Value*> constants;
  auto note_constant = [&](const ir::Value* v) {
    if (v != nullptr && v->is_constant() && !plan.locations.count(v)) {
      plan.locations[v] = {BufferLocation::Kind::kWeight, 0, 0, 0};
      constants.push_back(v);
    }
  };
  for (const auto& n : graph.nodes()) {
    for (const ir::Value* in : n->inputs) note_constant(in);
  }
  for (const ir::Value* out : graph.outputs) note_constant(out);
  auto image_of = [&](const ir::Value* c) -> const ConstantImage* {
    if (images == nullptr) return nullptr;
    auto it = images->find(c);
    return it == images->end() ? nullptr : &it->second;
  };
  int64_t weights_bytes = 0;
  for (const ir::Value* c : constants) {
    plan.locations[c].offset = weights_bytes;
    const ConstantImage* image = image_of(c);
    if (image != nullptr && (image->bytes < 0 || image->bytes > kMaxRegionBytes)) {
      return absl::InvalidArgumentError("the model's constants are too large");
    }
    int64_t size =
        AlignUp(image != nullptr ? image->bytes : static_cast<int64_t>(c->constant->byte_size()));
    if (__builtin_add_overflow(weights_bytes, size, &weights_bytes) ||
        weights_bytes > kMaxRegionBytes) {
      return absl::InvalidArgumentError("the model's constants are too large");
    }
  }
  const size_t blob_bytes = static_cast<size_t>(std::max<int64_t>(weights_bytes, kAlign));
  auto mapping = MapWeights(blob_bytes);
  if (!mapping.ok()) return mapping.status();
  std::vector<WeightsFill::Item> items;
  items.reserve(constants.size());
  for (const ir::Value* c : constants) {
    const ConstantImage* image = image_of(c);
    items.push_back(
        {&*c->constant, plan.locations[c].offset,
         image != nullptr ? image->bytes : static_cast<int64_t>(c->constant->byte_size()),
         image != nullptr ? image->write : std::function<void(const uint8_t*, uint8_t*)>(),
         c->name});
  }
  auto* blob = static_cast<uint8_t*>(const_cast<void*>(mapping->get()));
  *fill = std::make_unique<WeightsFill>(*mapping, blob, blob_bytes, std::move(items));
  plan.weights = WeightsBlob(*std::move(mapping), blob, blob_bytes, /*read_only=*/true);

  // Intermediates: lifetimes in node order.
  struct Intermediate {
    const ir::Value* value;
    SymDim bytes;
    int first, last;
  };
  std::vector<Intermediate> intermediates;
  std::unordered_map<const ir::Value*, int> last_use;
  const auto& nodes = graph.nodes();
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    for (const ir::Value* in : nodes[i]->inputs) {
      if (in != nullptr) last_use[in] = i;
    }
  }
  for (const ir::Value* out : graph.outputs) last_use[out] = static_cast<int>(nodes.size());
  bool linear = true;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    for (const ir::Value* out : nodes[i]->outputs) {
      if (out == nullptr || plan.locations.count(out)) continue;
      // A size the data decides (NonZero's count) is planned at its upper bound.
      std::optional<SymDim> bytes =
          SymMulChecked(SymNumElements(out->type.shape), SymDim::Const(DTypeSize(out->type.dtype)));
      if (bytes) bytes = graph.UpperBound(*bytes);
      if (!bytes) {
        return absl::InvalidArgumentError(absl::StrCat("value '", out->name, "' is too large"));
      }
      linear = linear && bytes->IsMonomial() && bytes->power() <= 1;
      intermediates.push_back({out, *bytes, i, last_use.count(out) ? last_use[out] : i});
    }
  }
  if (!linear) {
    // Sizes in several symbols (or not linear in the batch): offsets become expressions.
    std::vector<SymbolicBuffer> buffers;
    buffers.reserve(intermediates.size());
    for (const Intermediate& m : intermediates) {
      buffers.push_back({m.bytes.expr(), m.first, m.last});
    }
    auto arena = PlanSymbolicArena(buffers);
    if (!arena.ok()) return arena.status();
    for (size_t i = 0; i < intermediates.size(); ++i) {
      BufferLocation loc{BufferLocation::Kind::kArena, 0, 0, 0};
      loc.offset_expr = arena->OffsetExpr(i);
      plan.locations[intermediates[i].value] = std::move(loc);
    }
    plan.arena.bytes_program = EncodeDimExpr(arena->TotalBytesExpr());
    return plan;
  }
  std::vector<Interval> scaled, fixed;
  int64_t scaled_sum = 0, fixed_sum = 0;
  for (const Intermediate& m : intermediates) {
    const SymDim& bytes = m.bytes;
    if (bytes.coef() < 0 || bytes.coef() > ir::kMaxTensorBytes) {
      // Shape inference validates every value; this guards the sums below regardless.
      return absl::InvalidArgumentError(absl::StrCat("value '", m.value->name, "' is too large"));
    }
    Interval iv{m.value, {std::max<int64_t>(bytes.coef(), 1), m.first, m.last}};
    (bytes.IsStatic() ? fixed : scaled).push_back(iv);
    int64_t& sum = bytes.IsStatic() ? fixed_sum : scaled_sum;
    if (__builtin_add_overflow(sum, AlignUp(iv.life.size), &sum) || sum > kMaxRegionBytes) {
      return absl::InvalidArgumentError("the model's intermediate values are too large");
    }
    plan.arena.unplanned_bytes += AlignUp(bytes.coef());
  }
  const int steps = static_cast<int>(nodes.size()) + 1;  // Outputs live one step past the end.
  plan.arena.live_per_batch_bytes = LivePeak(scaled, steps);
  plan.arena.live_fixed_bytes = LivePeak(fixed, steps);
  plan.arena.per_batch_bytes = PlaceIntervals(scaled);
  plan.arena.fixed_bytes = PlaceIntervals(fixed);
  for (const Interval& iv : scaled) {
    plan.locations[iv.value] = {BufferLocation::Kind::kArena, 0, 0, iv.life.offset};
  }
  for (const Interval& iv : fixed) {
    // Static values sit after the batch-scaled region: offset = per_batch_bytes * batch + offset.
    plan.locations[iv.value] = {BufferLocation::Kind::kArena, 0, iv.life.offset,
                                plan.arena.per_batch_bytes};
  }
  // Batch-scaled values: offset = iv.offset * batch.
  return plan;
}

}  // namespace cuvil
