// The scratch the microkernels take per call, for sizing an ahead-of-time call's scratch region
// (runtime/aot: NAME_arena_bytes adds the largest kernel's scratch to the memory plan, so that
// NAME_run allocates nothing). The compiler records one site per microkernel call and per heap
// block of generated code (CompiledModel::scratch_sites), with the words below as dims.
#ifndef CUVIL_RUNTIME_UKERNEL_SCRATCH_H_
#define CUVIL_RUNTIME_UKERNEL_SCRATCH_H_

#include <cstdint>

extern "C" {

// What takes scratch, and the words that size it.
enum cuvil_scratch_kind : int32_t {
  CUVIL_SCRATCH_HEAP = 0,          // one cuvil_rt_alloc block: byte counts that add up to its size
  CUVIL_SCRATCH_CONV2D = 1,        // cuvil_uk_conv2d: cuvil_uk_conv_params (17 words), batch
  CUVIL_SCRATCH_QDEPTHWISE2D = 2,  // cuvil_uk_qdepthwise2d: cuvil_uk_conv_params (17), batch
  CUVIL_SCRATCH_QCONV2D = 3,       // cuvil_uk_qconv2d: cuvil_uk_qconv_params (20), batch
  CUVIL_SCRATCH_MATMUL_NBITS = 4,  // cuvil_uk_matmul_nbits: rows, k_dim, block
  CUVIL_SCRATCH_MAXPOOL2D = 5,     // cuvil_uk_maxpool2d: cuvil_uk_pool_params (12), planes
};

// Bytes of scratch region (blocks with their 64-byte headers) that one call of `kind` with these
// words takes at most on the calling thread, with the active microkernel tiers and the calling
// thread's intra-op threads; -1 for an unknown kind, a wrong word count or an overflow.
// Reentrant.
int64_t cuvil_uk_scratch_bytes(int32_t kind, const int64_t* words, int32_t num_words);
}

#endif  // CUVIL_RUNTIME_UKERNEL_SCRATCH_H_
