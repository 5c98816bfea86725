#include "patch_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/runtime_symbols.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/ExecutionEngine/Orc/CompileUtils.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace cuvil::jitcache_internal {
namespace {

constexpr uint32_t kMagic = 0x53565543;  // "CUVS"
constexpr uint64_t kMaxObjectBytes = uint64_t{256} << 20;
constexpr size_t kMaxStderrBytes = 4096;

struct Header {
  uint32_t magic = kMagic;
  int32_t ok = 0;  // 1: payload is the object code; 0: payload is an error message.
  int32_t probe_code = 0;
  uint32_t reserved = 0;
  uint64_t payload_bytes = 0;
};

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

[[noreturn]] void ChildReply(int fd, bool ok, int32_t probe_code, const std::string& payload) {
  Header h;
  h.ok = ok ? 1 : 0;
  h.probe_code = probe_code;
  h.payload_bytes = payload.size();
  bool sent = WriteAll(fd, &h, sizeof(h)) && WriteAll(fd, payload.data(), payload.size());
  _exit(sent ? 0 : 4);
}

std::string LlvmMessage(llvm::Error err) { return llvm::toString(std::move(err)); }

// LLVM's fatal errors end the child at once (no atexit handlers or static destructors of the
// server's image run in it), with LLVM's message on the child's stderr.
void ChildFatalError(void*, const char* reason, bool) {
  const std::string text = absl::StrCat("LLVM ERROR: ", reason, "\n");
  (void)!write(2, text.data(), text.size());
  _exit(3);
}

void ChildBadAlloc(void*, const char* reason, bool) {
  const char text[] = "out of memory in the patch sandbox\n";
  (void)!write(2, text, sizeof(text) - 1);
  (void)reason;
  _exit(3);
}

// The child: compile, link, probe, reply. Never returns.
[[noreturn]] void ChildWork(const SandboxJob& job, int fd) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> module = llvm::parseAssemblyString(job.ir, diag, ctx);
  if (!module) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    diag.print("patch", os, /*ShowColors=*/false);
    ChildReply(fd, false, 0, absl::StrCat("does not parse: ", os.str()));
  }
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) ChildReply(fd, false, 0, LlvmMessage(jtmb.takeError()));
  auto tm = jtmb->createTargetMachine();
  if (!tm) ChildReply(fd, false, 0, LlvmMessage(tm.takeError()));
  module->setDataLayout((*tm)->createDataLayout());
  module->setTargetTriple((*tm)->getTargetTriple().str());
  llvm::orc::SimpleCompiler compile(**tm);
  auto object = compile(*module);
  if (!object) ChildReply(fd, false, 0, LlvmMessage(object.takeError()));
  std::string code((*object)->getBufferStart(), (*object)->getBufferSize());
  int32_t probe_code = 0;
  if (job.probe) {
    auto jit = llvm::orc::LLJITBuilder().create();
    if (!jit) ChildReply(fd, false, 0, LlvmMessage(jit.takeError()));
    auto& es = (*jit)->getExecutionSession();
    llvm::orc::JITDylib& jd = (*jit)->getMainJITDylib();
    llvm::orc::SymbolMap symbols;
    for (const RuntimeSymbol& s : RuntimeSymbols()) {
      symbols[es.intern(s.name)] = {
          llvm::orc::ExecutorAddr::fromPtr(s.address),
          llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
    }
    symbols[es.intern(job.weights_symbol)] = {llvm::orc::ExecutorAddr::fromPtr(job.weights),
                                              llvm::JITSymbolFlags::Exported};
    if (auto err = jd.define(llvm::orc::absoluteSymbols(std::move(symbols)))) {
      ChildReply(fd, false, 0, LlvmMessage(std::move(err)));
    }
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        (*jit)->getDataLayout().getGlobalPrefix());
    if (!process) ChildReply(fd, false, 0, LlvmMessage(process.takeError()));
    jd.addGenerator(std::move(*process));
    if (auto err = (*jit)->addObjectFile(jd, llvm::MemoryBuffer::getMemBufferCopy(code, "patch"))) {
      ChildReply(fd, false, 0, LlvmMessage(std::move(err)));
    }
    std::vector<void*> table = job.table;
    for (size_t i = 0; i < job.symbols.size(); ++i) {
      auto addr = (*jit)->lookup(jd, job.symbols[i]);
      if (!addr) ChildReply(fd, false, 0, LlvmMessage(addr.takeError()));
      table[static_cast<size_t>(job.slots[i])] = addr->toPtr<void*>();
    }
    probe_code = job.probe(table.data());
  }
  ChildReply(fd, true, probe_code, code);
}

// The child's entry: it owns nothing of the server's (no descriptors but the reply pipe and
// stdio, no signal handlers), dies with its parent, and no exception ever unwinds into the
// server's frames above the fork.
[[noreturn]] void ChildMain(const SandboxJob& job, int fd, pid_t parent) noexcept {
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTERM, SIGINT, SIGPIPE}) {
    signal(sig, SIG_DFL);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(6);  // The server died before the line above.
  // Listening sockets, client connections, epoll: a child holding them would keep ports bound
  // and connections open.
  if (fd > 3) close_range(3, static_cast<unsigned>(fd) - 1, 0);
  close_range(static_cast<unsigned>(fd) + 1, ~0U, 0);
  llvm::install_fatal_error_handler(ChildFatalError, nullptr);
  llvm::install_bad_alloc_error_handler(ChildBadAlloc, nullptr);
  SetIntraOpThreads(1);
  try {
    ChildWork(job, fd);
  } catch (...) {
    const char text[] = "the patch sandbox child threw an exception\n";
    (void)!write(2, text, sizeof(text) - 1);
  }
  _exit(5);
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

// The address space the child may use: what the server maps now plus 1 GiB.
rlim_t ChildAddressSpaceLimit() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  if (pages == 0) return RLIM_INFINITY;
  return static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) +
         (rlim_t{1} << 30);
}

// One child at a time: a child must not inherit another sandbox's pipe.
absl::Mutex sandbox_mu;

}  // namespace

absl::StatusOr<SandboxResult> RunInSandbox(const SandboxJob& job) {
  absl::MutexLock lock(&sandbox_mu);
  const auto start = std::chrono::steady_clock::now();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::UnavailableError(
        absl::StrCat("patch sandbox: cannot create a pipe: ", std::strerror(errno)));
  }
  int err_fd = memfd_create("cuvil-patch-sandbox", MFD_CLOEXEC);
  const rlim_t as_limit = ChildAddressSpaceLimit();
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(fds[0]);
    close(fds[1]);
    if (err_fd >= 0) close(err_fd);
    return absl::UnavailableError(
        absl::StrCat("patch sandbox: cannot start the child: ", std::strerror(e)));
  }
  if (pid == 0) {
    close(fds[0]);
    if (err_fd >= 0) dup2(err_fd, 2);
    rlimit as{as_limit, as_limit};
    setrlimit(RLIMIT_AS, &as);
    rlimit core{0, 0};  // A crashing patch must not write the server's memory to disk.
    setrlimit(RLIMIT_CORE, &core);
    ChildMain(job, fds[1], parent);
  }
  close(fds[1]);
  const auto deadline =
      start + std::chrono::milliseconds(static_cast<int64_t>(job.timeout_seconds * 1000));
  bool timed_out = false;
  Header h;
  std::string payload;
  bool got = ReadAll(fds[0], &h, sizeof(h), deadline, &timed_out) && h.magic == kMagic &&
             h.payload_bytes <= kMaxObjectBytes;
  if (got) {
    payload.resize(h.payload_bytes);
    got = ReadAll(fds[0], payload.data(), payload.size(), deadline, &timed_out);
  }
  close(fds[0]);
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
      waitpid(pid, &status, 0);
      break;
    }
    usleep(1000);
  }
  const std::string diagnostics = err_fd >= 0 ? StderrTail(err_fd) : std::string();
  if (err_fd >= 0) close(err_fd);
  const std::string tail = diagnostics.empty() ? "" : absl::StrCat(": ", diagnostics);
  SandboxResult result;
  result.child_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (got && h.ok == 1) {
    result.object_code = std::move(payload);
    result.probe_code = h.probe_code;
    return result;
  }
  if (got) {
    return absl::FailedPreconditionError(absl::StrCat("patch refused by the sandbox: ", payload));
  }
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
  return absl::FailedPreconditionError(
      absl::StrCat("patch refused by the sandbox: the child exited with status ",
                   WIFEXITED(status) ? WEXITSTATUS(status) : -1, tail));
}

}  // namespace cuvil::jitcache_internal
