#include "recycled_buffers.h"

#include <cstdlib>

#include "cuvil/runtime/prefault.h"

namespace cuvil {

RecycledBuffers::RecycledBuffers(size_t max_buffers, size_t max_idle_bytes)
    : max_buffers_(max_buffers), max_idle_bytes_(max_idle_bytes) {}

RecycledBuffers::~RecycledBuffers() {
  for (const Idle& b : idle_) std::free(b.data);
}

void RecycledBuffers::Return::operator()(uint8_t* data) const {
  if (data == nullptr) return;
  if (auto pool = pool_.lock(); pool && pool->Keep(data, capacity_)) return;
  std::free(data);
}

RecycledBuffers::Buffer RecycledBuffers::Acquire(const std::shared_ptr<RecycledBuffers>& pool,
                                                 size_t bytes) {
  if (bytes > SIZE_MAX / 2) std::abort();  // Callers bound request sizes long before this.
  size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  {
    absl::MutexLock lock(&pool->mu_);
    size_t best = pool->idle_.size();
    for (size_t i = 0; i < pool->idle_.size(); ++i) {
      size_t c = pool->idle_[i].capacity;
      if (c >= rounded && c <= 2 * rounded &&
          (best == pool->idle_.size() || c < pool->idle_[best].capacity)) {
        best = i;
      }
    }
    if (best != pool->idle_.size()) {
      Idle found = pool->idle_[best];
      pool->idle_.erase(pool->idle_.begin() + static_cast<ptrdiff_t>(best));
      pool->idle_bytes_ -= found.capacity;
      return Buffer(found.data, Return(pool, found.capacity));
    }
  }
  pool->allocated_bytes_.fetch_add(rounded, std::memory_order_relaxed);
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) std::abort();  // Out of memory is not recoverable here.
  // Fresh pages: one call faults them in instead of a trap per page during the copy.
  PrefaultForWrite(p, rounded);
  return Buffer(static_cast<uint8_t*>(p), Return(pool, rounded));
}

bool RecycledBuffers::Keep(uint8_t* data, size_t capacity) {
  absl::MutexLock lock(&mu_);
  if (idle_.size() >= max_buffers_ || capacity > max_idle_bytes_ - idle_bytes_) return false;
  idle_.push_back({data, capacity});
  idle_bytes_ += capacity;
  return true;
}

size_t RecycledBuffers::idle_buffers() const {
  absl::MutexLock lock(&mu_);
  return idle_.size();
}

size_t RecycledBuffers::idle_bytes() const {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

}  // namespace cuvil
