#include "cuvil/runtime/symbolic_arena.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cuvil/runtime/lifetime_placement.h"

namespace cuvil {
namespace {

// Bound on one region's size in units: below it no offset, end or alignment can overflow.
constexpr int64_t kMaxRegionUnits = int64_t{1} << 61;
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

int64_t AlignUp(int64_t v) {
  return (v + kSymbolicArenaAlign - 1) / kSymbolicArenaAlign * kSymbolicArenaAlign;
}

// One buffer of a region, in units of the region's base.
struct Item {
  size_t buffer;
  LifetimeInterval life;
};

struct ExprHash {
  size_t operator()(const DimExpr& e) const { return e.Hash(); }
};

// The gcd of the absolute values of e's coefficients and constant (> 0 for a non-static e);
// 0 when a coefficient is INT64_MIN (its magnitude has no int64).
int64_t Content(const DimExpr& e) {
  int64_t g = 0;
  auto add = [&](int64_t c) {
    if (c == kInt64Min) return false;
    g = std::gcd(g, std::abs(c));
    return true;
  };
  if (!add(e.constant_term())) return 0;
  for (const DimExpr::Term& t : e.terms()) {
    if (!add(t.coef)) return 0;
  }
  return g;
}

}  // namespace

DimExpr SymbolicArena::OffsetExpr(size_t i) const {
  const Slot& s = slots[i];
  DimExpr start(0);
  for (int r = 0; r < s.region; ++r) {
    // Plans bound every region below 2^61 units, and Bind checks the evaluated sums; the
    // expressions themselves cannot overflow their coefficients here.
    start = *DimAdd(start, *DimMul(regions[r].base, regions[r].units));
  }
  return *DimAdd(start, *DimMul(regions[s.region].base, s.offset_units));
}

DimExpr SymbolicArena::TotalBytesExpr() const {
  DimExpr total(0);
  for (const Region& r : regions) total = *DimAdd(total, *DimMul(r.base, r.units));
  return total;
}

absl::StatusOr<BoundArena> SymbolicArena::Bind(absl::Span<const int64_t> values,
                                               int64_t max_bytes) const {
  std::vector<int64_t> start(regions.size()), base(regions.size());
  int64_t total = 0;
  for (size_t r = 0; r < regions.size(); ++r) {
    auto b = regions[r].base.Eval(values);
    if (!b) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot evaluate buffer size ", regions[r].base.ToString(), " for these dimensions"));
    }
    if (*b < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer size ", regions[r].base.ToString(), " is negative (", *b, ")"));
    }
    int64_t bytes = 0;
    start[r] = total;
    base[r] = *b;
    if (__builtin_mul_overflow(regions[r].units, *b, &bytes) ||
        __builtin_add_overflow(total, bytes, &total) || total > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the intermediate values need more than ", max_bytes, " bytes"));
    }
  }
  BoundArena out;
  out.total_bytes = total;
  out.offsets.reserve(slots.size());
  // offset_units < units for every slot, so these products are below the checked region sizes.
  for (const Slot& s : slots)
    out.offsets.push_back(start[s.region] + s.offset_units * base[s.region]);
  return out;
}

absl::StatusOr<SymbolicArena> PlanSymbolicArena(absl::Span<const SymbolicBuffer> buffers) {
  SymbolicArena plan;
  plan.regions.push_back({DimExpr(1), 0});
  plan.slots.resize(buffers.size());
  std::unordered_map<DimExpr, int, ExprHash> region_of;
  std::vector<std::vector<Item>> items(1);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const DimExpr& bytes = buffers[i].bytes;
    int region = 0;
    int64_t units = 0;
    if (bytes.IsStatic()) {
      units = std::max<int64_t>(bytes.constant_term(), 1);
      if (bytes.constant_term() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("buffer ", i, " has a negative size ", bytes.constant_term()));
      }
    } else {
      auto neg = DimNeg(bytes);
      if (neg && neg->IsProvablyNonNegative()) {
        return absl::InvalidArgumentError(
            absl::StrCat("buffer ", i, " has a size that is never positive: ", bytes.ToString()));
      }
      units = Content(bytes);
      auto base = units > 0 ? DimFloorDiv(bytes, units) : std::nullopt;  // Exact.
      if (!base) {
        return absl::InvalidArgumentError(
            absl::StrCat("buffer ", i, " has an unsupported size ", bytes.ToString()));
      }
      auto [it, inserted] = region_of.try_emplace(*base, static_cast<int>(plan.regions.size()));
      if (inserted) {
        plan.regions.push_back({*base, 0});
        items.emplace_back();
      }
      region = it->second;
    }
    if (units > kMaxRegionUnits) {
      return absl::InvalidArgumentError(absl::StrCat("buffer ", i, " is too large"));
    }
    items[region].push_back(Item{i, {units, buffers[i].first, buffers[i].last}});
  }
  for (size_t r = 0; r < plan.regions.size(); ++r) {
    int64_t sum = 0;
    std::vector<LifetimeInterval> lives;
    lives.reserve(items[r].size());
    for (const Item& it : items[r]) {
      lives.push_back(it.life);
      if (__builtin_add_overflow(sum, AlignUp(it.life.size), &sum) || sum > kMaxRegionUnits) {
        return absl::InvalidArgumentError("the arena's buffers are too large");
      }
    }
    plan.regions[r].units = PlaceByLifetime(absl::MakeSpan(lives), kSymbolicArenaAlign);
    for (size_t j = 0; j < items[r].size(); ++j) {
      plan.slots[items[r][j].buffer] = {static_cast<int>(r), lives[j].offset};
    }
  }
  return plan;
}

}  // namespace cuvil
