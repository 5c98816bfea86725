#include "cuvil/compiler/kernel_precision.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cuvil {
namespace {

// Ops whose kernels multiply 8-bit integers (u8/s8 x u8/s8, int32 accumulation).
constexpr std::string_view kInt8Ops[] = {"CuvilQConv",    "CuvilQMatMul", "QLinearConv",
                                         "QLinearMatMul", "ConvInteger",  "MatMulInteger"};

// Ops whose weights stay 4-bit in memory (widened to float32 in registers).
constexpr std::string_view kInt4Ops[] = {"MatMulNBits"};

}  // namespace

std::string KernelPrecision(const KernelFunction& kernel) {
  for (std::string_view op : kInt8Ops) {
    if (kernel.op_type == op) return "int8";
  }
  for (std::string_view op : kInt4Ops) {
    if (kernel.op_type == op) return "int4";
  }
  // Signatures read "(float32[batch,784], ...) -> float32[batch,512], ...": each type name stands
  // right before a '['.
  const std::string& sig = kernel.signature;
  bool any_float = false, float64 = false;
  std::string first_output;
  const size_t arrow = sig.find("->");
  for (size_t open = sig.find('['); open != std::string::npos; open = sig.find('[', open + 1)) {
    size_t begin = open;
    while (begin > 0 && std::isalnum(static_cast<unsigned char>(sig[begin - 1]))) --begin;
    const std::string_view type(sig.data() + begin, open - begin);
    if (type.empty()) continue;
    if (type == "float64") float64 = true;
    if (type.find("float") != std::string_view::npos) any_float = true;  // bfloat16 too.
    if (arrow != std::string::npos && begin > arrow && first_output.empty()) {
      first_output = std::string(type);
    }
  }
  // Half-precision tensors are storage formats: kernels widen them and compute in float32.
  if (float64) return "float64";
  if (any_float) return "float32";
  return first_output.empty() ? "unknown" : first_output;
}

std::string PrecisionSummary(const std::vector<KernelFunction>& kernels) {
  std::map<std::string, int> counts;
  for (const KernelFunction& k : kernels) ++counts[KernelPrecision(k)];
  std::vector<std::pair<std::string, int>> order(counts.begin(), counts.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return absl::StrJoin(order, " ", [](std::string* out, const auto& p) {
    absl::StrAppend(out, p.first, ":", p.second);
  });
}

}  // namespace cuvil
