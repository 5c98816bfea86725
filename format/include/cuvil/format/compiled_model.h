// The compiler's product: native object code plus everything needed to run it.
//
// A CompiledModel is a plain value: it holds no LLVM state, can be cached on disk and loaded into
// any JIT namespace. Generated code exports:
//   int32_t cuvil_entry(const void* const* inputs, void* const* outputs, int64_t batch, void*
//   arena, int64_t* syms)
//                              0 on success, else an EntryError (the outputs are then unspecified);
//                              syms[id] is the value of symbol id (syms[0] == batch), read only
//                              by models with symbols beyond the batch (may be null otherwise);
//                              the run writes data-dependent symbols (DataDependentDim) into it
//   int32_t cuvil_entry_table(inputs, outputs, batch, arena, void* const* table, syms)
//                              the same, calling kernel i through table[i]
//   void*   cuvil_fn_table[]   one pointer per kernel (the compiled kernels)
//   void**  cuvil_fn_table_ptr the table cuvil_entry uses, read once per execution (acquire), so a
//                              hot patch publishes a whole new table with one release store and
//                              every execution runs entirely on the old or the new kernels; it
//                              starts as cuvil_fn_table, whose slots may also be redirected in
//                              place
// and imports `cuvil_weights` (the weights blob) and the runtime library's cuvil_rt_* symbols.
#ifndef CUVIL_FORMAT_COMPILED_MODEL_H_
#define CUVIL_FORMAT_COMPILED_MODEL_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cuvil/runtime/dim_expr_codec.h"
#include "cuvil/runtime/dtype.h"
#include "cuvil/runtime/host_tensor.h"
#include "cuvil/runtime/symbolic_dim.h"

namespace cuvil {

inline constexpr char kEntrySymbol[] = "cuvil_entry";
inline constexpr char kEntryWithTableSymbol[] = "cuvil_entry_table";
inline constexpr char kFunctionTableSymbol[] = "cuvil_fn_table";
inline constexpr char kFunctionTablePtrSymbol[] = "cuvil_fn_table_ptr";
inline constexpr char kWeightsSymbol[] = "cuvil_weights";

// Nonzero results of cuvil_entry: data-dependent failures the generated code detects instead of
// reading or writing outside a buffer.
enum EntryError : int32_t {
  kEntryOk = 0,
  // A Gather / ScatterND index lies outside [-len, len) of its axis.
  kEntryIndexOutOfBounds = 1,
  // A Slice whose bounds depend on the input shapes reaches past its input for these shapes.
  kEntrySliceOutOfBounds = 2,
  // TopK's K exceeds its (batch-dependent) axis at this batch size.
  kEntryTopKTooLarge = 3,
  // Cast from STRING met a string that is not a number of the target type.
  kEntryStringNotANumber = 4,
  // The model makes strings but the caller gave no StringHeap (see CompiledModel::makes_strings).
  kEntryNoStringHeap = 5,
  // A Resize whose sizes depend on the input shapes would fill a non-empty axis from an empty one.
  kEntryResizeEmptyAxis = 6,
};

// Maps a cuvil_entry result to a status: OK for 0, InvalidArgument describing the failure
// otherwise (the request's data, not the server, is at fault). Thread-safe.
absl::Status EntryStatus(int32_t rc);

struct TensorSignature {
  std::string name;
  DType dtype = DType::kUndefined;
  SymShape shape;
};

// One compiled kernel, reachable through cuvil_fn_table[index].
struct KernelFunction {
  int index = 0;
  std::string symbol;  // Name of the kernel's LLVM function.
  std::string op_type;
  std::string node_name;
  std::string signature;  // "(float32[batch,784], float32[512,784]) -> float32[batch,512]"
  // The index of the control-flow kernel (If, Loop, Scan) whose subgraph runs this kernel, or -1
  // for a kernel of the graph itself (cuvil_entry calls those; their times add up to an
  // execution's, a nested kernel's time is inside its parent's).
  int parent = -1;
};

// Scratch one kernel takes outside the arena plan while it runs: a microkernel call's per-call
// buffers or a heap block of generated code (cuvil/runtime/ukernel_scratch.h says what the words
// of each kind are). An ahead-of-time library sizes its scratch region from these; the JIT engine
// does not read them, and its cache entries and snapshots do not keep them. Plain data.
struct ScratchSite {
  int kernel = 0;    // KernelFunction::index of the kernel that takes it
  int32_t kind = 0;  // cuvil_scratch_kind
  std::vector<SymDim> words;
};

// Most parts an execution may split a batch-separable model's batch into (see ArenaPlan).
inline constexpr int32_t kMaxBatchShards = 16;
// Alignment of each batch part's region of the arena.
inline constexpr int64_t kArenaAlign = 64;

// Per-execution scratch: one entry-point call needs per_batch_bytes * batch + fixed_bytes, or, for
// a symbolic plan, the value of bytes_program for the execution's symbol values.
struct ArenaPlan {
  // When not empty: the arena size as an encoded DimExpr (dim_expr_codec.h) in the model's
  // symbols, and the plan is symbolic (offsets are expressions, the other sizes are 0, the batch
  // is never split).
  std::vector<int64_t> bytes_program;
  int64_t per_batch_bytes = 0;
  int64_t fixed_bytes = 0;
  int64_t unplanned_bytes = 0;  // Sum of all intermediate sizes without reuse (batch 1).
  // Liveness lower bounds of the two regions: the most bytes (64-byte aligned) of batch-scaled
  // (per batch item) and of static intermediates live across one node; no placement of these
  // lifetimes needs less. 0 in cache entries and snapshots written before they were recorded.
  int64_t live_per_batch_bytes = 0;
  int64_t live_fixed_bytes = 0;
  // Parts the batch may be split into by an execution (LoadedModel::Execute): greater than 1
  // only for models that keep batch items apart; each concurrently running part needs its own
  // fixed region, so BytesFor reserves min(batch, max_shards) of them.
  int32_t max_shards = 1;
  // Arena bytes an execution of `batch` (>= 0) items needs, whatever split it chooses; nullopt
  // when the size does not fit in int64 (a caller then refuses the batch).
  std::optional<int64_t> CheckedBytesFor(int64_t batch) const {
    if (!bytes_program.empty()) return CheckedBytesForSymbols({&batch, 1});
    const int64_t parts =
        max_shards <= 1 ? 1 : std::max<int64_t>(1, std::min<int64_t>(batch, max_shards));
    const int64_t fixed_part = max_shards <= 1 ? fixed_bytes : fixed_bytes + kArenaAlign;
    int64_t scaled = 0, fixed = 0, total = 0;
    if (__builtin_mul_overflow(per_batch_bytes, batch, &scaled) ||
        __builtin_mul_overflow(parts, fixed_part, &fixed) ||
        __builtin_add_overflow(scaled, fixed, &total)) {
      return std::nullopt;
    }
    return total;
  }
  // Arena bytes an execution with symbol values syms[id] (syms[0] the batch) needs; nullopt when
  // it cannot be evaluated (a missing symbol, overflow) or is negative.
  std::optional<int64_t> CheckedBytesForSymbols(absl::Span<const int64_t> syms) const {
    if (bytes_program.empty()) return CheckedBytesFor(syms.empty() ? 1 : syms[0]);
    auto bytes = EvalDimProgram(bytes_program, syms);
    if (!bytes || *bytes < 0) return std::nullopt;
    return bytes;
  }
  // True when the plan's size depends on symbols other than the batch or is not linear in it.
  bool symbolic() const { return !bytes_program.empty(); }
  // CheckedBytesFor for a batch the caller knows fits (a configured maximum it checked).
  int64_t BytesFor(int64_t batch) const { return CheckedBytesFor(batch).value_or(INT64_MAX); }
};

struct PhaseTiming {
  std::string phase;
  double ms = 0;
};

// The weights blob: immutable bytes that every copy of a CompiledModel (and every version loaded
// from it) shares instead of copying, held either in the compiler's buffer or in a read-only
// mapping of a JIT cache entry (then the weights live in the page cache, shared by processes).
// Thread-safe: immutable; copies share the bytes.
class WeightsBlob {
 public:
  WeightsBlob() = default;
  // Takes the compiler's buffer (the memory plan's uint8 tensor). Implicit: the compiler
  // assigns its tensor directly.
  WeightsBlob(HostTensor&& tensor) {  // NOLINT(google-explicit-constructor)
    auto held = std::make_shared<HostTensor>(std::move(tensor));
    data_ = held->data();
    size_ = held->byte_size();
    owner_ = std::move(held);
  }
  // The `size` bytes at `data`, kept alive (and unchanged) by `owner`. `read_only`: the memory
  // is mapped without write permission, so the JIT engine may use it in place.
  WeightsBlob(std::shared_ptr<const void> owner, const uint8_t* data, size_t size, bool read_only)
      : owner_(std::move(owner)), data_(data), size_(size), read_only_(read_only) {}

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // True when the bytes are mapped read-only (see the constructor).
  bool read_only() const { return read_only_; }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool read_only_ = false;
};

// A condition on the symbols checked before the entry runs: a dim of the graph that depends on
// symbols beyond the batch must not be negative (it sizes a loop or a buffer), and two extents the
// graph needs equal (an assumption of shape inference, ir::Graph::assumptions) must be.
struct DimConstraint {
  std::string value;  // The IR value (tensor) whose dim it is.
  int32_t dim = 0;
  std::vector<int64_t> program;  // The dim (or lhs - rhs when `equal`), encoded (dim_expr_codec.h).
  bool equal = false;            // The program must be 0 (else: must be >= 0).
  std::string description;       // For `equal`: "H == 2*floor(H / 2)".
};

// A free dimension the model computes from the data (NonZero's count of non-zeros, Unique's
// count of distinct values): not bound from the inputs. Before a run syms[symbol] holds its upper
// bound, for which every buffer is sized (so outputs are allocated at it); the run writes the
// actual value there, and outputs are then that long (their leading elements, row-major).
struct DataDependentDim {
  int32_t symbol = 0;
  std::vector<int64_t> upper_bound;  // Encoded DimExpr (dim_expr_codec.h) in the input symbols.
  std::string producer;              // The node that computes it, for messages.
};

// Thread-compatible value type.
struct CompiledModel {
  std::string name;
  std::string symbol;  // Name of the batch dimension (symbol 0), empty for static models.
  // Every free dimension's name by symbol id (symbols[0] == symbol); empty for static models.
  // cuvil_entry's syms argument holds one value per name.
  std::vector<std::string> symbols;
  // The last symbols, computed by the run (see DataDependentDim); symbol order.
  std::vector<DataDependentDim> data_dependent_dims;
  // One per distinct symbolic dim of the graph's values that is not provably non-negative, and
  // one per equality shape inference assumed.
  std::vector<DimConstraint> dim_constraints;
  std::vector<TensorSignature> inputs;
  std::vector<TensorSignature> outputs;
  std::string object_code;  // ELF relocatable object for the host CPU.
  WeightsBlob weights;      // Addressed by cuvil_weights; shared, never copied.
  ArenaPlan arena;
  std::vector<KernelFunction> kernels;
  std::vector<ScratchSite> scratch_sites;
  // Some kernel takes scratch that no shape bounds (a control-flow op's buffers): an
  // ahead-of-time run of this model may allocate.
  bool unbounded_scratch = false;
  std::vector<PhaseTiming> timings;
  std::string cpu;  // Host CPU name the code was generated for.
  // "separable" when executions may split the batch (arena.max_shards > 1), else why not.
  std::string batch_split_note;
  // Kernels make string tensors: each execution needs a StringHeap (string_ops.h) whose address
  // the caller stores in syms[StringHeapSlot()], and which outlives its reading of the outputs.
  bool makes_strings = false;

  // Symbols bound from the input shapes: every symbol but the data-dependent ones (at least 1:
  // symbol 0, the batch, is 1 for a model without one).
  size_t InputSymbolCount() const {
    return std::max<size_t>(symbols.size() - data_dependent_dims.size(), 1);
  }
  // The syms entry after every symbol, where a model that makes strings finds its heap.
  size_t StringHeapSlot() const { return std::max<size_t>(symbols.size(), 1); }
  // True when the model makes strings or takes or returns a string tensor.
  bool HasStringTensors() const {
    auto strings = [](const std::vector<TensorSignature>& sigs) {
      return std::any_of(sigs.begin(), sigs.end(),
                         [](const TensorSignature& s) { return s.dtype == DType::kString; });
    };
    return makes_strings || strings(inputs) || strings(outputs);
  }
};

}  // namespace cuvil

#endif  // CUVIL_FORMAT_COMPILED_MODEL_H_
