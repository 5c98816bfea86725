// Code generation for TfIdfVectorizer. The pool is a compile-time constant, so each row's loop
// over start positions tests every pooled n-gram at every skip (items start + t * (skip + 1));
// unigrams count once per position. Counts then become TF, IDF (weight where seen) or TF * IDF.
#include "codegen/kernel_context.h"

namespace cuvil::codegen {
namespace {

absl::Status TfIdfVectorizer(KernelContext& k) {
  const ir::Node& n = k.node();
  auto& b = k.b();
  DType d = k.in_dtype(0);
  std::string mode = n.attr_string("mode", "TF");
  int64_t min_n = n.attr_int("min_gram_length", 1), max_n = n.attr_int("max_gram_length", 1);
  int64_t max_skip = n.attr_int("max_skip_count", 0);
  std::vector<int64_t> counts = n.attr_ints("ngram_counts");
  std::vector<int64_t> indexes = n.attr_ints("ngram_indexes");
  std::vector<int64_t> pool = n.attr_ints("pool_int64s");
  std::vector<float> weights = n.attr_floats("weights");
  const SymShape& in = k.in_shape(0);
  llvm::Value* rows = in.size() == 2 ? k.Dim(in[0]) : k.I64(1);
  llvm::Value* len = k.Dim(in.back());
  int64_t width = k.out_shape(0).back().coef();
  llvm::Value* out = k.out(0);
  k.Memset0(out, b.CreateMul(rows, k.I64(width)), DType::kFloat32);
  k.For(k.I64(0), rows, [&](llvm::Value* row) {
    llvm::Value* base = b.CreateMul(row, len);
    llvm::Value* out_base = b.CreateMul(row, k.I64(width));
    k.For(k.I64(0), len, [&](llvm::Value* start) {
      int64_t gram = 0;
      for (size_t g = 0; g < counts.size(); ++g) {
        int64_t size = static_cast<int64_t>(g) + 1;
        int64_t end = g + 1 < counts.size() ? counts[g + 1] : static_cast<int64_t>(pool.size());
        for (int64_t p = counts[g]; p < end; p += size, ++gram) {
          if (size < min_n || size > max_n) continue;
          for (int64_t skip = 0; skip <= (size == 1 ? 0 : max_skip); ++skip) {
            int64_t span = (size - 1) * (skip + 1);
            llvm::Value* fits = b.CreateICmpSLT(b.CreateAdd(start, k.I64(span)), len);
            k.If(fits, [&] {
              llvm::Value* match = b.getTrue();
              for (int64_t t = 0; t < size; ++t) {
                llvm::Value* at = b.CreateAdd(base, b.CreateAdd(start, k.I64(t * (skip + 1))));
                llvm::Value* v = k.Convert(k.Load(d, k.in(0), at), d, DType::kInt64);
                match = b.CreateAnd(match, b.CreateICmpEQ(v, k.I64(pool[p + t])));
              }
              llvm::Value* slot = b.CreateAdd(out_base, k.I64(indexes[gram]));
              llvm::Value* old = k.Load(DType::kFloat32, out, slot);
              k.Store(DType::kFloat32, out, slot,
                      b.CreateFAdd(old, b.CreateSelect(match, k.F32(1), k.F32(0))));
            });
          }
        }
      }
    });
    if (mode != "TF") {
      for (size_t g = 0; g < indexes.size(); ++g) {
        float w = weights.empty() ? 1.0f : weights[g];
        llvm::Value* slot = b.CreateAdd(out_base, k.I64(indexes[g]));
        llvm::Value* count = k.Load(DType::kFloat32, out, slot);
        llvm::Value* v = mode == "IDF"
                             ? b.CreateSelect(b.CreateFCmpOGT(count, k.F32(0)), k.F32(w), k.F32(0))
                             : b.CreateFMul(count, k.F32(w));
        k.Store(DType::kFloat32, out, slot, v);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterTextKernels(OpTable& r) { r.DefineEmitter("TfIdfVectorizer", TfIdfVectorizer); }

}  // namespace cuvil::codegen
