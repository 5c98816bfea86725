// Private, header-only: tensor data between KServe v2 JSON and row-major bytes, for the HTTP front
// end. Kept apart from http_service.cc so it can be unit-tested without a server.
#ifndef CUVIL_SERVER_SRC_HTTP_JSON_H_
#define CUVIL_SERVER_SRC_HTTP_JSON_H_

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cuvil/runtime/dtype.h"
#include "nlohmann/json.hpp"

namespace cuvil::http_json {

// Deepest array/object nesting a JSON body may have. Tensor data needs rank + 3 levels.
inline constexpr int kMaxJsonNesting = 64;

// What one linear pass over a JSON text learns before it is parsed, without recursion or
// allocation (the text is not otherwise validated):
// - whether more than `max_depth` arrays/objects are open at once (brackets inside strings do not
//   count), so a body like [[[[...]]]] is refused before the recursive parser sees it;
// - an upper bound, in bytes, of the memory parsing it into a json tree and decoding its tensors
//   may take: per value a tree node in an array grown by doubling (32 bytes) and a tensor element
//   of up to 8 bytes, plus 64 per array or object, 96 per object member (a map node with its key)
//   and, per string, its text twice (the tree's copy, a BYTES tensor's) and 48 of overhead. A
//   small body of many tiny values ("0,0,0,...") costs about 20 times its size once parsed: the
//   server reserves this against its in-flight budget before parsing.
struct JsonScan {
  bool too_deep = false;     // The scan stops at the first level past max_depth.
  uint64_t decode_cost = 0;  // Meaningful only when !too_deep.
};
inline JsonScan ScanJson(std::string_view text, int max_depth = kMaxJsonNesting) {
  constexpr uint64_t kValue = 32 + 8;
  constexpr uint64_t kContainer = 64;
  constexpr uint64_t kMember = 96;
  constexpr uint64_t kString = 48;
  JsonScan scan;
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  bool in_scalar = false;  // Inside a number or literal (true, false, null).
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        continue;
      }
      scan.decode_cost += 2;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        in_scalar = false;
        scan.decode_cost += kValue + kString;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) {
          scan.too_deep = true;
          return scan;
        }
        in_scalar = false;
        scan.decode_cost += kValue + kContainer;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        in_scalar = false;
        break;
      case ':':
        in_scalar = false;
        scan.decode_cost += kMember;
        break;
      case ',':
      case ' ':
      case '\t':
      case '\r':
      case '\n':
        in_scalar = false;
        break;
      default:
        if (!in_scalar) scan.decode_cost += kValue;
        in_scalar = true;
    }
  }
  return scan;
}

// The refusal of a text ScanJson found too deep: InvalidArgument "JSON nesting deeper than
// <max_depth>".
inline absl::Status JsonTooDeepError(int max_depth = kMaxJsonNesting) {
  return absl::InvalidArgumentError(absl::StrCat("JSON nesting deeper than ", max_depth));
}

// JsonTooDeepError() when ScanJson(text, max_depth) finds `text` too deep, else OK.
inline absl::Status CheckJsonNesting(std::string_view text, int max_depth = kMaxJsonNesting) {
  return ScanJson(text, max_depth).too_deep ? JsonTooDeepError(max_depth) : absl::OkStatus();
}

// Elements a shape holds; InvalidArgument for negative dims or an overflowing product.
inline absl::StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape,
                                            const std::string& tensor) {
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", tensor, "': shape has a negative dimension ", d));
    }
    if (d != 0 && count > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(absl::StrCat("input '", tensor, "': shape is too large"));
    }
    count *= d;
  }
  return count;
}

namespace internal {

template <typename T>
absl::Status ConvertScalar(const nlohmann::json& v, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (v.is_boolean()) {
      *out = v.get<bool>();
      return absl::OkStatus();
    }
    // Some clients send BOOL as 0/1.
    if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) {
      *out = v.get<int64_t>() == 1;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError("expected true or false");
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return absl::InvalidArgumentError("expected a number");
    *out = static_cast<T>(v.get<double>());
    return absl::OkStatus();
  } else {
    if (v.is_number_unsigned()) {
      uint64_t x = v.get<uint64_t>();
      if (!std::in_range<T>(x)) return absl::InvalidArgumentError("integer out of range");
      *out = static_cast<T>(x);
      return absl::OkStatus();
    }
    if (v.is_number_integer()) {
      int64_t x = v.get<int64_t>();
      if (!std::in_range<T>(x)) return absl::InvalidArgumentError("integer out of range");
      *out = static_cast<T>(x);
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError("expected an integer");
  }
}

// The scalars in `v` (a scalar or nested arrays of scalars), counted without allocating.
inline absl::StatusOr<int64_t> CountScalars(const nlohmann::json& v, int depth) {
  if (!v.is_array()) return 1;
  // Deeply nested input is malformed and would otherwise recurse without bound.
  if (depth > 64) return absl::InvalidArgumentError("data is nested too deeply");
  int64_t n = 0;
  for (const auto& e : v) {
    absl::StatusOr<int64_t> inner = CountScalars(e, depth + 1);
    if (!inner.ok()) return inner.status();
    n += *inner;
  }
  return n;
}

// Converts the scalars of `v` into `out` (as T) from element `*next` on; `out` has room for all.
template <typename T>
absl::Status Flatten(const nlohmann::json& v, uint8_t* out, size_t* next) {
  if (v.is_array()) {
    for (const auto& e : v) {
      absl::Status s = Flatten<T>(e, out, next);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  T x{};
  absl::Status s = ConvertScalar(v, &x);
  if (!s.ok())
    return absl::InvalidArgumentError(absl::StrCat("element ", *next, ": ", s.message()));
  if constexpr (std::is_same_v<T, bool>) {
    out[(*next)++] = x ? 1 : 0;
  } else {
    std::memcpy(out + (*next)++ * sizeof(T), &x, sizeof(T));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status DecodeTyped(const nlohmann::json& data, int64_t expected, const std::string& tensor,
                         const std::string& datatype, std::vector<uint8_t>* out) {
  // `expected` comes from the client's shape: the data is counted first, so nothing is allocated
  // for a shape the data does not fill, and the tensor is never larger than the data's values.
  absl::StatusOr<int64_t> count = CountScalars(data, 0);
  if (!count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", tensor, "' (", datatype, "): ", count.status().message()));
  }
  if (*count != expected) {
    return absl::InvalidArgumentError(absl::StrCat("input '", tensor, "': shape needs ", expected,
                                                   " elements, data has ", *count));
  }
  out->resize(static_cast<size_t>(expected) * sizeof(T));
  size_t next = 0;
  absl::Status s = Flatten<T>(data, out->data(), &next);
  if (!s.ok()) {
    out->clear();
    return absl::InvalidArgumentError(
        absl::StrCat("input '", tensor, "' (", datatype, "): ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace internal

// Decodes the "data" of a JSON input (flat or nested arrays, or a lone scalar) holding
// `expected` elements of `datatype` into row-major bytes. BYTES elements must be strings and are
// encoded as a 4-byte little-endian length followed by the bytes.
inline absl::Status DecodeTensorData(const nlohmann::json& data, const std::string& datatype,
                                     int64_t expected, const std::string& tensor,
                                     std::vector<uint8_t>* out) {
  out->clear();
  if (datatype == "BYTES") {
    std::vector<const nlohmann::json*> stack = {&data};
    std::vector<const std::string*> strings;
    // Iterative flatten keeps element order: push children in reverse.
    while (!stack.empty()) {
      const nlohmann::json* v = stack.back();
      stack.pop_back();
      if (v->is_array()) {
        for (auto it = v->rbegin(); it != v->rend(); ++it) stack.push_back(&*it);
      } else if (v->is_string()) {
        strings.push_back(&v->get_ref<const std::string&>());
      } else {
        return absl::InvalidArgumentError(absl::StrCat("input '", tensor, "' (BYTES): element ",
                                                       strings.size(), ": expected a string"));
      }
    }
    if (static_cast<int64_t>(strings.size()) != expected) {
      return absl::InvalidArgumentError(absl::StrCat("input '", tensor, "': shape needs ", expected,
                                                     " elements, data has ", strings.size()));
    }
    for (const std::string* s : strings) {
      uint32_t n = static_cast<uint32_t>(s->size());
      uint8_t len[4] = {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8),
                        static_cast<uint8_t>(n >> 16), static_cast<uint8_t>(n >> 24)};
      out->insert(out->end(), len, len + 4);
      out->insert(out->end(), s->begin(), s->end());
    }
    return absl::OkStatus();
  }
  if (datatype == "FP16" || datatype == "BF16") {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", tensor, "': ", datatype, " data must be sent in binary form"));
  }
  absl::StatusOr<DType> dtype = DTypeFromKServeName(std::string(datatype));
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", tensor, "': unknown datatype '", datatype, "'"));
  }
  switch (*dtype) {
    case DType::kFloat32:
      return internal::DecodeTyped<float>(data, expected, tensor, datatype, out);
    case DType::kFloat64:
      return internal::DecodeTyped<double>(data, expected, tensor, datatype, out);
    case DType::kInt8:
      return internal::DecodeTyped<int8_t>(data, expected, tensor, datatype, out);
    case DType::kInt16:
      return internal::DecodeTyped<int16_t>(data, expected, tensor, datatype, out);
    case DType::kInt32:
      return internal::DecodeTyped<int32_t>(data, expected, tensor, datatype, out);
    case DType::kInt64:
      return internal::DecodeTyped<int64_t>(data, expected, tensor, datatype, out);
    case DType::kUInt8:
      return internal::DecodeTyped<uint8_t>(data, expected, tensor, datatype, out);
    case DType::kUInt16:
      return internal::DecodeTyped<uint16_t>(data, expected, tensor, datatype, out);
    case DType::kUInt32:
      return internal::DecodeTyped<uint32_t>(data, expected, tensor, datatype, out);
    case DType::kUInt64:
      return internal::DecodeTyped<uint64_t>(data, expected, tensor, datatype, out);
    case DType::kBool:
      return internal::DecodeTyped<bool>(data, expected, tensor, datatype, out);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("input '", tensor, "': unsupported datatype '", datatype, "'"));
  }
}

namespace internal {

template <typename T>
void AppendNumber(T v, std::string* out) {
  if constexpr (std::is_floating_point_v<T>) {
    // JSON has no NaN/Infinity; these are the tokens Python's json (and so tritonclient) reads.
    if (std::isnan(v)) {
      out->append("NaN");
      return;
    }
    if (std::isinf(v)) {
      out->append(v > 0 ? "Infinity" : "-Infinity");
      return;
    }
  }
  char buf[32];
  // Shortest text that round-trips at T's own precision (floats stay short).
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, ec == std::errc() ? end : buf);
}

template <typename T>
void AppendArray(const uint8_t* data, int64_t n, std::string* out) {
  out->push_back('[');
  for (int64_t i = 0; i < n; ++i) {
    if (i) out->push_back(',');
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      out->append(v ? "true" : "false");
    } else {
      AppendNumber(v, out);
    }
  }
  out->push_back(']');
}

}  // namespace internal

// Appends `n` elements of `dtype` at `data` as a flat JSON array.
inline void AppendJsonArray(DType dtype, const uint8_t* data, int64_t n, std::string* out) {
  switch (dtype) {
    case DType::kFloat32:
      return internal::AppendArray<float>(data, n, out);
    case DType::kFloat64:
      return internal::AppendArray<double>(data, n, out);
    case DType::kInt8:
      return internal::AppendArray<int8_t>(data, n, out);
    case DType::kInt16:
      return internal::AppendArray<int16_t>(data, n, out);
    case DType::kInt32:
      return internal::AppendArray<int32_t>(data, n, out);
    case DType::kInt64:
      return internal::AppendArray<int64_t>(data, n, out);
    case DType::kUInt8:
      return internal::AppendArray<uint8_t>(data, n, out);
    case DType::kUInt16:
      return internal::AppendArray<uint16_t>(data, n, out);
    case DType::kUInt32:
      return internal::AppendArray<uint32_t>(data, n, out);
    case DType::kUInt64:
      return internal::AppendArray<uint64_t>(data, n, out);
    case DType::kBool:
      return internal::AppendArray<bool>(data, n, out);
    default:
      out->append("[]");
  }
}

// Appends `s` as a JSON string literal.
inline void AppendJsonString(std::string_view s, std::string* out) {
  out->append(nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// Triton's classification extension: for each of `rows` rows of `cols` elements, the top `k`
// as "value:index" strings, highest first (ties keep the lower index first).
inline std::vector<std::string> Classify(DType dtype, const uint8_t* data, int64_t rows,
                                         int64_t cols, int64_t k) {
  std::vector<std::string> result;
  k = std::min(k, cols);
  std::vector<double> row(static_cast<size_t>(cols));
  std::vector<int64_t> order(static_cast<size_t>(cols));
  int size = DTypeSize(dtype);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t* p = data + (r * cols + c) * size;
      double v = 0;
      switch (dtype) {
#define CUVIL_CLASSIFY_CASE(D, T)  \
  case D: {                        \
    T x;                           \
    std::memcpy(&x, p, sizeof(T)); \
    v = static_cast<double>(x);    \
    break;                         \
  }
        CUVIL_CLASSIFY_CASE(DType::kFloat32, float)
        CUVIL_CLASSIFY_CASE(DType::kFloat64, double)
        CUVIL_CLASSIFY_CASE(DType::kInt8, int8_t)
        CUVIL_CLASSIFY_CASE(DType::kInt16, int16_t)
        CUVIL_CLASSIFY_CASE(DType::kInt32, int32_t)
        CUVIL_CLASSIFY_CASE(DType::kInt64, int64_t)
        CUVIL_CLASSIFY_CASE(DType::kUInt8, uint8_t)
        CUVIL_CLASSIFY_CASE(DType::kUInt16, uint16_t)
        CUVIL_CLASSIFY_CASE(DType::kUInt32, uint32_t)
        CUVIL_CLASSIFY_CASE(DType::kUInt64, uint64_t)
        CUVIL_CLASSIFY_CASE(DType::kBool, bool)
#undef CUVIL_CLASSIFY_CASE
        default:
          break;
      }
      row[c] = v;
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    for (int64_t i = 0; i < k; ++i) {
      // Triton prints the score with std::to_string ("15.349564:281").
      result.push_back(absl::StrCat(std::to_string(row[order[i]]), ":", order[i]));
    }
  }
  return result;
}

// BYTES wire form: each element as a 4-byte little-endian length, then its bytes.
inline void AppendBytesElements(const std::vector<std::string>& elements, std::string* out) {
  for (const std::string& e : elements) {
    uint32_t n = static_cast<uint32_t>(e.size());
    char len[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                   static_cast<char>(n >> 24)};
    out->append(len, 4);
    out->append(e);
  }
}

}  // namespace cuvil::http_json

#endif  // CUVIL_SERVER_SRC_HTTP_JSON_H_
