// String tensors as compiled code sees them, and the kernels that take or make strings.
//
// An element of a string tensor (DType::kString) is a CuvilString: a view of bytes stored
// elsewhere (a HostTensor's own strings, or the StringHeap of the execution that made them), never
// in the arena, so copying or reshaping a string tensor copies views only. The functions below
// are called by generated code; each is reentrant, and the ones that make strings take the
// execution's heap (null: they fail without writing).
#ifndef CUVIL_RUNTIME_STRING_OPS_H_
#define CUVIL_RUNTIME_STRING_OPS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

extern "C" {

// One string: `size` bytes at `data` (not NUL-terminated; data may be null when size is 0).
struct CuvilString {
  const char* data;
  int64_t size;
};

// ONNX Cast to STRING of `n` values of DType `dtype` (float and integer types, bool): floats as
// the shortest decimal that reads back to the same value ("0.039187793", "1e+20"), NaN as "NaN",
// infinities as "INF" / "-INF" (ONNX Runtime's spelling); float16/bfloat16 as their float32
// value; integers in decimal; bool as "1" / "0". Returns 0, or -1 without a heap or for another
// dtype (nothing written).
int32_t cuvil_rt_format_strings(const void* src, int32_t dtype, int64_t n, CuvilString* dst,
                                void* heap);

// ONNX Cast from STRING to DType `dtype`: a decimal number with an optional sign, surrounding
// blanks allowed; for floats also "INF", "INFINITY", "NaN" in any case. Integers out of range
// and non-numbers fail; bool also reads "true" / "false". Returns 0, or 1 + the index of the
// first string that does not read as `dtype` (dst is then unspecified), or -1 for another dtype.
int64_t cuvil_rt_parse_strings(const CuvilString* src, int64_t n, int32_t dtype, void* dst);

// ONNX StringNormalizer over `n` strings: drops each that equals one of `stopwords` (compared
// after lower-casing both unless `case_sensitive`), then changes the case of the rest
// (`case_change` 0: none, 1: lower, 2: upper; UTF-8, full Unicode simple case mapping, invalid
// bytes kept). Writes the kept strings in order to `dst` (at most n) and returns how many; when
// none is kept it writes one empty string and returns 1 (the spec's [1] output). Returns -1
// without a heap when a case change needs one.
int64_t cuvil_rt_normalize_strings(const CuvilString* src, int64_t n, int32_t case_change,
                                   int32_t case_sensitive, const CuvilString* stopwords,
                                   int64_t stopword_count, CuvilString* dst, void* heap);
}

namespace cuvil {

// Holds the bytes of the strings one execution makes; they live until the heap is destroyed, so
// the caller reads the outputs' strings before it goes. Thread-compatible: one execution at a time
// (a model that makes strings never splits its batch across threads).
class StringHeap {
 public:
  StringHeap() = default;
  StringHeap(const StringHeap&) = delete;
  StringHeap& operator=(const StringHeap&) = delete;

  // `bytes` bytes valid until the heap is destroyed (never null; a block per large request).
  char* Allocate(size_t bytes);
  // Bytes handed out so far.
  size_t bytes_used() const { return total_; }

 private:
  std::vector<std::unique_ptr<char[]>> blocks_;
  char* next_ = nullptr;
  size_t left_ = 0;
  size_t total_ = 0;
};

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_STRING_OPS_H_
