#include "patch_sandbox.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cuvil/format/model_header.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/dtype.h"
#include "cuvil/runtime/sanitizers.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/ExecutionEngine/Orc/CompileUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "patch_sandbox.pb.h"

extern char** environ;

namespace cuvil::jitcache_internal {
namespace {

namespace pb = ::cuvil::jitcache::v1;

constexpr uint32_t kMagic = 0x53565543;  // "CUVS"
constexpr size_t kMaxStderrBytes = 4096;
// The parent grows its reply buffer by at most this much ahead of the bytes that arrived.
constexpr size_t kReplyChunkBytes = size_t{1} << 20;
// The child's descriptors.
constexpr int kJobFd = 3;
constexpr int kWeightsFd = 4;
constexpr int kReplyFd = 5;

// The reply's header (patch_sandbox.h describes the layout).
struct Header {
  uint32_t magic = kMagic;
  int32_t ok = 0;  // 1: payload is the object code; 0: payload is an error message.
  int32_t probe_code = 0;
  uint32_t call_counts = 0;  // uint64 counts that follow the payload.
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(Header) == kSandboxReplyHeaderBytes, "no padding: the header is sent as is");

Header HeaderOf(bool ok, int32_t probe_code, size_t payload_bytes, size_t call_counts) {
  Header h;
  h.ok = ok ? 1 : 0;
  h.probe_code = probe_code;
  h.call_counts = static_cast<uint32_t>(call_counts);
  h.payload_bytes = payload_bytes;
  return h;
}

// The header at the front of `bytes` and the number of bytes it says follow it; DataLoss naming
// what is wrong when it is truncated or malformed.
absl::StatusOr<uint64_t> ReadReplyHeader(std::string_view bytes, Header* h) {
  if (bytes.size() < sizeof(Header)) {
    return absl::DataLossError(absl::StrCat("the sandbox's reply is truncated: ", bytes.size(),
                                            " bytes, shorter than its ", sizeof(Header),
                                            "-byte header"));
  }
  std::memcpy(h, bytes.data(), sizeof(Header));
  if (h->magic != kMagic) {
    return absl::DataLossError(
        absl::StrCat("the sandbox's reply has a bad magic number 0x", absl::Hex(h->magic)));
  }
  if (h->ok != 0 && h->ok != 1) {
    return absl::DataLossError(absl::StrCat("the sandbox's reply has ok = ", h->ok));
  }
  if (h->payload_bytes > kSandboxMaxPayloadBytes) {
    return absl::DataLossError(absl::StrCat("the sandbox's reply declares ", h->payload_bytes,
                                            " payload bytes (at most ", kSandboxMaxPayloadBytes,
                                            ")"));
  }
  if (h->call_counts > kSandboxMaxCallCounts) {
    return absl::DataLossError(absl::StrCat("the sandbox's reply declares ", h->call_counts,
                                            " call counts (at most ", kSandboxMaxCallCounts, ")"));
  }
  return h->payload_bytes + uint64_t{h->call_counts} * sizeof(uint64_t);
}

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes before `deadline`; false on EOF, error or timeout (`*timed_out` set).
bool ReadAll(int fd, void* data, size_t n, std::chrono::steady_clock::time_point deadline,
             bool* timed_out) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      *timed_out = true;
      return false;
    }
    pollfd pfd{fd, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) continue;
    ssize_t got = read(fd, p, n);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// Reads the child's reply into `reply`: its header, then as many bytes as a well-formed header
// declares (none after a malformed one: DecodeSandboxReply says what is wrong with it), growing
// `reply` only as the bytes arrive. False when the descriptor ends or fails, or the deadline
// passes (`*timed_out` set), before that.
bool ReadReply(int fd, std::chrono::steady_clock::time_point deadline, bool* timed_out,
               std::string* reply) {
  reply->resize(sizeof(Header));
  if (!ReadAll(fd, reply->data(), reply->size(), deadline, timed_out)) return false;
  const std::optional<uint64_t> body = SandboxReplyBodyBytes(*reply);
  if (!body.has_value()) return true;
  for (uint64_t left = *body; left > 0;) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, kReplyChunkBytes));
    const size_t at = reply->size();
    reply->resize(at + chunk);
    if (!ReadAll(fd, reply->data() + at, chunk, deadline, timed_out)) return false;
    left -= chunk;
  }
  return true;
}

std::string StderrTail(int fd) {
  std::string text;
  off_t size = lseek(fd, 0, SEEK_END);
  if (size <= 0) return text;
  off_t from = size > static_cast<off_t>(kMaxStderrBytes) ? size - kMaxStderrBytes : 0;
  text.resize(static_cast<size_t>(size - from));
  ssize_t got = pread(fd, text.data(), text.size(), from);
  text.resize(got > 0 ? static_cast<size_t>(got) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// A memfd holding `n` bytes of `data`, at descriptor 10 or above (so that the child's dup2 onto
// 0..5 never overwrites another source), close-on-exec. -1 with errno on failure.
int MemfdWith(const char* name, const void* data, size_t n) {
  int raw = memfd_create(name, MFD_CLOEXEC);
  if (raw < 0) return -1;
  int fd = fcntl(raw, F_DUPFD_CLOEXEC, 10);
  close(raw);
  if (fd < 0) return -1;
  if (n > 0 && !WriteAll(fd, data, n)) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int HighFd(int fd) {
  if (fd < 0) return fd;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return high;
}

struct Fds {
  std::vector<int> fds;
  ~Fds() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
};

bool Executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

// ---- The child ----

[[noreturn]] void ChildReply(bool ok, int32_t probe_code, const std::string& payload,
                             const std::vector<uint64_t>& calls = {}) {
  const Header h = HeaderOf(ok, probe_code, payload.size(), calls.size());
  bool sent = WriteAll(kReplyFd, &h, sizeof(h)) &&
              WriteAll(kReplyFd, payload.data(), payload.size()) &&
              WriteAll(kReplyFd, calls.data(), calls.size() * sizeof(uint64_t));
  _exit(sent ? 0 : 4);
}

[[noreturn]] void ChildFail(const std::string& what, const absl::Status& status) {
  ChildReply(false, 0, absl::StrCat(what, ": ", status.message()));
}

// LLVM's fatal errors end the child at once, with LLVM's message on its stderr.
void ChildFatalError(void*, const char* reason, bool) {
  const std::string text = absl::StrCat("LLVM ERROR: ", reason, "\n");
  (void)!write(2, text.data(), text.size());
  _exit(3);
}

void ChildBadAlloc(void*, const char*, bool) {
  const char text[] = "out of memory in the patch sandbox\n";
  (void)!write(2, text, sizeof(text) - 1);
  _exit(3);
}

bool ReadWholeFd(int fd, std::string* out) {
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 0) return false;
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    ssize_t n = pread(fd, out->data() + done, out->size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Object code of the patch IR for this host. Exits the child on an error.
std::string CompilePatch(const std::string& ir) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> module = llvm::parseAssemblyString(ir, diag, ctx);
  if (!module) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    diag.print("patch", os, /*ShowColors=*/false);
    ChildReply(false, 0, absl::StrCat("does not parse: ", os.str()));
  }
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) ChildReply(false, 0, llvm::toString(jtmb.takeError()));
  auto tm = jtmb->createTargetMachine();
  if (!tm) ChildReply(false, 0, llvm::toString(tm.takeError()));
  module->setDataLayout((*tm)->createDataLayout());
  module->setTargetTriple((*tm)->getTargetTriple().str());
  llvm::orc::SimpleCompiler compile(**tm);
  auto object = compile(*module);
  if (!object) ChildReply(false, 0, llvm::toString(object.takeError()));
  return std::string((*object)->getBufferStart(), (*object)->getBufferSize());
}

std::vector<std::pair<int, std::string>> SlotsOf(
    const google::protobuf::RepeatedPtrField<pb::SandboxSlot>& slots) {
  std::vector<std::pair<int, std::string>> out;
  for (const auto& s : slots) out.emplace_back(s.slot(), s.symbol());
  return out;
}

absl::Status JobDamaged(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("the sandbox's job is damaged: ", what));
}

absl::Status SlotOutOfRange() {
  return absl::DataLossError("the sandbox's job names a kernel slot out of range");
}

// Why tensor `t` of a probe set is not what the child can build (empty when it is).
std::string TensorDamage(const pb::SandboxTensor& t) {
  const auto dtype = static_cast<DType>(t.dtype());
  const int element_bytes = DTypeSize(dtype);
  if (element_bytes == 0) return absl::StrCat("unknown dtype ", t.dtype());
  // As HostTensor::num_elements multiplies: every partial product must fit.
  int64_t elements = 1;
  for (int64_t d : t.shape()) {
    if (d < 0) return absl::StrCat("negative dim ", d);
    if (__builtin_mul_overflow(elements, d, &elements)) return "its shape's size overflows";
  }
  if (dtype == DType::kString) {
    if (!t.data().empty()) return "a string tensor with numeric data";
    if (elements != t.strings_size()) {
      return absl::StrCat(t.strings_size(), " strings for ", elements, " elements");
    }
    return "";
  }
  if (t.strings_size() != 0) return absl::StrCat("strings in a ", DTypeName(dtype), " tensor");
  const size_t have = t.data().size();
  if (static_cast<uint64_t>(elements) > have / static_cast<size_t>(element_bytes) ||
      static_cast<size_t>(elements) * static_cast<size_t>(element_bytes) != have) {
    return absl::StrCat(have, " data bytes for ", elements, " ", DTypeName(dtype), " elements");
  }
  return "";
}

}  // namespace

std::string EncodeSandboxReply(bool ok, int32_t probe_code, std::string_view payload,
                               const std::vector<uint64_t>& calls) {
  const Header h = HeaderOf(ok, probe_code, payload.size(), calls.size());
  std::string out;
  out.reserve(sizeof(h) + payload.size() + calls.size() * sizeof(uint64_t));
  out.append(reinterpret_cast<const char*>(&h), sizeof(h));
  out.append(payload);
  out.append(reinterpret_cast<const char*>(calls.data()), calls.size() * sizeof(uint64_t));
  return out;
}

std::optional<uint64_t> SandboxReplyBodyBytes(std::string_view header) {
  Header h;
  absl::StatusOr<uint64_t> body = ReadReplyHeader(header, &h);
  if (!body.ok()) return std::nullopt;
  return *body;
}

absl::StatusOr<SandboxResult> DecodeSandboxReply(std::string_view bytes,
                                                 size_t expected_call_counts) {
  Header h;
  absl::StatusOr<uint64_t> body = ReadReplyHeader(bytes, &h);
  if (!body.ok()) return body.status();
  if (bytes.size() - sizeof(Header) != *body) {
    return absl::DataLossError(absl::StrCat("the sandbox's reply is ", bytes.size(),
                                            " bytes; its header declares ",
                                            sizeof(Header) + *body));
  }
  const std::string_view payload = bytes.substr(sizeof(Header), h.payload_bytes);
  const std::string_view counts = bytes.substr(sizeof(Header) + h.payload_bytes);
  if (h.ok != 1) {
    if (h.call_counts != 0) {
      return absl::DataLossError(
          absl::StrCat("the sandbox's refusal carries ", h.call_counts, " call counts"));
    }
    // The reason goes into an admin response and the log: LLVM's diagnostics fit in far less.
    constexpr size_t kMaxReasonBytes = 16 << 10;
    const bool cut = payload.size() > kMaxReasonBytes;
    return absl::FailedPreconditionError(absl::StrCat(
        "patch refused by the sandbox: ",
        absl::string_view(payload.data(), std::min(payload.size(), kMaxReasonBytes)),
        cut ? absl::StrCat(" ... (", payload.size() - kMaxReasonBytes, " more bytes)") : ""));
  }
  if (payload.empty()) return absl::DataLossError("the sandbox's reply has no object code");
  if (h.call_counts != expected_call_counts) {
    return absl::DataLossError(absl::StrCat("the sandbox's reply carries ", h.call_counts,
                                            " call counts for ", expected_call_counts,
                                            " probed kernels"));
  }
  SandboxResult result;
  result.object_code.assign(payload.data(), payload.size());
  result.probe_code = h.probe_code;
  result.kernel_calls.resize(h.call_counts);
  if (!counts.empty()) std::memcpy(result.kernel_calls.data(), counts.data(), counts.size());
  return result;
}

std::optional<size_t> SandboxJobCallCounts(std::string_view job) {
  using google::protobuf::internal::WireFormatLite;
  if (job.size() > static_cast<size_t>(INT_MAX)) return std::nullopt;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(job.data()),
                                            static_cast<int>(job.size()));
  constexpr uint32_t kSlotsTag = WireFormatLite::MakeTag(pb::SandboxJob::kPatchSlotsFieldNumber,
                                                         WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  constexpr uint32_t kProbeSetsTag = WireFormatLite::MakeTag(
      pb::SandboxJob::kProbeSetsFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  size_t slots = 0;
  bool probes = false;
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    // Fields of another wire type than declared are unknown fields to a parser, as here.
    if (tag == kSlotsTag) ++slots;
    if (tag == kProbeSetsTag) probes = true;
    if (!WireFormatLite::SkipField(&in, tag)) return std::nullopt;
  }
  if (!in.ConsumedEntireMessage()) return std::nullopt;
  return probes ? slots : 0;
}

absl::Status CheckSandboxJob(const pb::SandboxJob& job, size_t weights_bytes) {
  if (job.weights_bytes() != weights_bytes) {
    return absl::DataLossError(absl::StrCat("the sandbox could not read the version's weights (",
                                            weights_bytes, " bytes; the job names ",
                                            job.weights_bytes(), ")"));
  }
  if (auto model = DecodeModelHeader(job.model(), job.object_code(), WeightsBlob()); !model.ok()) {
    return JobDamaged(model.status().message());
  }
  const int kernels = job.model().kernels_size();  // DecodeModelHeader: indices 0..kernels-1.
  auto in_range = [kernels](int32_t slot) { return slot >= 0 && slot < kernels; };
  for (int i = 0; i < job.layers_size(); ++i) {
    const pb::SandboxLayer& layer = job.layers(i);
    if (!pb::SandboxLayer::Kind_IsValid(layer.kind())) {
      return JobDamaged(absl::StrCat("layer ", i, " has the unknown kind ", layer.kind()));
    }
    for (const pb::SandboxSlot& s : layer.slots()) {
      if (!in_range(s.slot())) return SlotOutOfRange();
    }
  }
  if (job.patch_slots().empty()) return JobDamaged("the patch names no kernel slot");
  std::vector<bool> patched(static_cast<size_t>(kernels), false);
  for (const pb::SandboxSlot& s : job.patch_slots()) {
    if (!in_range(s.slot())) return SlotOutOfRange();
    if (patched[static_cast<size_t>(s.slot())]) {
      return JobDamaged(absl::StrCat("the patch names kernel slot ", s.slot(), " twice"));
    }
    patched[static_cast<size_t>(s.slot())] = true;
  }
  for (int i = 0; i < job.probe_sets_size(); ++i) {
    const pb::SandboxInputSet& set = job.probe_sets(i);
    for (int j = 0; j < set.tensors_size(); ++j) {
      if (std::string why = TensorDamage(set.tensors(j)); !why.empty()) {
        return absl::DataLossError(absl::StrCat("the sandbox's probe input is damaged: set ", i,
                                                ", tensor ", j, ": ", why));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<HostTensor> SandboxProbeInputs(const pb::SandboxInputSet& set) {
  std::vector<HostTensor> inputs;
  for (const pb::SandboxTensor& t : set.tensors()) {
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    const auto dtype = static_cast<DType>(t.dtype());
    if (dtype == DType::kString) {
      inputs.push_back(
          HostTensor::Strings(std::move(shape), {t.strings().begin(), t.strings().end()}));
      continue;
    }
    HostTensor h(dtype, std::move(shape));
    if (h.byte_size() > 0) std::memcpy(h.data(), t.data().data(), h.byte_size());
    inputs.push_back(std::move(h));
  }
  return inputs;
}

std::string SandboxProgram() {
  if (const char* env = std::getenv("CUVIL_PATCH_SANDBOX"); env != nullptr && *env != '\0') {
    return Executable(env) ? std::string(env) : std::string();
  }
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    std::string dir(self);
    dir.resize(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
    std::string beside = absl::StrCat(dir, "/cuvil-patch-sandbox");
    if (Executable(beside)) return beside;
  }
#ifdef CUVIL_PATCH_SANDBOX_BUILD_PATH
  if (Executable(CUVIL_PATCH_SANDBOX_BUILD_PATH)) return CUVIL_PATCH_SANDBOX_BUILD_PATH;
#endif
  return std::string();
}

absl::StatusOr<SandboxResult> RunInSandbox(const SandboxJob& job) {
  const auto start = std::chrono::steady_clock::now();
  const std::string program = SandboxProgram();
  if (program.empty()) {
    return absl::FailedPreconditionError(
        "patch refused: the patch sandbox program cuvil-patch-sandbox is not beside this "
        "executable (install it there, or set CUVIL_PATCH_SANDBOX to its path)");
  }
  const std::optional<size_t> expected_calls = SandboxJobCallCounts(job.job);
  if (!expected_calls.has_value()) {
    return absl::InternalError("patch sandbox: the job is not a serialized SandboxJob");
  }
  Fds owned;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::UnavailableError(
        absl::StrCat("patch sandbox: cannot create a pipe: ", std::strerror(errno)));
  }
  const int reply_r = HighFd(fds[0]);
  const int reply_w = HighFd(fds[1]);
  owned.fds = {reply_r, reply_w};
  const int err_fd = MemfdWith("cuvil-patch-sandbox-stderr", nullptr, 0);
  const int job_fd = MemfdWith("cuvil-patch-sandbox-job", job.job.data(), job.job.size());
  const int weights_fd = MemfdWith("cuvil-patch-sandbox-weights", job.weights, job.weights_bytes);
  owned.fds.insert(owned.fds.end(), {err_fd, job_fd, weights_fd});
  if (reply_r < 0 || reply_w < 0 || err_fd < 0 || job_fd < 0 || weights_fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("patch sandbox: cannot pass the job to the child: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  posix_spawn_file_actions_adddup2(&actions, job_fd, kJobFd);
  posix_spawn_file_actions_adddup2(&actions, weights_fd, kWeightsFd);
  posix_spawn_file_actions_adddup2(&actions, reply_w, kReplyFd);
  posix_spawn_file_actions_addclosefrom_np(&actions, kReplyFd + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);    // The server may block signals in its threads.
  posix_spawnattr_setsigdefault(&attr, &all);  // No handler of the server's survives the exec.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string parent_arg = absl::StrCat("--parent=", getpid());
  std::vector<char*> argv = {const_cast<char*>(program.c_str()),
                             const_cast<char*>(parent_arg.c_str()), nullptr};
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    return absl::UnavailableError(
        absl::StrCat("patch sandbox: cannot start ", program, ": ", std::strerror(spawned)));
  }
  close(reply_w);
  owned.fds[1] = -1;
  const auto deadline =
      start + std::chrono::milliseconds(static_cast<int64_t>(job.timeout_seconds * 1000));
  bool timed_out = false;
  std::string reply;
  const bool complete = ReadReply(reply_r, deadline, &timed_out, &reply);
  absl::StatusOr<SandboxResult> decoded = absl::DataLossError("no complete reply");
  if (complete) decoded = DecodeSandboxReply(reply, *expected_calls);
  reply.clear();
  reply.shrink_to_fit();
  // The object code or the child's refusal; else the child's end says what went wrong.
  const bool got = decoded.ok() || !absl::IsDataLoss(decoded.status());
  // Reap the child: it exits right after its reply; a child that sent none is killed at the
  // deadline.
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = timed_out || !got;
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    usleep(1000);
  }
  const std::string diagnostics = StderrTail(err_fd);
  const std::string tail = diagnostics.empty() ? "" : absl::StrCat(": ", diagnostics);
  if (decoded.ok()) {
    decoded->child_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return decoded;
  }
  if (got) return decoded.status();
  if (timed_out) {
    return absl::FailedPreconditionError(absl::StrCat(
        "patch refused by the sandbox: compiling and running it once took longer than ",
        job.timeout_seconds, " s (killed)", tail));
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return absl::FailedPreconditionError(
        absl::StrCat("patch refused by the sandbox: the child crashed with signal ", sig, " (",
                     strsignal(sig), ") while compiling or first running the patch", tail));
  }
  // A complete reply that does not decode (a patch writing to the reply descriptor, say).
  const std::string damage =
      complete ? absl::StrCat(" after a damaged reply (", decoded.status().message(), ")") : "";
  return absl::FailedPreconditionError(
      absl::StrCat("patch refused by the sandbox: the child exited with status ",
                   WIFEXITED(status) ? WEXITSTATUS(status) : -1, damage, tail));
}

int SandboxChild::Main(int argc, char** argv) {
  int64_t parent = 0;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--parent=") || !absl::SimpleAtoi(arg, &parent)) parent = 0;
  }
  if (parent <= 0) {
    std::fprintf(stderr,
                 "cuvil-patch-sandbox: started by cuvil-server to compile and first run a hot "
                 "patch; not for use by hand (usage: cuvil-patch-sandbox --parent=PID with the "
                 "job on descriptors 3 and 4)\n");
    return 2;
  }
  // A crash of the patch must end the child by its signal, which the server names; sanitizer
  // runtimes install handlers that would turn it into an exit status instead.
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, SIG_DFL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != static_cast<pid_t>(parent)) _exit(6);  // The server died before the line above.
  rlimit core{0, 0};  // A crashing patch must not write the version's weights to disk.
  setrlimit(RLIMIT_CORE, &core);
  llvm::install_fatal_error_handler(ChildFatalError, nullptr);
  llvm::install_bad_alloc_error_handler(ChildBadAlloc, nullptr);
  try {
    std::string bytes;
    pb::SandboxJob job;
    if (!ReadWholeFd(kJobFd, &bytes) || !job.ParseFromString(bytes)) {
      ChildReply(false, 0, "the sandbox could not read its job");
    }
    bytes.clear();
    bytes.shrink_to_fit();
    struct stat st;
    if (fstat(kWeightsFd, &st) != 0 || st.st_size < 0) {
      ChildReply(false, 0, "the sandbox could not read the version's weights");
    }
    // Nothing below trusts the job further than this.
    if (absl::Status s = CheckSandboxJob(job, static_cast<size_t>(st.st_size)); !s.ok()) {
      ChildReply(false, 0, std::string(s.message()));
    }
#if !defined(CUVIL_ASAN) && !defined(CUVIL_TSAN)
    {
      // LLVM and one run of the version need far less; a patch that allocates without bound
      // fails here instead of taking the host's memory.
      const rlim_t limit = (rlim_t{2} << 30) + job.ByteSizeLong() + job.weights_bytes();
      rlimit as{limit, limit};
      setrlimit(RLIMIT_AS, &as);
    }
#endif
    WeightsBlob weights;
    if (job.weights_bytes() > 0) {
      void* p = mmap(nullptr, job.weights_bytes(), PROT_READ, MAP_PRIVATE, kWeightsFd, 0);
      if (p == MAP_FAILED) ChildReply(false, 0, "the sandbox could not map the weights");
      const size_t n = job.weights_bytes();
      std::shared_ptr<const void> owner(p, [n](const void* q) { munmap(const_cast<void*>(q), n); });
      weights = WeightsBlob(owner, static_cast<const uint8_t*>(p), n, /*read_only=*/true);
    }
    auto model = DecodeModelHeader(job.model(), job.object_code(), weights);
    if (!model.ok()) ChildFail("the sandbox's job is damaged", model.status());
    job.clear_object_code();
    auto engine = JitEngine::Create();
    if (!engine.ok()) ChildFail("the sandbox cannot start a JIT", engine.status());
    // The server's layer symbols ("<kernel>.patch<id>") arrive in the job: the child's own
    // layers (the call counters) take ids the server never reaches.
    (*engine)->StartPatchIdsAt(uint64_t{1} << 63);
    const CompiledModel base = *model;  // Shares the weights; recompile layers copy it.
    auto loaded = (*engine)->Load("sandbox", *std::move(model));
    if (!loaded.ok()) ChildFail("the sandbox cannot load the version", loaded.status());
    LoadedModel& version = **loaded;
    // The stack as the server has it, oldest layer first.
    for (const pb::SandboxLayer& layer : job.layers()) {
      absl::StatusOr<std::shared_ptr<PreparedPatch>> prepared;
      if (layer.kind() == pb::SandboxLayer::RECOMPILE) {
        CompiledModel recompiled = base;
        recompiled.object_code = layer.code();
        prepared = version.patches().PrepareRecompilePatch(
            recompiled, {layer.functions().begin(), layer.functions().end()}, "");
      } else if (layer.kind() == pb::SandboxLayer::OBJECT) {
        prepared = version.patches().PrepareObjectPatch(layer.code(), SlotsOf(layer.slots()));
      } else {
        prepared =
            version.patches().PrepareIrPatch(layer.code(), {}, {}, PatchSandboxLimits{0, false});
      }
      if (!prepared.ok()) ChildFail("cannot rebuild the version's patch stack", prepared.status());
      auto id = version.patches().CommitPatch(*std::move(prepared), "sandbox");
      if (!id.ok()) ChildFail("cannot rebuild the version's patch stack", id.status());
    }
    std::string object = CompilePatch(job.patch_ir());
    auto patch = version.patches().PrepareObjectPatch(object, SlotsOf(job.patch_slots()));
    if (!patch.ok()) ChildFail("the patch does not link", patch.status());
    int32_t probe_code = 0;
    std::vector<uint64_t> calls;
    if (job.probe_sets_size() > 0) {
      // The patch goes on top, timing wrappers on its kernels above it: each set runs the
      // patched code once (one thread) and the wrappers count its calls.
      std::vector<std::string> kernels;
      for (const pb::SandboxSlot& s : job.patch_slots()) {
        kernels.push_back(version.model().kernels[s.slot()].symbol);  // CheckSandboxJob: in range.
      }
      if (auto id = version.patches().CommitPatch(*patch, "sandbox"); !id.ok()) {
        ChildFail("cannot apply the patch in the sandbox", id.status());
      }
      auto counting = version.patches().PrepareProfilePatch(0, kernels);
      if (!counting.ok()) ChildFail("cannot count the patch's calls", counting.status());
      auto counting_id = version.patches().CommitPatch(*counting, "sandbox");
      if (!counting_id.ok()) ChildFail("cannot count the patch's calls", counting_id.status());
      for (const pb::SandboxInputSet& set : job.probe_sets()) {
        if (!version.Run(SandboxProbeInputs(set)).ok()) probe_code = 1;
      }
      auto report = version.patches().ProfileReport(*counting_id);
      if (!report.ok()) ChildFail("cannot count the patch's calls", report.status());
      for (const std::string& k : kernels) {
        uint64_t n = 0;
        for (const KernelProfile& p : *report) {
          if (p.function == k) n = p.calls;
        }
        calls.push_back(n);
      }
    }
    ChildReply(true, probe_code, object, calls);
  } catch (...) {
    const char text[] = "the patch sandbox threw an exception\n";
    (void)!write(2, text, sizeof(text) - 1);
  }
  _exit(5);
}

}  // namespace cuvil::jitcache_internal
