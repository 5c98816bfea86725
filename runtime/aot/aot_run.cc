// cuvil_aot_run: argument checks around a model's generated entry point.
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "aot_abi.h"
#include "call_scratch.h"
#include "cuvil/runtime/ukernel_scratch.h"

namespace {

// aot_layout.def against aot_abi.h on the target this file is compiled for: each struct has the
// listed fields, their C types of the listed kinds, at the offsets natural C layout gives them,
// and nothing else (its size). aot_glue.cc emits its LLVM types from the same list.
namespace layout {

using I32 = int32_t;
using I64 = int64_t;
struct P {};  // any pointer

constexpr size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
template <typename T>
constexpr size_t SizeOf() {
  if constexpr (std::is_same_v<T, P>) {
    return sizeof(void*);
  } else {
    return sizeof(T);
  }
}
template <typename T>
constexpr size_t AlignOf() {
  if constexpr (std::is_same_v<T, P>) {
    return alignof(void*);
  } else {
    return alignof(T);
  }
}
template <typename T, typename Field>
constexpr bool FieldIs() {
  if constexpr (std::is_same_v<T, P>) {
    return std::is_pointer_v<Field>;
  } else {
    return std::is_same_v<T, Field>;
  }
}

#define CUVIL_AOT_FIELD(f, t, ctype, doc)                                                          \
  static_assert(FieldIs<t, decltype(S::f)>(), "aot_layout.def's " #f ": " #ctype " is not a " #t); \
  at = RoundUp(at, AlignOf<t>());                                                                  \
  if (offsetof(S, f) != at) return false;                                                          \
  at += SizeOf<t>();                                                                               \
  if (AlignOf<t>() > align) align = AlignOf<t>();
#define CUVIL_AOT_STRUCT(s, visibility, doc, fields) \
  constexpr bool Matches_##s() {                     \
    using S = ::s;                                   \
    size_t at = 0, align = 1;                        \
    fields return sizeof(S) == RoundUp(at, align);   \
  }                                                  \
  static_assert(Matches_##s(), #s " in aot_abi.h differs from cuvil/runtime/aot_layout.def");
#include "cuvil/runtime/aot_layout.def"
#undef CUVIL_AOT_STRUCT
#undef CUVIL_AOT_FIELD

}  // namespace layout

// coef * batch^power, or false on overflow.
bool DimValue(const cuvil_aot_dim& d, int64_t batch, int64_t* out) {
  int64_t v = d.coef;
  for (int32_t p = 0; p < d.power; ++p) {
    if (__builtin_mul_overflow(v, batch, &v)) return false;
  }
  *out = v;
  return true;
}

// Bytes of the memory plan at `batch`, rounded up to the arena alignment; -1 on overflow.
int64_t PlanBytes(const cuvil_aot_model* m, int64_t batch) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(m->arena_per_batch, batch, &bytes) ||
      __builtin_add_overflow(bytes, m->arena_fixed, &bytes) || bytes < 0 ||
      __builtin_add_overflow(bytes, int64_t{CUVIL_AOT_ARENA_ALIGN - 1}, &bytes)) {
    return -1;
  }
  return bytes / int64_t{CUVIL_AOT_ARENA_ALIGN} * int64_t{CUVIL_AOT_ARENA_ALIGN};
}

// The scratch region at `batch`: the most any one kernel's sites take together; -1 on overflow.
int64_t ScratchBytes(const cuvil_aot_model* m, int64_t batch) {
  constexpr int32_t kMaxWords = 32;
  // A sizing word past this (a dim of 2^40) would stand for tensors no arena holds; refusing it
  // keeps the sizing arithmetic far from int64 overflow.
  constexpr int64_t kMaxWord = int64_t{1} << 40;
  int64_t most = 0, kernel_total = 0;
  for (int32_t i = 0; i < m->num_scratch_sites; ++i) {
    const cuvil_aot_scratch_site& s = m->scratch_sites[i];
    if (i > 0 && s.kernel != m->scratch_sites[i - 1].kernel) kernel_total = 0;
    int64_t words[kMaxWords];
    if (s.num_words > kMaxWords) return -1;
    for (int32_t w = 0; w < s.num_words; ++w) {
      if (!DimValue(s.words[w], batch, &words[w]) || words[w] > kMaxWord) return -1;
    }
    const int64_t bytes = cuvil_uk_scratch_bytes(s.kind, words, s.num_words);
    if (bytes < 0 || __builtin_add_overflow(kernel_total, bytes, &kernel_total)) return -1;
    if (kernel_total > most) most = kernel_total;
  }
  return most;
}

// The arena at `batch`: the plan's bytes (aligned) and the total with the scratch region after
// it; false when batch < 1 or a size overflows.
bool ArenaLayout(const cuvil_aot_model* m, int64_t batch, int64_t* plan, size_t* total) {
  if (batch < 1) return false;
  *plan = PlanBytes(m, batch);
  if (*plan < 0) return false;
  const int64_t scratch = ScratchBytes(m, batch);
  int64_t bytes = 0;
  if (scratch < 0 || __builtin_add_overflow(*plan, scratch, &bytes) ||
      static_cast<uint64_t>(bytes) >= SIZE_MAX) {
    return false;
  }
  *total = static_cast<size_t>(bytes);
  return true;
}

// Elements of `t` at `batch` times its element size, or false on overflow.
bool TensorBytes(const cuvil_aot_tensor& t, int64_t batch, int64_t* bytes) {
  int64_t n = t.elem_size;
  for (int32_t i = 0; i < t.rank; ++i) {
    int64_t d = 0;
    if (!DimValue(t.dims[i], batch, &d) || d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  *bytes = n;
  return true;
}

}  // namespace

extern "C" {

int32_t cuvil_aot_cpu_level(void) {
#if defined(__x86_64__)
  // Relaxed: every thread computes the same value, so a race only repeats the work.
  static int32_t cached = -1;
  int32_t level = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (level >= 0) return level;
  __builtin_cpu_init();
  level = __builtin_cpu_supports("x86-64-v4") ? 4 : __builtin_cpu_supports("x86-64-v3") ? 3 : 1;
  if (const char* tier = getenv("CUVIL_UK_TIER"); tier != nullptr) {
    if (strcmp(tier, "avx2") == 0 && level > 3) level = 3;
    if (strcmp(tier, "generic") == 0) level = 1;
  }
  __atomic_store_n(&cached, level, __ATOMIC_RELAXED);
  return level;
#else
  return 0;
#endif
}

size_t cuvil_aot_arena_bytes(const cuvil_aot_model* m, int64_t batch) {
  int64_t plan = 0;
  size_t total = 0;
  return ArenaLayout(m, batch, &plan, &total) ? total : SIZE_MAX;
}

int32_t cuvil_aot_run(const cuvil_aot_model* m, const void* const* inputs, void* const* outputs,
                      int64_t batch, void* arena) {
  int64_t plan_bytes = 0;
  size_t arena_bytes = 0;
  if (!ArenaLayout(m, batch, &plan_bytes, &arena_bytes)) return CUVIL_AOT_BAD_BATCH;
  int64_t bytes = 0;
  for (int32_t i = 0; i < m->num_inputs; ++i) {
    if (!TensorBytes(m->inputs[i], batch, &bytes)) return CUVIL_AOT_BAD_BATCH;
  }
  for (int32_t i = 0; i < m->num_outputs; ++i) {
    if (!TensorBytes(m->outputs[i], batch, &bytes)) return CUVIL_AOT_BAD_BATCH;
  }
  if ((m->num_inputs > 0 && inputs == nullptr) || (m->num_outputs > 0 && outputs == nullptr)) {
    return CUVIL_AOT_NULL_ARGUMENT;
  }
  for (int32_t i = 0; i < m->num_inputs; ++i) {
    if (inputs[i] == nullptr) return CUVIL_AOT_NULL_ARGUMENT;
  }
  for (int32_t i = 0; i < m->num_outputs; ++i) {
    if (outputs[i] == nullptr) return CUVIL_AOT_NULL_ARGUMENT;
  }
  if (arena_bytes > 0 && arena == nullptr) return CUVIL_AOT_NULL_ARGUMENT;
  if (reinterpret_cast<uintptr_t>(arena) % CUVIL_AOT_ARENA_ALIGN != 0) {
    return CUVIL_AOT_MISALIGNED_ARENA;
  }
  // The scratch region is the arena after the plan.
  const size_t plan = static_cast<size_t>(plan_bytes);
  cuvil::uk::CallScratch region(arena_bytes > plan ? static_cast<char*>(arena) + plan : nullptr,
                                arena_bytes - plan);
  cuvil::uk::CallScratchScope scope(&region);
  return m->entry(inputs, outputs, batch, arena, nullptr);
}

}  // extern "C"
