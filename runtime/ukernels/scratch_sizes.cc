// cuvil_uk_scratch_bytes: one entry point over every microkernel's scratch sizing.
#include "scratch_sizes.h"

#include <cstring>

#include "call_scratch.h"
#include "cuvil/runtime/ukernel_scratch.h"
#include "qdepthwise_direct.h"

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

#if defined(CUVIL_AOT_BARE_METAL)
// A microcontroller library links with --gc-sections, but a call from this switch would still
// pull each kernel's whole object file (the float convolution, Winograd, pooling...) into every
// firmware. Weak references do not: a kernel's sizer resolves only when the model's code calls
// that kernel (which lives in the same object), and a scratch site of a kernel that is not linked
// cannot exist.
int64_t Conv2dScratchBytes(const Table& t, const cuvil_uk_conv_params& p, int64_t batch)
    __attribute__((weak));
const Table& ActiveTable() __attribute__((weak));
int64_t QConv2dScratchBytes(const QTable& t, const cuvil_uk_qconv_params& p) __attribute__((weak));
const QTable& ActiveQTable() __attribute__((weak));
int64_t MatMulNbitsScratchBytes(int64_t rows, int64_t k_dim, int64_t block) __attribute__((weak));
int64_t MaxPool2dScratchBytes(const cuvil_uk_pool_params& p) __attribute__((weak));
#define CUVIL_LINKED(f) (&(f) != nullptr)
#else
#define CUVIL_LINKED(f) true
#endif

}  // namespace cuvil::uk

extern "C" int64_t cuvil_uk_scratch_bytes(int32_t kind, const int64_t* words, int32_t num_words) {
  using namespace cuvil::uk;
  if (num_words < 0 || (num_words > 0 && words == nullptr)) return -1;
  switch (kind) {
    case CUVIL_SCRATCH_HEAP:
      return HeapBlockBytes(words, num_words);
    case CUVIL_SCRATCH_CONV2D:
      if (num_words != WordsOf<cuvil_uk_conv_params>() + 1) return -1;
      if (!CUVIL_LINKED(Conv2dScratchBytes) || !CUVIL_LINKED(ActiveTable)) return -1;
      return Conv2dScratchBytes(ActiveTable(), ParamsFrom<cuvil_uk_conv_params>(words),
                                words[num_words - 1]);
    case CUVIL_SCRATCH_QDEPTHWISE2D:
      if (num_words != WordsOf<cuvil_uk_conv_params>() + 1) return -1;
#if defined(CUVIL_AOT_BARE_METAL)
      return QDepthwise2dDirectScratchBytes(ParamsFrom<cuvil_uk_conv_params>(words));
#else
      return QDepthwise2dScratchBytes(ActiveTable(), ParamsFrom<cuvil_uk_conv_params>(words));
#endif
    case CUVIL_SCRATCH_QCONV2D:
      if (num_words != WordsOf<cuvil_uk_qconv_params>() + 1) return -1;
      if (!CUVIL_LINKED(QConv2dScratchBytes) || !CUVIL_LINKED(ActiveQTable)) return -1;
      return QConv2dScratchBytes(ActiveQTable(), ParamsFrom<cuvil_uk_qconv_params>(words));
    case CUVIL_SCRATCH_MATMUL_NBITS:
      if (num_words != 3 || !CUVIL_LINKED(MatMulNbitsScratchBytes)) return -1;
      return MatMulNbitsScratchBytes(words[0], words[1], words[2]);
    case CUVIL_SCRATCH_MAXPOOL2D:
      if (num_words != WordsOf<cuvil_uk_pool_params>() + 1) return -1;
      if (!CUVIL_LINKED(MaxPool2dScratchBytes)) return -1;
      return MaxPool2dScratchBytes(ParamsFrom<cuvil_uk_pool_params>(words));
    default:
      return -1;
  }
}
