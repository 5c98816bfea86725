#include "thread_buffer.h"

#include <cstdlib>

namespace cuvil::uk {

ThreadBuffer::~ThreadBuffer() { std::free(data_); }

float* ThreadBuffer::Get(size_t floats) {
  if (floats > capacity_) {
    std::free(data_);
    capacity_ = (floats + 15) / 16 * 16;
    data_ = static_cast<float*>(std::aligned_alloc(64, capacity_ * sizeof(float)));
    if (data_ == nullptr) std::abort();
  }
  return data_;
}

}  // namespace cuvil::uk
