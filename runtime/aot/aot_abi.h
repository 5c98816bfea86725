// Private: the data layout that cuvilc's generated glue (compiler/src/aot_glue.cc) emits for an
// ahead-of-time library and that cuvil_aot_run reads. The structs are declared once, in
// cuvil/runtime/aot_layout.def: this header expands it into C structs, aot_run.cc checks their
// layout on every target, the writer builds its LLVM types and the generated NAME.h's typedefs
// (cuvil_aot_dim, cuvil_aot_tensor) from it. NAME.h repeats the error codes in its text; the
// aot_* tests compile programs against it.
#ifndef CUVIL_RUNTIME_AOT_AOT_ABI_H_
#define CUVIL_RUNTIME_AOT_AOT_ABI_H_

#include <stddef.h>
#include <stdint.h>

extern "C" {

// The generated code's entry point (cuvil_aot_model::entry).
typedef int32_t (*cuvil_aot_entry_fn)(const void* const* inputs, void* const* outputs,
                                      int64_t batch, void* arena, int64_t* syms);

// cuvil_aot_dim, cuvil_aot_tensor, cuvil_aot_scratch_site and cuvil_aot_model: each field as
// `ctype name;`, in the order aot_layout.def lists them (their docs are there).
#define CUVIL_AOT_FIELD(f, kind, ctype, doc) ctype f;
#define CUVIL_AOT_STRUCT(s, visibility, doc, fields) \
  struct s {                                         \
    fields                                           \
  };
#include "cuvil/runtime/aot_layout.def"
#undef CUVIL_AOT_STRUCT
#undef CUVIL_AOT_FIELD

enum : int32_t {
  CUVIL_AOT_OK = 0,
  // 1..3: the generated code's EntryError (index out of bounds, slice out of bounds, TopK's K).
  CUVIL_AOT_BAD_BATCH = -1,        // batch < 1, or a size at this batch overflows
  CUVIL_AOT_NULL_ARGUMENT = -2,    // inputs, outputs, one of their pointers, or a needed arena
  CUVIL_AOT_MISALIGNED_ARENA = -3  // arena not aligned to CUVIL_AOT_ARENA_ALIGN
};

inline constexpr size_t CUVIL_AOT_ARENA_ALIGN = 64;

// Arena bytes for `batch`: the memory plan and the scratch region (the kernel whose sites need the
// most); never decreases as the batch grows. SIZE_MAX when batch < 1 or the size overflows.
// Reentrant.
size_t cuvil_aot_arena_bytes(const cuvil_aot_model* m, int64_t batch);

// The x86-64 micro-architecture level this CPU reaches (4: x86-64-v4, AVX-512; 3: x86-64-v3,
// AVX2 + FMA; 1: baseline x86-64), lowered by CUVIL_UK_TIER=avx2 (to 3) or generic (to 1) as the
// microkernels' tier is; 0 on other architectures. A library with several x86-64 bodies runs the
// first whose level this reaches. Computed once. Thread-safe.
int32_t cuvil_aot_cpu_level(void);

// Validates the arguments, then runs the model once (single-threaded, on the calling thread),
// lending the arena's scratch region to the microkernels and heap blocks for the call. Returns
// CUVIL_AOT_OK, a negative CUVIL_AOT_* code (nothing ran) or the generated code's EntryError
// (outputs unspecified). Reentrant: concurrent calls need distinct arenas.
int32_t cuvil_aot_run(const cuvil_aot_model* m, const void* const* inputs, void* const* outputs,
                      int64_t batch, void* arena);
}

#endif  // CUVIL_RUNTIME_AOT_AOT_ABI_H_
