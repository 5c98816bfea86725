#include "thread_buffer.h"

#include <cstdlib>

namespace cuvil::uk {
namespace {

// Bytes all ThreadBuffers hold (builtins, not <atomic>: the AOT cross builds lack the headers).
int64_t held_bytes = 0;

void Count(int64_t bytes) { __atomic_add_fetch(&held_bytes, bytes, __ATOMIC_RELAXED); }

int64_t BytesOf(size_t floats) { return static_cast<int64_t>(floats * sizeof(float)); }

}  // namespace

ThreadBuffer::~ThreadBuffer() {
  Count(-BytesOf(capacity_));
  std::free(data_);
}

float* ThreadBuffer::Get(size_t floats) {
  if (floats > capacity_) {
    std::free(data_);
    Count(-BytesOf(capacity_));
    capacity_ = (floats + 15) / 16 * 16;
    data_ = static_cast<float*>(std::aligned_alloc(64, capacity_ * sizeof(float)));
    if (data_ == nullptr) std::abort();
    Count(BytesOf(capacity_));
  }
  return data_;
}

int64_t* ThreadBuffer::GetIndices(size_t count) {
  static_assert(sizeof(int64_t) == 2 * sizeof(float));
  // The block comes from aligned_alloc and is only ever read as int64 while it serves indices.
  return reinterpret_cast<int64_t*>(Get(2 * count));
}

int64_t ThreadBufferBytes() { return __atomic_load_n(&held_bytes, __ATOMIC_RELAXED); }

}  // namespace cuvil::uk
