// An owning, 64-byte aligned host tensor: the currency between tools, tests and compiled code.
#ifndef CUVIL_RUNTIME_HOST_TENSOR_H_
#define CUVIL_RUNTIME_HOST_TENSOR_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
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

// Returns memory aligned to 64 bytes whose contents are indeterminate (at least one byte is
// allocated), its pages neither zeroed nor faulted in: for scratch that is always written
// before it is read (arenas, gather buffers), where zeroing a buffer sized for the largest batch
// costs a model's load tens of milliseconds and its resident memory for batches never seen.
AlignedBuffer AlignedAllocUninitialized(size_t bytes);

// Where a deferred tensor's bytes come from (a large initializer left in its model file until
// something reads it). Thread-safe.
class DeferredBytes {
 public:
  virtual ~DeferredBytes() = default;
  // Copies the bytes to `dst` (the tensor's byte_size()). False when they cannot be read any more
  // (the file changed or shrank since it was opened); the failure is remembered (failed()).
  virtual bool Read(uint8_t* dst) const = 0;
  // True once a Read failed.
  virtual bool failed() const = 0;
};

// Thread-compatible: const methods may be called concurrently (a deferred tensor's first data()
// reads its bytes once, whichever thread asks first).
class HostTensor {
 public:
  HostTensor() = default;
  // A zero-filled tensor.
  HostTensor(DType dtype, std::vector<int64_t> shape);
  // A tensor whose bytes stay in `source` until first read: data() reads them (zeros when the
  // read fails; source->failed() then tells), CopyTo copies them without keeping a copy.
  static HostTensor Deferred(DType dtype, std::vector<int64_t> shape,
                             std::shared_ptr<const DeferredBytes> source);
  // A string tensor (DType::kString) owning `values` (one per element, row-major): its bytes are
  // CuvilString views (string_ops.h) of them, which copies of the tensor share.
  static HostTensor Strings(std::vector<int64_t> shape, std::vector<std::string> values);

  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;
  HostTensor(const HostTensor& other);
  HostTensor& operator=(const HostTensor& other);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t num_elements() const;
  size_t byte_size() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }
  uint8_t* data() {
    if (deferred_ != nullptr) Own();
    return data_.get();
  }
  const uint8_t* data() const { return deferred_ != nullptr ? deferred_->Get() : data_.get(); }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data());
  }
  // True while the bytes of a deferred tensor have not been read into memory.
  bool deferred() const;
  // Copies the byte_size() bytes to `dst`; a deferred tensor not read yet reads them straight
  // from its source without keeping them. False when that read fails.
  bool CopyTo(uint8_t* dst) const;
  // True when a deferred tensor's bytes could not be read (data() then holds zeros).
  bool read_failed() const { return deferred_ != nullptr && deferred_->source->failed(); }

  // Element i of a string tensor (empty for a zero-filled one); i must be in range.
  std::string_view string_at(int64_t i) const;
  // A string tensor's elements copied out (empty for other dtypes).
  std::vector<std::string> strings() const;

  // Element i converted to double (bool as 0/1, strings 0); for comparisons and printing.
  double GetAsDouble(int64_t i) const;
  // Stores `v` as element i, converted like static_cast (bool: v != 0). i must be in range.
  void SetFromInt64(int64_t i, int64_t v);
  // "float32[2,3]".
  std::string TypeString() const;

 private:
  // The bytes of a deferred tensor, read on first use and shared by its copies.
  struct Deferral {
    std::shared_ptr<const DeferredBytes> source;
    size_t bytes = 0;
    std::once_flag once;
    AlignedBuffer data;  // Set once `once` ran.
    std::atomic<bool> read{false};
    const uint8_t* Get();
  };
  // Takes a private, writable copy of a deferred tensor's bytes.
  void Own();

  DType dtype_ = DType::kUndefined;
  std::vector<int64_t> shape_;
  AlignedBuffer data_;
  std::shared_ptr<Deferral> deferred_;  // Set for a deferred tensor (data_ is then null).
  // A string tensor's own strings, which the views in data_ point into (immutable, shared).
  std::shared_ptr<const std::vector<std::string>> strings_;
};

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_HOST_TENSOR_H_
