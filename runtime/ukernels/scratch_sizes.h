// Private: each microkernel's scratch, sized by the same planning code the kernel runs (see
// cuvil/runtime/ukernel_scratch.h). Region bytes on the calling thread; -1 on overflow. All
// reentrant.
#ifndef CUVIL_RUNTIME_UKERNELS_SCRATCH_SIZES_H_
#define CUVIL_RUNTIME_UKERNELS_SCRATCH_SIZES_H_

#include <cstdint>

#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

namespace cuvil::uk {

// cuvil_uk_conv2d for `batch` images (conv.cc).
int64_t Conv2dScratchBytes(const Table& t, const cuvil_uk_conv_params& p, int64_t batch);
// cuvil_uk_qdepthwise2d, any batch (conv.cc).
int64_t QDepthwise2dScratchBytes(const Table& t, const cuvil_uk_conv_params& p);
// cuvil_uk_qconv2d, any batch (qgemm.cc).
int64_t QConv2dScratchBytes(const QTable& t, const cuvil_uk_qconv_params& p);
// cuvil_uk_matmul_nbits (matmul_nbits.cc).
int64_t MatMulNbitsScratchBytes(int64_t rows, int64_t k_dim, int64_t block);
// cuvil_uk_maxpool2d, any plane count (pool.cc).
int64_t MaxPool2dScratchBytes(const cuvil_uk_pool_params& p);

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_SCRATCH_SIZES_H_
