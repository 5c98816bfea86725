// One load-generator client's system shared memory (Triton's extension): a POSIX shared memory
// object holding the request's inputs, then a slot for each output, split into the regions the
// client registers with the server.
#ifndef CUVIL_TOOLS_CUVIL_PERF_CLIENT_SHARED_MEMORY_H_
#define CUVIL_TOOLS_CUVIL_PERF_CLIENT_SHARED_MEMORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "infer_client.h"

namespace cuvil::perf {

// A window of the object registered under `name`.
struct ClientRegion {
  std::string name;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// Thread-compatible (one client uses it). The object is unlinked on destruction.
class ClientSharedMemory {
 public:
  // Creates a fresh object (unique per process and call), sized for `inputs` and `num_outputs`
  // slots of `output_bytes`, and copies the inputs in. Internal on a failed shm_open/ftruncate.
  static absl::StatusOr<std::unique_ptr<ClientSharedMemory>> Create(
      const std::vector<InputTensor>& inputs, size_t num_outputs, uint64_t output_bytes);
  ~ClientSharedMemory();
  ClientSharedMemory(const ClientSharedMemory&) = delete;
  ClientSharedMemory& operator=(const ClientSharedMemory&) = delete;

  const std::string& key() const { return key_; }
  const std::vector<ClientRegion>& inputs() const { return inputs_; }  // Same order as given.
  const std::vector<ClientRegion>& outputs() const { return outputs_; }

  // Calls `fn` on every region, inputs first, stopping at (and returning) the first error: how
  // each protocol's client registers them.
  absl::Status ForEachRegion(const std::function<absl::Status(const ClientRegion&)>& fn) const;

 private:
  ClientSharedMemory() = default;
  std::string key_;
  int fd_ = -1;
  void* base_ = nullptr;
  size_t size_ = 0;
  std::vector<ClientRegion> inputs_;
  std::vector<ClientRegion> outputs_;
};

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_CLIENT_SHARED_MEMORY_H_
