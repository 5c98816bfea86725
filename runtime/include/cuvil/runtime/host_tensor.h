// An owning, 64-byte aligned host tensor: the currency between tools, tests and compiled code.
#ifndef CUVIL_RUNTIME_HOST_TENSOR_H_
#define CUVIL_RUNTIME_HOST_TENSOR_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuvil/runtime/dtype.h"

namespace cuvil {

// Frees memory obtained from AlignedAlloc.
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t, AlignedFree>;

// Returns zero-filled memory aligned to 64 bytes (at least one byte is allocated).
AlignedBuffer AlignedAlloc(size_t bytes);

// Thread-compatible: const methods may be called concurrently.
class HostTensor {
 public:
  HostTensor() = default;
  // A zero-filled tensor.
  HostTensor(DType dtype, std::vector<int64_t> shape);

  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;
  HostTensor(const HostTensor& other);
  HostTensor& operator=(const HostTensor& other);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  size_t byte_size() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(data_.get());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data_.get());
  }

  // Element i converted to double (bool as 0/1); for comparisons and printing.
  double GetAsDouble(int64_t i) const;
  // Stores `v` as element i, converted like static_cast (bool: v != 0). i must be in range.
  void SetFromInt64(int64_t i, int64_t v);
  // "float32[2,3]".
  std::string TypeString() const;

 private:
  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> shape_;
  AlignedBuffer data_;
};

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_HOST_TENSOR_H_
