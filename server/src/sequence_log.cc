#include "sequence_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cuvil/runtime/tensor_size.h"

namespace cuvil {
namespace {

constexpr std::string_view kFileMagic = "CUVSEQ1\n";
constexpr uint32_t kRecordMagic = 0x31514553;  // "SEQ1" little-endian.
constexpr size_t kRecordHeader = 16;           // magic, payload length, checksum.
constexpr uint32_t kMaxRank = 16;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Reads fixed-size values and byte runs from a payload, failing (and staying failed) past its end.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  template <typename T>
  bool Get(T* v) {
    if (!ok_ || data_.size() - pos_ < sizeof(T)) return ok_ = false;
    std::memcpy(v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (!ok_ || data_.size() - pos_ < n) return ok_ = false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return ok_ && pos_ == data_.size(); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

std::string EncodePayload(const SequenceRecord& r) {
  std::string p;
  Put<uint8_t>(&p, r.ended ? 1 : 0);
  Put<uint32_t>(&p, static_cast<uint32_t>(r.key.size()));
  p.append(r.key);
  Put<uint64_t>(&p, r.steps);
  Put<uint32_t>(&p, static_cast<uint32_t>(r.state.size()));
  for (const auto& tensor : r.state) {
    const HostTensor& t = *tensor;
    Put<int32_t>(&p, static_cast<int32_t>(t.dtype()));
    Put<uint32_t>(&p, static_cast<uint32_t>(t.shape().size()));
    for (int64_t d : t.shape()) Put<int64_t>(&p, d);
    Put<uint64_t>(&p, t.byte_size());
    p.append(reinterpret_cast<const char*>(t.data()), t.byte_size());
  }
  return p;
}

bool DecodePayload(std::string_view payload, SequenceRecord* r) {
  Reader in(payload);
  uint8_t ended = 0;
  uint32_t key_size = 0, tensors = 0;
  std::string_view key;
  if (!in.Get(&ended) || ended > 1 || !in.Get(&key_size) || !in.Bytes(key_size, &key) ||
      !in.Get(&r->steps) || !in.Get(&tensors)) {
    return false;
  }
  r->ended = ended == 1;
  r->key = std::string(key);
  for (uint32_t i = 0; i < tensors; ++i) {
    int32_t dtype = 0;
    uint32_t rank = 0;
    if (!in.Get(&dtype) || !in.Get(&rank) || rank > kMaxRank) return false;
    const DType type = static_cast<DType>(dtype);
    if (DTypeSize(type) == 0 || type == DType::kString) return false;
    std::vector<int64_t> shape(rank);
    for (int64_t& d : shape) {
      if (!in.Get(&d) || d < 0) return false;
    }
    uint64_t bytes = 0;
    std::string_view data;
    absl::StatusOr<size_t> expected = CheckedTensorBytes(type, shape);
    if (!expected.ok() || !in.Get(&bytes) || bytes != *expected || !in.Bytes(bytes, &data)) {
      return false;
    }
    auto t = std::make_shared<HostTensor>(type, shape);
    if (bytes > 0) std::memcpy(t->data(), data.data(), bytes);
    r->state.push_back(std::move(t));
  }
  return in.done();
}

std::string FrameBytes(std::string_view payload) {
  std::string out;
  Put<uint32_t>(&out, kRecordMagic);
  Put<uint32_t>(&out, static_cast<uint32_t>(payload.size()));
  Put<uint64_t>(&out, XXH64(payload.data(), payload.size(), 0));
  out.append(payload);
  return out;
}

std::string EncodeRecord(const SequenceRecord& r) { return FrameBytes(EncodePayload(r)); }

std::string FileHeader(const std::string& identity) {
  std::string out(kFileMagic);
  Put<uint32_t>(&out, static_cast<uint32_t>(identity.size()));
  out.append(identity);
  Put<uint64_t>(&out, XXH64(identity.data(), identity.size(), 0));
  return out;
}

// The "key value" lines of an identity (the first builds wrote "states;STATES" alone).
std::map<std::string, std::string> IdentityFields(absl::string_view identity) {
  std::map<std::string, std::string> fields;
  if (!absl::StartsWith(identity, "states ")) {
    absl::ConsumePrefix(&identity, "states;");
    fields["states"] = std::string(identity);
    return fields;
  }
  for (absl::string_view line : absl::StrSplit(identity, '\n')) {
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos) continue;
    fields[std::string(line.substr(0, space))] = std::string(line.substr(space + 1));
  }
  return fields;
}

// Why a log whose header is not `identity`'s cannot be used: other states, another model file,
// another build of the code generator, or a header that does not read.
std::string MismatchReason(std::string_view file, const std::string& identity) {
  Reader in(file.substr(kFileMagic.size()));
  uint32_t size = 0;
  std::string_view theirs;
  uint64_t sum = 0;
  if (!in.Get(&size) || !in.Bytes(size, &theirs) || !in.Get(&sum) ||
      XXH64(theirs.data(), theirs.size(), 0) != sum) {
    return "the log's header is damaged";
  }
  std::map<std::string, std::string> mine = IdentityFields(identity);
  std::map<std::string, std::string> old =
      IdentityFields(absl::string_view(theirs.data(), theirs.size()));
  if (old["states"] != mine["states"]) {
    return "the log was written for other model states (names, types or shapes changed)";
  }
  if (old["build"].empty()) {
    return "the log was written by a build that did not record the model's build identity";
  }
  // "model=DIGEST;code=IDENTITY": say which part changed.
  std::map<std::string, std::string> was, is;
  for (auto [map, text] : {std::pair{&was, old["build"]}, std::pair{&is, mine["build"]}}) {
    for (absl::string_view part : absl::StrSplit(text, ';')) {
      const size_t eq = part.find('=');
      if (eq != absl::string_view::npos) {
        (*map)[std::string(part.substr(0, eq))] = std::string(part.substr(eq + 1));
      }
    }
  }
  if (was["model"] != is["model"]) {
    return absl::StrCat("the log was written for another model file (ONNX digest ", was["model"],
                        "; this build's is ", is["model"], ")");
  }
  return absl::StrCat("the log was written by another build of the model (code ", was["code"],
                      "; this build's is ", is["code"], ")");
}

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(
          absl::StrCat("writing sequence checkpoints to ", path, ": ", std::strerror(errno)));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

std::string SequenceLog::Frame(std::string_view payload) { return FrameBytes(payload); }

std::string SequenceLog::Identity(const std::string& states, const std::string& build) {
  return absl::StrCat("states ", states, "\nbuild ", build);
}

std::string SequenceLog::Encode(const std::string& identity,
                                const std::vector<SequenceRecord>& records) {
  std::string out = FileHeader(identity);
  for (const SequenceRecord& r : records) out.append(EncodeRecord(r));
  return out;
}

std::vector<SequenceRecord> SequenceLog::Decode(std::string_view file, const std::string& identity,
                                                std::vector<std::string>* warnings) {
  std::vector<SequenceRecord> records;
  const std::string header = FileHeader(identity);
  if (file.empty()) return records;
  if (file.substr(0, kFileMagic.size()) != kFileMagic) {
    warnings->push_back("not a sequence checkpoint log: every record dropped");
    return records;
  }
  if (file.substr(0, header.size()) != header) {
    warnings->push_back(
        absl::StrCat(MismatchReason(file, identity), ": every sequence in it dropped"));
    return records;
  }
  size_t pos = header.size();
  size_t damaged_from = std::string_view::npos;
  auto note_damage = [&](size_t end) {
    if (damaged_from == std::string_view::npos) return;
    warnings->push_back(absl::StrCat("skipped ", end - damaged_from, " damaged bytes at offset ",
                                     damaged_from,
                                     ": the sequences they held resume from their previous "
                                     "checkpoint"));
    damaged_from = std::string_view::npos;
  };
  while (pos < file.size()) {
    SequenceRecord r;
    bool good = false;
    if (file.size() - pos >= kRecordHeader) {
      uint32_t magic = 0, length = 0;
      uint64_t sum = 0;
      std::memcpy(&magic, file.data() + pos, 4);
      std::memcpy(&length, file.data() + pos + 4, 4);
      std::memcpy(&sum, file.data() + pos + 8, 8);
      if (magic == kRecordMagic && file.size() - pos - kRecordHeader >= length) {
        std::string_view payload = file.substr(pos + kRecordHeader, length);
        if (XXH64(payload.data(), payload.size(), 0) == sum && DecodePayload(payload, &r)) {
          good = true;
          note_damage(pos);
          records.push_back(std::move(r));
          pos += kRecordHeader + length;
        }
      }
    }
    if (!good) {
      // Resynchronise on the next record's magic.
      if (damaged_from == std::string_view::npos) damaged_from = pos;
      ++pos;
    }
  }
  note_damage(file.size());
  return records;
}

absl::StatusOr<int> SequenceLog::Replace(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write sequence checkpoints ", tmp, ": ", std::strerror(errno)));
  }
  absl::Status written = WriteAll(fd, bytes, tmp);
  if (written.ok() && ::fsync(fd) != 0) {
    written = absl::InternalError(absl::StrCat("fsync of ", tmp, ": ", std::strerror(errno)));
  }
  ::close(fd);
  if (!written.ok() || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return written.ok() ? absl::InternalError(absl::StrCat("cannot replace ", path, ": ", why))
                        : written;
  }
  fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return fd;
}

absl::StatusOr<std::unique_ptr<SequenceLog>> SequenceLog::Open(
    const std::string& path, const std::string& identity, std::vector<SequenceRecord>* restored,
    std::vector<std::string>* warnings) {
  restored->clear();
  std::string contents;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      char buf[1 << 16];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof(buf))) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          // Compacting a partial read would lose the rest: refuse instead.
          const std::string why = std::strerror(errno);
          ::close(fd);
          return absl::InternalError(
              absl::StrCat("cannot read sequence checkpoints ", path, ": ", why));
        }
        contents.append(buf, static_cast<size_t>(n));
      }
      ::close(fd);
    } else if (errno != ENOENT) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read sequence checkpoints ", path, ": ", std::strerror(errno)));
    }
  }
  // The last record of each sequence is its checkpoint; ended sequences are gone.
  std::map<std::string, SequenceRecord> last;
  for (SequenceRecord& r : Decode(contents, identity, warnings)) last[r.key] = std::move(r);
  for (auto& [key, r] : last) {
    if (!r.ended) restored->push_back(std::move(r));
  }
  // Compaction: the file holds just the restored records from here on.
  const std::string bytes = Encode(identity, *restored);
  absl::StatusOr<int> fd = Replace(path, bytes);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<SequenceLog>(new SequenceLog(path, identity, *fd, bytes.size()));
}

SequenceLog::~SequenceLog() {
  absl::MutexLock lock(&mu_);
  if (fd_ >= 0) ::close(fd_);
}

void SequenceLog::FollowPathLocked() {
  struct stat open_file{}, named{};
  if (::fstat(fd_, &open_file) != 0) return;
  if (::stat(path_.c_str(), &named) == 0 && named.st_ino == open_file.st_ino &&
      named.st_dev == open_file.st_dev) {
    return;
  }
  const int fd =
      ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;  // Keep writing where we were; the next append tries again.
  ::close(fd_);
  fd_ = fd;
}

absl::Status SequenceLog::Append(const SequenceRecord& record) {
  const std::string bytes = EncodeRecord(record);
  absl::MutexLock lock(&mu_);
  FollowPathLocked();
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  // One write per record (O_APPEND): a kill leaves at most a torn last record, which Decode
  // skips; a failed write (a full disk) is cut off so later records do not follow a torn one.
  absl::Status s = WriteAll(fd_, bytes, path_);
  if (!s.ok()) {
    if (end >= 0) (void)::ftruncate(fd_, end);
    return s;
  }
  appended_bytes_ += bytes.size();
  return absl::OkStatus();
}

bool SequenceLog::NeedsCompaction() {
  absl::MutexLock lock(&mu_);
  constexpr uint64_t kMinAppended = uint64_t{64} << 20;
  return appended_bytes_ > kMinAppended && appended_bytes_ > 4 * live_bytes_;
}

absl::Status SequenceLog::Compact(const std::vector<SequenceRecord>& live) {
  const std::string bytes = Encode(identity_, live);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<int> fd = Replace(path_, bytes);
  if (!fd.ok()) return fd.status();
  ::close(fd_);
  fd_ = *fd;
  live_bytes_ = bytes.size();
  appended_bytes_ = 0;
  return absl::OkStatus();
}

}  // namespace cuvil
