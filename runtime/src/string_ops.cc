#include "cuvil/runtime/string_ops.h"

#include <locale.h>
#include <wctype.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "cuvil/runtime/dtype.h"
#include "cuvil/runtime/half.h"
#include "numeric_dtype.h"

namespace cuvil {

char* StringHeap::Allocate(size_t bytes) {
  constexpr size_t kBlock = 64 * 1024;
  total_ += bytes;
  if (bytes > kBlock / 4) {  // Large strings get a block of their own; the open one stays open.
    blocks_.push_back(std::make_unique<char[]>(bytes == 0 ? 1 : bytes));
    return blocks_.back().get();
  }
  if (bytes > left_) {
    blocks_.push_back(std::make_unique<char[]>(kBlock));
    next_ = blocks_.back().get();
    left_ = kBlock;
  }
  char* p = next_;
  next_ += bytes;
  left_ -= bytes;
  return p;
}

namespace {

std::string_view View(const CuvilString& s) {
  return s.size <= 0 ? std::string_view() : std::string_view(s.data, static_cast<size_t>(s.size));
}

CuvilString Store(StringHeap& heap, std::string_view s) {
  char* p = heap.Allocate(s.size());
  if (!s.empty()) std::memcpy(p, s.data(), s.size());
  return CuvilString{p, static_cast<int64_t>(s.size())};
}

// Appends the decimal form of `v` to `out` (at least 32 bytes free); returns its length.
template <typename T>
size_t FormatNumber(T v, char* out) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return std::strlen(std::strcpy(out, "NaN"));
    if (std::isinf(v)) return std::strlen(std::strcpy(out, v > 0 ? "INF" : "-INF"));
  }
  auto r = std::to_chars(out, out + 32, v);
  return static_cast<size_t>(r.ptr - out);
}

template <typename T>
void FormatAll(const T* src, int64_t n, CuvilString* dst, StringHeap& heap) {
  char buf[48];
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = Store(heap, std::string_view(buf, FormatNumber(src[i], buf)));
  }
}

std::string_view Trim(std::string_view s) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

// Reads the whole of `s` (blanks trimmed, one optional leading '+') as T.
template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  s = Trim(s);
  if (s.size() > 1 && s[0] == '+' && s[1] != '-') s.remove_prefix(1);
  if (s.empty()) return false;
  if constexpr (std::is_floating_point_v<T>) {
    // from_chars reads "inf", "infinity" and "nan" in any case itself.
    auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
    // Out of range: from_chars leaves *out alone; strtod's answer (±inf or 0) is what Cast gives.
    if (r.ec == std::errc::result_out_of_range) {
      std::string copy(s);
      *out = static_cast<T>(std::strtod(copy.c_str(), nullptr));
      return true;
    }
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
  } else {
    auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
  }
}

template <typename T>
int64_t ParseAll(const CuvilString* src, int64_t n, T* dst) {
  for (int64_t i = 0; i < n; ++i) {
    if (!ParseNumber(View(src[i]), &dst[i])) return i + 1;
  }
  return 0;
}

// Reads floats and stores them converted to a 16-bit float type.
int64_t ParseConverted(const CuvilString* src, int64_t n, uint16_t* dst,
                       uint16_t (*convert)(float)) {
  for (int64_t i = 0; i < n; ++i) {
    float v;
    if (!ParseNumber(View(src[i]), &v)) return i + 1;
    dst[i] = convert(v);
  }
  return 0;
}

// The C.UTF-8 locale's case tables (full Unicode simple case mapping in glibc); null when the C
// library has none, and then only ASCII letters change case.
locale_t Utf8Locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return loc;
}

// Decodes one UTF-8 code point at s[i] (advancing i); invalid bytes come back as -1 - byte.
int64_t DecodeUtf8(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    ++i;
    return -1 - c;
  }
  int64_t cp = len == 1 ? c : c & (0x7f >> len);
  for (int k = 1; k < len; ++k) {
    const unsigned char t = static_cast<unsigned char>(s[i + k]);
    if ((t >> 6) != 2) {
      ++i;
      return -1 - c;
    }
    cp = (cp << 6) | (t & 0x3f);
  }
  i += len;
  return cp;
}

void EncodeUtf8(int64_t cp, std::string& out) {
  if (cp < 0) {
    out.push_back(static_cast<char>(-1 - cp));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// `s` with every code point lower-cased (upper = false) or upper-cased.
std::string ChangeCase(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  const locale_t loc = Utf8Locale();
  for (size_t i = 0; i < s.size();) {
    int64_t cp = DecodeUtf8(s, i);
    if (cp >= 0) {
      if (loc != static_cast<locale_t>(0)) {
        cp = upper ? towupper_l(static_cast<wint_t>(cp), loc)
                   : towlower_l(static_cast<wint_t>(cp), loc);
      } else if (upper && cp >= 'a' && cp <= 'z') {
        cp -= 'a' - 'A';
      } else if (!upper && cp >= 'A' && cp <= 'Z') {
        cp += 'a' - 'A';
      }
    }
    EncodeUtf8(cp, out);
  }
  return out;
}

}  // namespace
}  // namespace cuvil

extern "C" int32_t cuvil_rt_format_strings(const void* src, int32_t dtype, int64_t n,
                                           CuvilString* dst, void* heap_ptr) {
  using cuvil::DType;
  if (heap_ptr == nullptr) return -1;
  auto& heap = *static_cast<cuvil::StringHeap*>(heap_ptr);
  const auto d = static_cast<DType>(dtype);
  if (d == DType::kFloat16 || d == DType::kBFloat16) {
    const auto* p = static_cast<const uint16_t*>(src);
    char buf[48];
    for (int64_t i = 0; i < n; ++i) {
      const float v =
          d == DType::kBFloat16 ? cuvil::BFloat16ToFloat(p[i]) : cuvil::HalfToFloat(p[i]);
      dst[i] = cuvil::Store(heap, std::string_view(buf, cuvil::FormatNumber(v, buf)));
    }
    return 0;
  }
  if (d == DType::kBool) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = cuvil::Store(heap, p[i] != 0 ? "1" : "0");
    return 0;
  }
  return cuvil::VisitNumericDType(d, int32_t{-1}, [&](auto tag) {
    using T = decltype(tag);
    cuvil::FormatAll(static_cast<const T*>(src), n, dst, heap);
    return int32_t{0};
  });
}

extern "C" int64_t cuvil_rt_parse_strings(const CuvilString* src, int64_t n, int32_t dtype,
                                          void* dst) {
  using cuvil::DType;
  const auto d = static_cast<DType>(dtype);
  if (d == DType::kFloat16) {
    return cuvil::ParseConverted(src, n, static_cast<uint16_t*>(dst), cuvil::FloatToHalf);
  }
  if (d == DType::kBFloat16) {
    return cuvil::ParseConverted(src, n, static_cast<uint16_t*>(dst), cuvil::FloatToBFloat16);
  }
  if (d == DType::kBool) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
      const std::string_view s = cuvil::Trim(cuvil::View(src[i]));
      double v;
      if (cuvil::EqualsIgnoreCase(s, "true")) {
        out[i] = 1;
      } else if (cuvil::EqualsIgnoreCase(s, "false")) {
        out[i] = 0;
      } else if (cuvil::ParseNumber(s, &v)) {
        out[i] = v != 0;
      } else {
        return i + 1;
      }
    }
    return 0;
  }
  return cuvil::VisitNumericDType(d, int64_t{-1}, [&](auto tag) {
    using T = decltype(tag);
    return cuvil::ParseAll(src, n, static_cast<T*>(dst));
  });
}

extern "C" int64_t cuvil_rt_normalize_strings(const CuvilString* src, int64_t n,
                                              int32_t case_change, int32_t case_sensitive,
                                              const CuvilString* stopwords, int64_t stopword_count,
                                              CuvilString* dst, void* heap_ptr) {
  if (case_change != 0 && heap_ptr == nullptr) return -1;
  auto* heap = static_cast<cuvil::StringHeap*>(heap_ptr);
  std::vector<std::string> folded_stopwords;
  if (!case_sensitive) {
    for (int64_t s = 0; s < stopword_count; ++s) {
      folded_stopwords.push_back(cuvil::ChangeCase(cuvil::View(stopwords[s]), false));
    }
  }
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::string_view word = cuvil::View(src[i]);
    bool stop = false;
    if (case_sensitive) {
      for (int64_t s = 0; s < stopword_count && !stop; ++s)
        stop = word == cuvil::View(stopwords[s]);
    } else if (!folded_stopwords.empty()) {
      const std::string folded = cuvil::ChangeCase(word, false);
      for (const std::string& s : folded_stopwords) stop = stop || folded == s;
    }
    if (stop) continue;
    // Without a case change the view is kept: its bytes live as long as the input's.
    dst[kept++] =
        case_change == 0 ? src[i] : cuvil::Store(*heap, cuvil::ChangeCase(word, case_change == 2));
  }
  if (kept == 0) {
    dst[0] = CuvilString{nullptr, 0};
    return 1;
  }
  return kept;
}
