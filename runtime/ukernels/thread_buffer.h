// Private: the per-thread scratch buffers the microkernels reuse across calls.
#ifndef CUVIL_RUNTIME_UKERNELS_THREAD_BUFFER_H_
#define CUVIL_RUNTIME_UKERNELS_THREAD_BUFFER_H_

#include <cstddef>
#include <cstdint>

namespace cuvil::uk {

// A growable 64-byte aligned float buffer. While an ahead-of-time call's scratch region is
// installed (call_scratch.h) its blocks come from that region and last until the microkernel
// returns; otherwise from the heap, kept between calls and freed when the thread exits. Trivially
// destructible, so that a thread_local one costs nothing to touch (no destructor registration,
// which would allocate). Defined out of line (thread_buffer.cc, built without ISA flags) so that
// the AVX2 files using it never provide the copy generic code links to. Thread-compatible: each
// thread owns its own, which must live as long as the thread (callers keep one per slot in a
// thread_local array, so buffers live at once never alias).
class ThreadBuffer {
 public:
  constexpr ThreadBuffer() = default;
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;

  // At least `floats` floats. *fresh (if given) is set when the block is not the one the last
  // call returned (its contents are then unspecified); contents survive otherwise. Aborts when the
  // heap is out of memory: generated code has nothing to unwind to.
  float* Get(size_t floats, bool* fresh = nullptr);
  // At least `count` int64 values (the same storage as Get; a buffer holds one kind at a time).
  int64_t* GetIndices(size_t count);

  // Frees the heap block (at thread exit) and returns the next buffer of the thread's list of
  // buffers holding one.
  ThreadBuffer* ReleaseHeap();

 private:
  float* GetFromHeap(size_t floats, bool* fresh);

  float* heap_data_ = nullptr;
  size_t heap_capacity_ = 0;
  ThreadBuffer* next_listed_ = nullptr;  // this thread's buffers that hold a heap block
  bool listed_ = false;
  float* region_data_ = nullptr;
  size_t region_capacity_ = 0;
  uint64_t region_generation_ = 0;
  bool last_from_region_ = false;
};

// Bytes every thread's heap buffers hold together (they are kept between executions).
// Thread-safe.
int64_t ThreadBufferBytes();

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_THREAD_BUFFER_H_
