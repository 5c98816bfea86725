// Private: the checkpoint log of a model version's open sequences (issue 42). An append-only
// file of checksummed records, each a sequence's state after some step (or its end); on start
// the last good record of every sequence is its checkpoint. A torn or damaged record is skipped
// with a warning (the sequence then resumes from its previous record), never read as state.
#ifndef CUVIL_SERVER_SRC_SEQUENCE_LOG_H_
#define CUVIL_SERVER_SRC_SEQUENCE_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

// One sequence's checkpoint. Plain data.
struct SequenceRecord {
  std::string key;     // The batcher's key of the sequence id.
  bool ended = false;  // A tombstone: the sequence ended or expired.
  uint64_t steps = 0;  // Steps taken when the state was recorded.
  std::vector<std::shared_ptr<const HostTensor>> state;
};

// Thread-safe.
class SequenceLog {
 public:
  // Opens (creating, 0600, refusing a symlink) the log at `path` for `identity` (what the states
  // must fit: the model's state specs). The records it holds for that identity come back in
  // `*restored`, the last good one per sequence with ended ones left out; records of another
  // identity (the model's states changed) are dropped, and damaged ones skipped, each with a line
  // in `*warnings`. The file is then rewritten with just the restored records (temporary file +
  // rename) and kept open for appends. InvalidArgument / Internal when the file cannot be used.
  static absl::StatusOr<std::unique_ptr<SequenceLog>> Open(const std::string& path,
                                                           const std::string& identity,
                                                           std::vector<SequenceRecord>* restored,
                                                           std::vector<std::string>* warnings);
  ~SequenceLog();

  // Appends `record` with one write (records of concurrent appends never interleave; a failed
  // write is cut off again, so no torn record stays mid-file). When another build of the version
  // has replaced the file (a reload's compaction), appends go to the new file.
  absl::Status Append(const SequenceRecord& record);

  // True when the file has grown well past its live records (more than 64 MiB appended and four
  // times what the last compaction wrote): time to Compact.
  bool NeedsCompaction();
  // Replaces the file with just `live` (temporary file + rename) and appends to it from now on.
  absl::Status Compact(const std::vector<SequenceRecord>& live);

  // The identity a log is opened for: the states' names, types and shapes (`states`) and the
  // model's build (`build`, "model=ONNX_DIGEST;code=CODE_IDENTITY"). A log of another identity is
  // dropped with a warning saying which part differs.
  static std::string Identity(const std::string& states, const std::string& build);

  // The file's bytes for `identity` holding `records`, and their parse (for tests and the fuzzer):
  // every record that decodes and checks, in order, and a warning per damaged stretch.
  static std::string Encode(const std::string& identity,
                            const std::vector<SequenceRecord>& records);
  static std::vector<SequenceRecord> Decode(std::string_view file, const std::string& identity,
                                            std::vector<std::string>* warnings);
  // A record's bytes around `payload` (magic, length, checksum): lets the fuzzer reach the payload
  // decoder past the checksum.
  static std::string Frame(std::string_view payload);

 private:
  SequenceLog(std::string path, std::string identity, int fd, uint64_t live_bytes)
      : path_(std::move(path)), identity_(std::move(identity)), fd_(fd), live_bytes_(live_bytes) {}

  // Writes `bytes` as the whole of path_ (temporary file, fsync, rename): the file descriptor of
  // the new file, open for appends.
  static absl::StatusOr<int> Replace(const std::string& path, std::string_view bytes);
  // Reopens path_ when it is no longer the file fd_ writes (another build compacted it).
  void FollowPathLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const std::string identity_;
  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);
  uint64_t live_bytes_ ABSL_GUARDED_BY(mu_);          // Written by the last compaction.
  uint64_t appended_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Since then.
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_SEQUENCE_LOG_H_
