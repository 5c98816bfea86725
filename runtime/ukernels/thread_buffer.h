// Private: the per-thread scratch buffers the microkernels reuse across calls.
#ifndef CUVIL_RUNTIME_UKERNELS_THREAD_BUFFER_H_
#define CUVIL_RUNTIME_UKERNELS_THREAD_BUFFER_H_

#include <cstddef>
#include <cstdint>

namespace cuvil::uk {

// A growable 64-byte aligned float buffer. Defined out of line (thread_buffer.cc, built without
// ISA flags) so that the AVX2 files using it never provide the copy generic code links to.
// Thread-compatible: each thread owns its own (callers keep one per slot in a thread_local array,
// so buffers live at once never alias).
class ThreadBuffer {
 public:
  ThreadBuffer() = default;
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;
  ~ThreadBuffer();

  // At least `floats` floats; earlier contents are lost when it grows. Aborts when out of memory:
  // generated code has nothing to unwind to.
  float* Get(size_t floats);
  // At least `count` int64 values (the same storage as Get; a buffer holds one kind at a time).
  int64_t* GetIndices(size_t count);

 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

// Bytes every thread's buffers hold together (they are kept between executions). Thread-safe.
int64_t ThreadBufferBytes();

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_THREAD_BUFFER_H_
