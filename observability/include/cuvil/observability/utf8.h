// UTF-8 validation shared by every text exporter (logs, metrics).
#ifndef CUVIL_OBSERVABILITY_UTF8_H_
#define CUVIL_OBSERVABILITY_UTF8_H_

#include <cstddef>
#include <string_view>

namespace cuvil::observability {

// Length (1..4) of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid
// (bad lead or continuation byte, truncated, overlong, surrogate or past U+10FFFF). Pure.
size_t Utf8SequenceLength(std::string_view s, size_t i);

}  // namespace cuvil::observability

#endif  // CUVIL_OBSERVABILITY_UTF8_H_
