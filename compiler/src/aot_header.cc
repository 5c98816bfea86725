#include "aot_header.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "aot_glue.h"
#include "llvm/TargetParser/Triple.h"

namespace cuvil::aot_internal {
namespace {

std::string DimString(const SymDim& d) {
  if (d.IsStatic()) return absl::StrCat(d.coef());
  std::string b = d.power() == 1 ? "batch" : absl::StrCat("batch^", d.power());
  return d.coef() == 1 ? b : absl::StrCat(d.coef(), "*", b);
}

// `text` made safe inside a C block comment: a "*/" (from a tensor name or a path) would end it.
std::string CommentSafe(const std::string& text) {
  return absl::StrReplaceAll(text, {{"*/", "* /"}});
}

// `text` as a C block comment whose "/*" is at column `column`, in lines of at most
// kCommentWidth columns where the words allow; a continuation line starts with `indent` and a
// space.
constexpr size_t kCommentWidth = 88;
std::string BlockComment(const std::string& text, size_t column, const std::string& indent) {
  std::string out = "/*";
  size_t col = column + 2;
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && col + 1 + word.size() > kCommentWidth) {
      absl::StrAppend(&out, "\n", indent);
      col = indent.size();
    }
    absl::StrAppend(&out, " ", word);
    col += 1 + word.size();
    line_empty = false;
  }
  return out + " */";
}

// aot_layout.def's PUBLIC structs (what programs read: cuvil_aot_dim, cuvil_aot_tensor) as C
// typedefs, each under its doc, with its fields' docs as comments aligned after them.
std::string PublicStructsText() {
  struct Field {
    std::string name, ctype, doc;
  };
  struct Struct {
    std::string name, visibility, doc;
    std::vector<Field> fields;
  };
  const Struct structs[] = {
#define CUVIL_AOT_FIELD(f, kind, ctype, doc) Field{#f, #ctype, doc},
#define CUVIL_AOT_STRUCT(s, visibility, doc, fields) Struct{#s, #visibility, doc, {fields}},
#include "cuvil/runtime/aot_layout.def"
#undef CUVIL_AOT_STRUCT
#undef CUVIL_AOT_FIELD
  };
  std::string out;
  for (const Struct& s : structs) {
    if (s.visibility != "PUBLIC") continue;
    std::vector<std::string> decls;
    size_t width = 0;  // the widest declaration with a comment after it
    for (const Field& f : s.fields) {
      decls.push_back(absl::StrCat("  ", f.ctype, " ", f.name, ";"));
      if (!f.doc.empty()) width = std::max(width, decls.back().size());
    }
    absl::StrAppend(&out, BlockComment(s.doc, 0, " *"), "\ntypedef struct ", s.name, " {\n");
    for (size_t i = 0; i < s.fields.size(); ++i) {
      out += decls[i];
      if (!s.fields[i].doc.empty()) {
        out.append(width + 1 - decls[i].size(), ' ');
        out += BlockComment(s.fields[i].doc, width + 1, std::string(width + 3, ' '));
      }
      out += '\n';
    }
    absl::StrAppend(&out, "} ", s.name, ";\n\n");
  }
  return out;
}

}  // namespace

std::string HeaderText(const std::vector<AotTier>& tiers, const std::string& name,
                       const std::string& source, const std::string& target_triple) {
  const CompiledModel& model = *tiers[0].model;
  int64_t per_batch = 0, fixed = 0;  // The largest body's arena, so one size fits every CPU.
  std::vector<std::string> cpus;
  bool bounded = true;
  for (const AotTier& t : tiers) {
    bounded = bounded && ScratchIsBounded(*t.model);
    per_batch = std::max(per_batch, t.model->arena.per_batch_bytes);
    fixed = std::max(fixed, t.model->arena.fixed_bytes);
    cpus.push_back(absl::StrCat(CommentSafe(t.cpu), t.min_level > 1 ? " (x86-64 level " : "",
                                t.min_level > 1 ? absl::StrCat(t.min_level, ")") : ""));
  }
  const llvm::Triple triple(target_triple);
  const std::string link = absl::StrReplaceAll(
      triple.isWasm()
          ? "clang --target=wasm32-wasi app.c libLIB.a -lm  (wasi-libc; run under a WASI runtime)"
      : triple.isThumb() && triple.getOS() == llvm::Triple::UnknownOS
          ? "arm-none-eabi-gcc -mcpu=cortex-m7 -mfpu=fpv5-sp-d16 -mfloat-abi=hard -mthumb\n"
            " *        startup.c app.c libLIB.a -lm -T board.ld -Wl,--gc-sections  (newlib; bare\n"
            " *        metal: no heap is used, no threads; the weights are read-only data for\n"
            " *        flash and the arena is the only RAM a call needs besides its stack. Not\n"
            " *        reentrant from interrupt handlers: the runtime's buffers are static)"
          : "cc app.c libLIB.a -lm      (the library needs only the C library and libm)",
      {{"LIB", name}});
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto list = [&](const std::vector<TensorSignature>& sigs) {
    std::string out;
    for (size_t i = 0; i < sigs.size(); ++i) {
      std::vector<std::string> dims;
      for (const SymDim& d : sigs[i].shape) dims.push_back(DimString(d));
      absl::StrAppend(&out, " *   [", i, "] ", CommentSafe(sigs[i].name), ": ",
                      DTypeName(sigs[i].dtype), "[", absl::StrJoin(dims, ","), "]\n");
    }
    return out.empty() ? std::string(" *   (none)\n") : out;
  };
  std::string text = absl::StrCat(
      "/* ", name, ".h: C API of the ahead-of-time compiled model '", name,
      "' (generated by cuvilc from ", CommentSafe(source),
      ").\n"
      " *\n"
      " * Link:  ",
      link,
      "\n"
      " *\n"
      " * Inputs (",
      model.inputs.size(), "), in the order NAME_run takes them:\n", list(model.inputs),
      " * Outputs (", model.outputs.size(), "):\n", list(model.outputs),
      " * `batch` is the model's symbolic dimension (",
      model.symbol.empty() ? "none" : model.symbol,
      "); tensors are dense, row-major, in host byte order.\n"
      " *\n"
      " * Thread-safety: the library has no mutable global state visible to callers; ",
      name,
      "_run may be\n"
      " * called from any number of threads at once, each with its own arena. A call runs on the\n"
      " * calling thread only (no threads of its own). The model's intermediates and its kernels'\n"
      " * scratch (microkernel buffers; blocks for sorting, recurrent ops and GEMM packing) live "
      "in\n"
      " * the caller's arena, ",
      bounded ? "and a call allocates nothing.\n"
              : "but some of this model's buffers are sized at run time (those of control-flow\n"
                " * ops: If, Loop, Scan): they come from malloc (a thread keeps up to 16 MiB of\n"
                " * freed blocks for its next calls and frees them when it exits).\n",
      " */\n"
      "#ifndef ",
      upper, "_H_\n#define ", upper,
      "_H_\n\n"
      "#include <stddef.h>\n#include <stdint.h>\n\n"
      "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
      "#ifndef CUVIL_AOT_TYPES_DEFINED\n#define CUVIL_AOT_TYPES_DEFINED\n",
      PublicStructsText(),
      "/* Results of NAME_run. Positive: the input data is invalid for the model (outputs are\n"
      " * unspecified). Negative: a bad argument (nothing ran). */\n"
      "enum {\n"
      "  CUVIL_AOT_OK = 0,\n"
      "  CUVIL_AOT_INDEX_OUT_OF_BOUNDS = 1, /* a Gather / ScatterND index outside its axis */\n"
      "  CUVIL_AOT_SLICE_OUT_OF_BOUNDS = 2, /* a batch-dependent Slice past its input */\n"
      "  CUVIL_AOT_TOPK_TOO_LARGE = 3,      /* TopK's K exceeds its axis at this batch */\n"
      "  CUVIL_AOT_RESIZE_EMPTY_AXIS = 6,   /* a shape-dependent Resize of an empty axis */\n"
      "  CUVIL_AOT_BAD_BATCH = -1,          /* batch < 1, or a size overflows at this batch */\n"
      "  CUVIL_AOT_NULL_ARGUMENT = -2,      /* a null inputs/outputs array, tensor or arena */\n"
      "  CUVIL_AOT_MISALIGNED_ARENA = -3    /* arena not aligned to CUVIL_AOT_ARENA_ALIGN */\n"
      "};\n\n"
      "/* Alignment NAME_run needs for its arena (e.g. aligned_alloc(CUVIL_AOT_ARENA_ALIGN, n)). "
      "*/\n"
      "#define CUVIL_AOT_ARENA_ALIGN 64\n\n"
      "/* Number of elements of `t` at `batch`; -1 on overflow or batch < 1. */\n"
      "static inline int64_t cuvil_aot_elements(const cuvil_aot_tensor* t, int64_t batch) {\n"
      "  int64_t n = 1;\n"
      "  if (batch < 1) return -1;\n"
      "  for (int32_t i = 0; i < t->rank; ++i) {\n"
      "    int64_t d = t->dims[i].coef;\n"
      "    for (int32_t p = 0; p < t->dims[i].power; ++p)\n"
      "      if (__builtin_mul_overflow(d, batch, &d)) return -1;\n"
      "    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;\n"
      "  }\n"
      "  return n;\n"
      "}\n"
      "#endif /* CUVIL_AOT_TYPES_DEFINED */\n\n"
      "#define ",
      name, "_NUM_INPUTS ", model.inputs.size(), "\n#define ", name, "_NUM_OUTPUTS ",
      model.outputs.size(),
      "\n\n"
      "/* Descriptors of the inputs and outputs (immutable). */\n"
      "extern const cuvil_aot_tensor ",
      name, "_inputs[];\nextern const cuvil_aot_tensor ", name,
      "_outputs[];\n\n"
      "/* Bytes of arena one call at `batch` needs: the memory plan (at most ",
      per_batch, " * batch + ", fixed,
      ")\n"
      " * and, 64-byte aligned after it, the scratch of the kernel that needs the most (it "
      "depends\n"
      " * on the CPU's microkernel tier). Never decreases as the batch grows, so an arena sized\n"
      " * for the largest batch serves every smaller one. SIZE_MAX when batch < 1 or the size\n"
      " * overflows. */\n"
      "size_t ",
      name,
      "_arena_bytes(int64_t batch);\n\n"
      "/* Runs the model on `batch` items. inputs[i] points to input i's elements and outputs[i] "
      "to\n"
      " * room for output i's (cuvil_aot_elements(&NAME_outputs[i], batch) * elem_size bytes);\n"
      " * arena: NAME_arena_bytes(batch) bytes aligned to CUVIL_AOT_ARENA_ALIGN (may be null when\n"
      " * that is 0), exclusive to this call. Returns CUVIL_AOT_OK or a CUVIL_AOT_* code. */\n"
      "int ",
      name,
      "_run(const void* const* inputs, void* const* outputs, int64_t batch, void* arena);\n\n"
      "/* The body NAME_run runs on this CPU, named by the CPU it was compiled for. The library\n"
      " * holds ",
      tiers.size() == 1 ? "one: " : "these, and runs the first this CPU can run:\n *   ",
      absl::StrJoin(cpus, ",\n *   "),
      ".\n * Thread-safe. */\n"
      "const char* NAME_tier(void);\n\n"
      "#ifdef __cplusplus\n}  /* extern \"C\" */\n#endif\n\n#endif /* ",
      upper, "_H_ */\n");
  return absl::StrReplaceAll(text, {{"NAME_", name + "_"}});
}

}  // namespace cuvil::aot_internal
