// Private: Triton's system shared memory extension — the regions clients register (a window of a
// POSIX shared memory object) and the bounds-checked copies inference makes in and out of them.
//
// A region is mapped once, at registration, and copies are memcpy through the mapping. A client may
// ftruncate the object after registering it, and an access to a mapping beyond the object's end
// raises SIGBUS, so every copy first checks the object still covers the window (fstat) and then
// runs under CopyCatchingBusErrors, which turns a truncation racing the copy into an error: no
// interleaving of client truncations and server copies can crash the server. (pread/pwrite, used
// before, were as safe but cost 3 ms for a 4.8 MB input, several times a memcpy.)
#ifndef CUVIL_SERVER_SRC_SHARED_MEMORY_REGISTRY_H_
#define CUVIL_SERVER_SRC_SHARED_MEMORY_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "recycled_buffers.h"

namespace cuvil {

// What a client registered under a region name. Plain data; thread-compatible.
struct SharedMemoryRegionStatus {
  std::string name;
  std::string key;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// One registered region: an open descriptor on the object and a mapping of the window of it.
// Immutable and thread-safe; the mapping and descriptor go when the last holder (registry or
// in-flight request) lets go, so unregistering never pulls the object from under a request.
class SharedMemoryRegion {
 public:
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const SharedMemoryRegionStatus& status() const { return status_; }

  // InvalidArgument naming `tensor` and the region unless [offset, offset + size) lies within the
  // window (overflow-checked). Touches nothing.
  absl::Status CheckRange(uint64_t offset, uint64_t size, const std::string& tensor) const;

  // Copies `size` bytes at `offset` within the window into `dst`. CheckRange's errors, and
  // InvalidArgument if the object no longer covers the window (the client shrank it) or the read
  // fails.
  absl::Status Read(uint64_t offset, uint64_t size, void* dst, const std::string& tensor) const;

  // Copies `size` bytes from `src` to `offset` within the window; errors as for Read.
  absl::Status Write(uint64_t offset, const void* src, uint64_t size,
                     const std::string& tensor) const;

 private:
  friend class SharedMemoryRegistry;
  SharedMemoryRegion(SharedMemoryRegionStatus status, int fd)
      : status_(std::move(status)), fd_(fd) {}
  // The object's window end (offset + byte_size) still within its current size.
  absl::Status CheckObjectCovers(const std::string& tensor) const;

  const SharedMemoryRegionStatus status_;
  const int fd_;
  // The mapping, from the page holding the window's first byte; null for an empty window.
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  uint8_t* window_ = nullptr;  // The window's first byte within the mapping.
};

// Bounds that keep one client from exhausting the server through shared memory.
struct SharedMemoryLimits {
  // Regions registered at once (each holds an open descriptor).
  size_t max_regions = 1024;
  // Bytes one request may copy in from shared memory, over all its inputs (the server sets its
  // max_request_bytes, so a region counts like the wire would).
  uint64_t max_request_input_bytes = uint64_t{64} << 20;
};

// The server's registered regions by name. Thread-safe.
class SharedMemoryRegistry {
 public:
  SharedMemoryRegistry() : SharedMemoryRegistry(SharedMemoryLimits{}) {}
  explicit SharedMemoryRegistry(SharedMemoryLimits limits);

  const SharedMemoryLimits& limits() const { return limits_; }

  // Where requests take the buffers they copy inputs from shared memory into: up to 8 idle
  // buffers of limits().max_request_input_bytes in all stay for the next requests.
  const std::shared_ptr<RecycledBuffers>& input_buffers() const { return input_buffers_; }

  // Opens the POSIX shared memory object `key` (shm_open, read-write) and registers the window
  // [offset, offset + byte_size) of it as `name`. InvalidArgument for an empty name or key, a key
  // with no such object, or a window beyond the object's size; AlreadyExists if `name` is taken;
  // ResourceExhausted when limits().max_regions are registered already.
  absl::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size);

  // Drops region `name` (every region when empty); a name not registered is not an error, as in
  // Triton. Requests already holding the region keep using it until they finish.
  void Unregister(const std::string& name);

  // The region `name`, or every region (by name) when empty. NotFound for an unknown name.
  absl::StatusOr<std::vector<SharedMemoryRegionStatus>> Status(const std::string& name) const;

  // The region `name` for a request to hold while it copies. InvalidArgument naming `tensor` and
  // the region when it is not registered.
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> Find(const std::string& name,
                                                                 const std::string& tensor) const;

 private:
  const SharedMemoryLimits limits_;
  const std::shared_ptr<RecycledBuffers> input_buffers_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const SharedMemoryRegion>> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_SHARED_MEMORY_REGISTRY_H_
