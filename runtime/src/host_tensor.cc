#include "cuvil/runtime/host_tensor.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/runtime/half.h"
#include "cuvil/runtime/prefault.h"
#include "cuvil/runtime/string_ops.h"

namespace cuvil {

namespace {

// 64-byte aligned memory of at least `bytes` (rounded up to 64), aborting when there is none.
void* AllocateAligned(size_t bytes, size_t* rounded_out) {
  // Rounding must not wrap a huge request into a tiny allocation.
  if (bytes > SIZE_MAX - 63) std::abort();
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) std::abort();  // Out of memory is not recoverable here.
  *rounded_out = rounded;
  return p;
}

}  // namespace

AlignedBuffer AlignedAllocUninitialized(size_t bytes) {
  size_t rounded = 0;
  return AlignedBuffer(static_cast<uint8_t*>(AllocateAligned(bytes, &rounded)));
}

AlignedBuffer AlignedAlloc(size_t bytes) {
  size_t rounded = 0;
  void* p = AllocateAligned(bytes, &rounded);
  // A large buffer (a model's weights while it compiles) is usually fresh memory: fault its pages
  // in with one call rather than one trap per 4 KiB page (a hint; older kernels refuse it).
  if (rounded >= (size_t{1} << 20)) PrefaultForWrite(p, rounded);
  std::memset(p, 0, rounded);
  return AlignedBuffer(static_cast<uint8_t*>(p));
}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)), data_(AlignedAlloc(byte_size())) {}

HostTensor HostTensor::Deferred(DType dtype, std::vector<int64_t> shape,
                                std::shared_ptr<const DeferredBytes> source) {
  HostTensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.deferred_ = std::make_shared<Deferral>();
  t.deferred_->source = std::move(source);
  t.deferred_->bytes = t.byte_size();
  return t;
}

HostTensor HostTensor::Strings(std::vector<int64_t> shape, std::vector<std::string> values) {
  HostTensor t(DType::kString, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.num_elements()) std::abort();  // Contract.
  auto owned = std::make_shared<const std::vector<std::string>>(std::move(values));
  auto* views = t.data_as<CuvilString>();
  for (size_t i = 0; i < owned->size(); ++i) {
    views[i] = CuvilString{(*owned)[i].data(), static_cast<int64_t>((*owned)[i].size())};
  }
  t.strings_ = std::move(owned);
  return t;
}

std::string_view HostTensor::string_at(int64_t i) const {
  const CuvilString& s = data_as<CuvilString>()[i];
  return s.size <= 0 ? std::string_view() : std::string_view(s.data, static_cast<size_t>(s.size));
}

std::vector<std::string> HostTensor::strings() const {
  std::vector<std::string> out;
  if (dtype_ != DType::kString) return out;
  for (int64_t i = 0; i < num_elements(); ++i) out.emplace_back(string_at(i));
  return out;
}

const uint8_t* HostTensor::Deferral::Get() {
  std::call_once(once, [this] {
    data = AlignedAlloc(bytes);
    if (!source->Read(data.get())) std::memset(data.get(), 0, bytes);
    read.store(true, std::memory_order_release);
  });
  return data.get();
}

void HostTensor::Own() {
  const uint8_t* bytes = deferred_->Get();
  if (deferred_.use_count() == 1) {
    data_ = std::move(deferred_->data);
  } else {
    data_ = AlignedAlloc(deferred_->bytes);
    std::memcpy(data_.get(), bytes, deferred_->bytes);
  }
  deferred_.reset();
}

bool HostTensor::deferred() const {
  return deferred_ != nullptr && !deferred_->read.load(std::memory_order_acquire);
}

bool HostTensor::CopyTo(uint8_t* dst) const {
  if (deferred()) return deferred_->source->Read(dst);
  std::memcpy(dst, data(), byte_size());
  return !read_failed();
}

HostTensor::HostTensor(const HostTensor& other)
    : dtype_(other.dtype_),
      shape_(other.shape_),
      deferred_(other.deferred_),
      strings_(other.strings_) {
  if (deferred_ != nullptr) return;  // Copies share the bytes, read once.
  data_ = AlignedAlloc(other.byte_size());
  if (other.data_) std::memcpy(data_.get(), other.data_.get(), byte_size());
}

HostTensor& HostTensor::operator=(const HostTensor& other) {
  if (this != &other) *this = HostTensor(other);
  return *this;
}

int64_t HostTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

double HostTensor::GetAsDouble(int64_t i) const {
  const uint8_t* p = data();
  switch (dtype_) {
    case DType::kFloat32:
      return reinterpret_cast<const float*>(p)[i];
    case DType::kFloat64:
      return reinterpret_cast<const double*>(p)[i];
    case DType::kUInt8:
      return p[i];
    case DType::kBool:
      return p[i] != 0;
    case DType::kInt8:
      return reinterpret_cast<const int8_t*>(p)[i];
    case DType::kUInt16:
      return reinterpret_cast<const uint16_t*>(p)[i];
    case DType::kInt16:
      return reinterpret_cast<const int16_t*>(p)[i];
    case DType::kInt32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case DType::kUInt32:
      return reinterpret_cast<const uint32_t*>(p)[i];
    case DType::kInt64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
    case DType::kUInt64:
      return static_cast<double>(reinterpret_cast<const uint64_t*>(p)[i]);
    case DType::kFloat16:
      return HalfToFloat(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16:
      return BFloat16ToFloat(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::kString:
    case DType::kUndefined:
      return 0;
  }
  return 0;
}

void HostTensor::SetFromInt64(int64_t i, int64_t v) {
  uint8_t* p = data();
  switch (dtype_) {
    case DType::kFloat32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      reinterpret_cast<double*>(p)[i] = static_cast<double>(v);
      break;
    case DType::kUInt8:
      p[i] = static_cast<uint8_t>(v);
      break;
    case DType::kBool:
      p[i] = v != 0;
      break;
    case DType::kInt8:
      reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DType::kUInt16:
      reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v);
      break;
    case DType::kInt16:
      reinterpret_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      break;
    case DType::kInt32:
      reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::kUInt32:
      reinterpret_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v);
      break;
    case DType::kInt64:
      reinterpret_cast<int64_t*>(p)[i] = v;
      break;
    case DType::kUInt64:
      reinterpret_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v);
      break;
    case DType::kFloat16:
      reinterpret_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      reinterpret_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DType::kString:
    case DType::kUndefined:
      break;
  }
}

std::string HostTensor::TypeString() const {
  return absl::StrCat(DTypeName(dtype_), "[", absl::StrJoin(shape_, ","), "]");
}

}  // namespace cuvil
