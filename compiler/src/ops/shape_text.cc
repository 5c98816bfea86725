// Shape inference for TfIdfVectorizer over integer tokens (pool_int64s; string pools are not
// supported).
//
// Canonical form seen by code generation: the ONNX attributes, checked: ngram_counts ascending
// within the pool, one ngram_indexes entry per pooled n-gram, weights (if any) one per entry.
#include <algorithm>

#include "infer_context.h"

namespace cuvil::ir {
namespace {

absl::Status TfIdfVectorizer(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  Node& n = c.node();
  if (n.has_attr("pool_strings")) return absl::UnimplementedError("string pools are unsupported");
  if (!IsInteger(c.in_dtype(0)) || c.in_rank(0) < 1 || c.in_rank(0) > 2) {
    return c.Error("input must be an integer tensor [C] or [N, C]");
  }
  std::string mode = n.attr_string("mode", "TF");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") return c.Error("unknown mode " + mode);
  int64_t min_n = n.attr_int("min_gram_length", 1), max_n = n.attr_int("max_gram_length", 1);
  int64_t skip = n.attr_int("max_skip_count", 0);
  std::vector<int64_t> counts = n.attr_ints("ngram_counts");
  std::vector<int64_t> indexes = n.attr_ints("ngram_indexes");
  std::vector<int64_t> pool = n.attr_ints("pool_int64s");
  if (min_n < 1 || max_n < min_n || skip < 0 || skip > 1024 ||
      max_n > static_cast<int64_t>(counts.size())) {
    return c.Error("bad gram lengths or max_skip_count");
  }
  int64_t grams = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    int64_t end = i + 1 < counts.size() ? counts[i + 1] : static_cast<int64_t>(pool.size());
    if (counts[i] < 0 || end < counts[i] || (end - counts[i]) % static_cast<int64_t>(i + 1) != 0) {
      return c.Error("ngram_counts do not partition the pool");
    }
    grams += (end - counts[i]) / static_cast<int64_t>(i + 1);
  }
  if (grams != static_cast<int64_t>(indexes.size()) || indexes.empty()) {
    return c.Error("ngram_indexes needs one entry per pooled n-gram");
  }
  int64_t width = *std::max_element(indexes.begin(), indexes.end()) + 1;
  if (*std::min_element(indexes.begin(), indexes.end()) < 0 || width > (int64_t{1} << 24)) {
    return c.Error("ngram_indexes are out of range");
  }
  if (n.has_attr("weights") && n.attr_floats("weights").size() != indexes.size()) {
    return c.Error("weights needs one entry per n-gram");
  }
  SymShape out = c.in_shape(0);
  out.back() = SymDim::Const(width);
  c.SetOutput(0, DType::kFloat32, out);
  return absl::OkStatus();
}

}  // namespace

void RegisterTextShapes(OpTable& r) {
  r.DefineShape("TfIdfVectorizer", TfIdfVectorizer).Batch(BatchClass::kMixes);
}

}  // namespace cuvil::ir
