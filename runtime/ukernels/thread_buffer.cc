#include "thread_buffer.h"

#include <cstdlib>

namespace cuvil::uk {
namespace {

// Bytes all ThreadBuffers hold (builtins, not <atomic>: the AOT cross builds lack the headers).
int64_t held_bytes = 0;

void Count(size_t floats, bool add) {
  const auto bytes = static_cast<int64_t>(floats * sizeof(float));
  if (add) {
    __atomic_add_fetch(&held_bytes, bytes, __ATOMIC_RELAXED);
  } else {
    __atomic_sub_fetch(&held_bytes, bytes, __ATOMIC_RELAXED);
  }
}

}  // namespace

ThreadBuffer::~ThreadBuffer() {
  Count(capacity_, false);
  std::free(data_);
}

float* ThreadBuffer::Get(size_t floats) {
  if (floats > capacity_) {
    std::free(data_);
    Count(capacity_, false);
    capacity_ = (floats + 15) / 16 * 16;
    data_ = static_cast<float*>(std::aligned_alloc(64, capacity_ * sizeof(float)));
    if (data_ == nullptr) std::abort();
    Count(capacity_, true);
  }
  return data_;
}

int64_t ThreadBufferBytes() { return __atomic_load_n(&held_bytes, __ATOMIC_RELAXED); }

}  // namespace cuvil::uk
