// Private: the data layout that cuvilc's generated glue (compiler/src/aot_writer.cc) emits for an
// ahead-of-time library and that cuvil_aot_run reads. The fields are declared once in
// cuvil/runtime/aot_layout.def: aot_run.cc checks these structs against it on every target and the
// writer builds its types from it. The generated NAME.h repeats the public part (cuvil_aot_dim,
// cuvil_aot_tensor, the error codes) in its text; the aot_* tests compile programs against it.
#ifndef CUVIL_RUNTIME_AOT_AOT_ABI_H_
#define CUVIL_RUNTIME_AOT_AOT_ABI_H_

#include <stddef.h>
#include <stdint.h>

extern "C" {

// One dimension: coef * batch^power (power 0: the constant coef). Plain data.
struct cuvil_aot_dim {
  int64_t coef;
  int32_t power;
};

// One input or output. Plain data, immutable in a library.
struct cuvil_aot_tensor {
  const char* name;
  int32_t dtype;      // ONNX TensorProto.DataType code (1 = float32, 7 = int64, ...)
  int32_t elem_size;  // bytes per element
  int32_t rank;
  const cuvil_aot_dim* dims;
};

// Scratch one kernel takes outside the memory plan: a cuvil_scratch_kind and its words as dims
// (cuvil/runtime/ukernel_scratch.h). Plain data, immutable in a library.
struct cuvil_aot_scratch_site {
  int32_t kind;
  int32_t kernel;  // the sites of one kernel are adjacent and live at once
  int32_t num_words;
  const cuvil_aot_dim* words;
};

// Everything cuvil_aot_run needs about one model. Immutable (a constant in the library).
struct cuvil_aot_model {
  int64_t arena_per_batch;  // the memory plan = arena_per_batch * batch + arena_fixed bytes,
  int64_t arena_fixed;      // then (64-byte aligned) the scratch region the sites need
  int32_t (*entry)(const void* const* inputs, void* const* outputs, int64_t batch, void* arena,
                   int64_t* syms);
  int32_t num_inputs;
  int32_t num_outputs;
  const cuvil_aot_tensor* inputs;
  const cuvil_aot_tensor* outputs;
  int32_t num_scratch_sites;
  const cuvil_aot_scratch_site* scratch_sites;
};

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
