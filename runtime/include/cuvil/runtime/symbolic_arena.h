// An arena layout whose sizes and offsets are functions of a model's free dimensions.
//
// At compile time PlanSymbolicArena places buffers whose byte sizes are DimExprs and whose
// lifetimes are node ranges. Buffers are grouped by the primitive part of their size (the size
// divided by the gcd of its coefficients): a group with base B is a region whose offsets are
// multiples of B, packed in "units" (bytes per B) exactly as static buffers are packed in bytes,
// so buffers of one group reuse each other's memory for every binding of the symbols. Static
// buffers form region 0 (base 1), placed first, so their offsets stay compile-time constants.
// At run time Bind evaluates each region's base once (a few short programs per execution) and
// yields every buffer's byte offset.
#ifndef CUVIL_RUNTIME_SYMBOLIC_ARENA_H_
#define CUVIL_RUNTIME_SYMBOLIC_ARENA_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuvil/runtime/dim_expr.h"

namespace cuvil {

// Alignment of every buffer in the arena, in bytes.
inline constexpr int64_t kSymbolicArenaAlign = 64;

// One buffer to place: its size in bytes and the inclusive range of steps it is live in.
struct SymbolicBuffer {
  DimExpr bytes;
  int first = 0;
  int last = 0;
};

// A binding of the layout to concrete symbol values.
struct BoundArena {
  std::vector<int64_t> offsets;  // Byte offset of each buffer, in PlanSymbolicArena's order.
  int64_t total_bytes = 0;       // Arena size; every buffer ends at or before it.
};

// The layout. Thread-compatible value type (Bind is const and may run concurrently).
struct SymbolicArena {
  struct Region {
    DimExpr base;       // Bytes per unit; the constant 1 for the static region.
    int64_t units = 0;  // Region size in units (a multiple of kSymbolicArenaAlign).
  };
  struct Slot {
    int region = 0;
    int64_t offset_units = 0;  // Offset within the region, in units of its base.
  };
  std::vector<Region> regions;  // regions[0] is the static one (base 1).
  std::vector<Slot> slots;      // One per buffer.

  // The byte offset of buffer i as an expression (a constant for region 0).
  DimExpr OffsetExpr(size_t i) const;
  // The arena size as an expression.
  DimExpr TotalBytesExpr() const;
  // Evaluates every offset and the total for the given symbol values (values[id] for symbol id).
  // InvalidArgument when a region base is negative, cannot be evaluated (missing symbol,
  // division by zero, overflow) or the arena would exceed max_bytes.
  absl::StatusOr<BoundArena> Bind(absl::Span<const int64_t> values, int64_t max_bytes) const;
};

// Places the buffers (see the file comment). InvalidArgument when a size is provably negative,
// its arithmetic overflows, or a static region exceeds 2^61 bytes.
absl::StatusOr<SymbolicArena> PlanSymbolicArena(absl::Span<const SymbolicBuffer> buffers);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_SYMBOLIC_ARENA_H_
