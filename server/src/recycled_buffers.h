// Private: large, short-lived request buffers kept for the next request instead of freed.
#ifndef CUVIL_SERVER_SRC_RECYCLED_BUFFERS_H_
#define CUVIL_SERVER_SRC_RECYCLED_BUFFERS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cuvil {

// Recycles the buffers requests copy their inputs into. The server's allocator policy gives every
// block over 128 KiB its own mapping (allocator_policy.h), so without this each request of a few
// MB would map, fault in (one trap per page), and unmap its copy: 3 ms for resnet18's 4.8 MB
// batch, more than the copy itself. Thread-safe; buffers may outlive the pool.
class RecycledBuffers {
 public:
  // Keeps at most `max_buffers` idle buffers of at most `max_idle_bytes` in all.
  RecycledBuffers(size_t max_buffers, size_t max_idle_bytes);

  // Returns the buffer to its pool, if the pool still exists and has room, or frees it.
  class Return {
   public:
    Return() = default;
    Return(std::weak_ptr<RecycledBuffers> pool, size_t capacity)
        : pool_(std::move(pool)), capacity_(capacity) {}
    void operator()(uint8_t* data) const;

   private:
    std::weak_ptr<RecycledBuffers> pool_;
    size_t capacity_ = 0;
  };
  using Buffer = std::unique_ptr<uint8_t, Return>;

  // A 64-byte aligned buffer of at least `bytes` bytes (contents unspecified) that comes back to
  // `pool` when dropped: an idle one that fits (the smallest at most twice `bytes`) or a new one.
  static Buffer Acquire(const std::shared_ptr<RecycledBuffers>& pool, size_t bytes);

  // Idle buffers and their total capacity (for tests).
  size_t idle_buffers() const;
  size_t idle_bytes() const;
  // Bytes of every buffer Acquire has allocated fresh (not recycled) so far (for tests).
  size_t allocated_bytes() const { return allocated_bytes_.load(std::memory_order_relaxed); }

  ~RecycledBuffers();

 private:
  struct Idle {
    uint8_t* data;
    size_t capacity;
  };
  // Takes `data` back; false when it does not fit the limits (the caller frees it).
  bool Keep(uint8_t* data, size_t capacity);

  const size_t max_buffers_;
  const size_t max_idle_bytes_;
  mutable absl::Mutex mu_;
  std::vector<Idle> idle_ ABSL_GUARDED_BY(mu_);
  size_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> allocated_bytes_{0};
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_RECYCLED_BUFFERS_H_
