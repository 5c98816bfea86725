// cuvil_uk_scratch_bytes: one entry point over every microkernel's scratch sizing.
#include "scratch_sizes.h"

#include <cstring>

#include "call_scratch.h"
#include "cuvil/runtime/ukernel_scratch.h"

namespace cuvil::uk {
namespace {

// The first words of `words` as the kernel's parameter struct (all int64 fields).
template <typename Params>
Params ParamsFrom(const int64_t* words) {
  static_assert(sizeof(Params) % sizeof(int64_t) == 0);
  Params p;
  std::memcpy(&p, words, sizeof(Params));
  return p;
}

template <typename Params>
constexpr int32_t WordsOf() {
  return static_cast<int32_t>(sizeof(Params) / sizeof(int64_t));
}

int64_t HeapBlockBytes(const int64_t* words, int32_t n) {
  int64_t bytes = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (words[i] < 0 || __builtin_add_overflow(bytes, words[i], &bytes)) return -1;
  }
  return CallScratchBlockBytes(bytes > 0 ? bytes : 1);
}

}  // namespace
}  // namespace cuvil::uk

extern "C" int64_t cuvil_uk_scratch_bytes(int32_t kind, const int64_t* words, int32_t num_words) {
  using namespace cuvil::uk;
  if (num_words < 0 || (num_words > 0 && words == nullptr)) return -1;
  switch (kind) {
    case CUVIL_SCRATCH_HEAP:
      return HeapBlockBytes(words, num_words);
    case CUVIL_SCRATCH_CONV2D:
      if (num_words != WordsOf<cuvil_uk_conv_params>() + 1) return -1;
      return Conv2dScratchBytes(ActiveTable(), ParamsFrom<cuvil_uk_conv_params>(words),
                                words[num_words - 1]);
    case CUVIL_SCRATCH_QDEPTHWISE2D:
      if (num_words != WordsOf<cuvil_uk_conv_params>() + 1) return -1;
      return QDepthwise2dScratchBytes(ActiveTable(), ParamsFrom<cuvil_uk_conv_params>(words));
    case CUVIL_SCRATCH_QCONV2D:
      if (num_words != WordsOf<cuvil_uk_qconv_params>() + 1) return -1;
      return QConv2dScratchBytes(ActiveQTable(), ParamsFrom<cuvil_uk_qconv_params>(words));
    case CUVIL_SCRATCH_MATMUL_NBITS:
      if (num_words != 3) return -1;
      return MatMulNbitsScratchBytes(words[0], words[1], words[2]);
    case CUVIL_SCRATCH_MAXPOOL2D:
      if (num_words != WordsOf<cuvil_uk_pool_params>() + 1) return -1;
      return MaxPool2dScratchBytes(ParamsFrom<cuvil_uk_pool_params>(words));
    default:
      return -1;
  }
}
