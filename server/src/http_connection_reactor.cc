#include "http_connection_reactor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace cuvil {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kReadChunk = 16 << 10;
// Descriptors kept free for everything else the process opens (models, caches, gRPC).
constexpr int kReservedDescriptors = 128;

struct Connection {
  enum class State { kHeaders, kIdle, kInHandler };
  int fd = -1;
  std::string peer_ip;
  int peer_port = 0;
  std::string local_ip;
  int local_port = 0;
  std::string buf;     // Received, not yet consumed bytes start at `start`.
  size_t start = 0;    // Consumed prefix of `buf`.
  size_t scanned = 0;  // `buf` positions (from `start`) already searched for the header end.
  State state = State::kHeaders;
  SSL* ssl = nullptr;  // TLS: owned; handshaken once SSL_accept has completed.
  bool handshaken = false;
  Clock::time_point deadline;
  Clock::time_point since;  // When the current state began: eviction picks the oldest.

  std::string_view pending() const { return std::string_view(buf).substr(start); }
  void Consume(size_t n) {
    start += n;
    scanned = 0;
    if (start >= buf.size()) {
      buf.clear();
      start = 0;
    } else if (start > kReadChunk) {
      buf.erase(0, start);
      start = 0;
    }
  }
};

// The end (one past the blank line) of the header block at the front of `data`, or npos.
size_t HeaderBlockEnd(std::string_view data, size_t from) {
  from = from > 3 ? from - 3 : 0;
  for (size_t i = data.find('\n', from); i != std::string_view::npos; i = data.find('\n', i + 1)) {
    if (i >= 1 && data[i - 1] == '\n') return i + 1;
    if (i >= 2 && data[i - 1] == '\r' && data[i - 2] == '\n') return i + 1;
  }
  return std::string_view::npos;
}

// What the connection thread needs of a request's header block.
struct RequestHead {
  absl::string_view method;
  absl::string_view target;
  bool http10 = false;
  bool close = false;     // Connection: close (or HTTP/1.0 without keep-alive).
  bool has_body = false;  // A non-zero Content-Length or any Transfer-Encoding.
  bool chunked = false;   // Transfer-Encoding present: the body's end is unknown to us.
  int64_t content_length = 0;
  bool valid = false;
};

RequestHead ParseHead(absl::string_view block) {
  RequestHead head;
  std::vector<absl::string_view> lines = absl::StrSplit(block, '\n');
  if (lines.empty()) return head;
  absl::string_view request_line = absl::StripTrailingAsciiWhitespace(lines[0]);
  std::vector<absl::string_view> parts = absl::StrSplit(request_line, ' ');
  if (parts.size() != 3) return head;
  head.method = parts[0];
  head.target = parts[1];
  head.http10 = parts[2] == "HTTP/1.0";
  bool keep_alive = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = absl::StripTrailingAsciiWhitespace(lines[i]);
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    absl::string_view name = line.substr(0, colon);
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "Connection")) {
      const std::string lower = absl::AsciiStrToLower(value);
      if (absl::StrContains(lower, "close")) head.close = true;
      if (absl::StrContains(lower, "keep-alive")) keep_alive = true;
    } else if (absl::EqualsIgnoreCase(name, "Content-Length")) {
      int64_t n = 0;
      // Bounded so that header size + length cannot overflow (no body is ever that large).
      if (!absl::SimpleAtoi(value, &n) || n < 0 || n > (int64_t{1} << 62)) return head;
      head.content_length = n;
      if (n > 0) head.has_body = true;
    } else if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) {
      head.has_body = true;
      head.chunked = true;
    }
  }
  if (head.http10 && !keep_alive) head.close = true;
  head.valid = true;
  return head;
}

// One non-blocking transfer on a plaintext or TLS connection: bytes moved (> 0), 0 at the end
// of the stream (reads), kWouldBlock (wait for `*want` on the socket) or kIoError.
constexpr ssize_t kWouldBlock = -1;
constexpr ssize_t kIoError = -2;

ssize_t TlsResult(SSL* ssl, int r, short* want) {
  if (r > 0) return r;
  switch (SSL_get_error(ssl, r)) {
    case SSL_ERROR_WANT_READ:
      *want = POLLIN;
      return kWouldBlock;
    case SSL_ERROR_WANT_WRITE:
      *want = POLLOUT;
      return kWouldBlock;
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    default:
      return kIoError;
  }
}

ssize_t IoRead(Connection& c, char* data, size_t size, short* want) {
  if (c.ssl != nullptr) {
    ERR_clear_error();
    return TlsResult(
        c.ssl, SSL_read(c.ssl, data, static_cast<int>(std::min<size_t>(size, INT_MAX))), want);
  }
  for (;;) {
    ssize_t n = ::recv(c.fd, data, size, 0);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    *want = POLLIN;
    return errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : kIoError;
  }
}

ssize_t IoWrite(Connection& c, const char* data, size_t size, short* want) {
  if (c.ssl != nullptr) {
    ERR_clear_error();
    ssize_t n = TlsResult(
        c.ssl, SSL_write(c.ssl, data, static_cast<int>(std::min<size_t>(size, INT_MAX))), want);
    return n == 0 ? kIoError : n;
  }
  for (;;) {
    ssize_t n = ::send(c.fd, data, size, MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    *want = POLLOUT;
    return errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : kIoError;
  }
}

void AddressText(const sockaddr_storage& addr, std::string* ip, int* port) {
  char host[NI_MAXHOST] = "";
  char serv[NI_MAXSERV] = "";
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), sizeof(addr), host, sizeof(host), serv,
                  sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    *ip = host;
    absl::SimpleAtoi(serv, port);
  }
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

// Best effort on a non-blocking socket: a response that does not fit is dropped.
bool SendAll(Connection& c, absl::string_view data) {
  while (!data.empty()) {
    short want = 0;
    ssize_t n = IoWrite(c, data.data(), data.size(), &want);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool SendStatus(Connection& c, int status, bool close, absl::string_view body = {}) {
  std::string out = absl::StrCat("HTTP/1.1 ", status, " ", ReasonPhrase(status),
                                 "\r\nContent-Length: ", body.size(), "\r\n",
                                 body.empty() ? "" : "Content-Type: application/json\r\n",
                                 close ? "Connection: close\r\n" : "", "\r\n", body);
  return SendAll(c, out);
}

// Waits until `fd` has `events` or `deadline`; false at the deadline, or when `stopping` is set
// and `stop_aborts`.
bool WaitFor(int fd, short events, Clock::time_point deadline, const std::atomic<bool>& stopping,
             bool stop_aborts) {
  for (;;) {
    if (stop_aborts && stopping.load(std::memory_order_relaxed)) return false;
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200)));
    if (r > 0) return true;  // Ready, or an error the next recv/send reports.
    if (r < 0 && errno != EINTR) return false;
  }
}

// A request on a handler thread: the buffered header block first, then the socket, with the
// body's minimum rate and a write progress deadline.
class ReactorStream final : public httplib::Stream {
 public:
  ReactorStream(Connection& c, const HttpConnectionLimits& limits,
                const std::atomic<bool>& stopping)
      : c_(c), limits_(limits), stopping_(stopping), begin_(Clock::now()) {}

  bool is_readable() const override {
    return !c_.pending().empty() || (c_.ssl != nullptr && SSL_pending(c_.ssl) > 0) ||
           WaitFor(c_.fd, POLLIN, ReadDeadline(), stopping_, true);
  }
  bool is_writable() const override {
    return WaitFor(c_.fd, POLLOUT, Clock::now() + milliseconds(limits_.header_timeout_ms),
                   stopping_, false);
  }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (c_.pending().empty()) {
      // Refill: small reads (httplib reads header lines a byte at a time) go through the buffer.
      c_.buf.clear();
      c_.start = 0;
      const bool direct = size >= kReadChunk;
      for (;;) {
        char* into = ptr;
        size_t room = size;
        if (!direct) {
          c_.buf.resize(kReadChunk);
          into = c_.buf.data();
          room = kReadChunk;
        }
        short want = POLLIN;
        ssize_t n = IoRead(c_, into, room, &want);
        if (n > 0) {
          received_ += n;
          if (direct) {
            consumed_ += n;
            return n;
          }
          c_.buf.resize(static_cast<size_t>(n));
          break;
        }
        if (!direct) c_.buf.clear();
        if (n == 0) return 0;
        if (n == kIoError) {
          failed_ = true;
          return -1;
        }
        if (!WaitFor(c_.fd, want, ReadDeadline(), stopping_, true)) {
          failed_ = true;  // Too slow (or stopping): the connection is closed after this request.
          return -1;
        }
      }
    }
    size_t n = std::min(size, c_.pending().size());
    std::memcpy(ptr, c_.pending().data(), n);
    c_.Consume(n);
    consumed_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      short want = POLLOUT;
      ssize_t n = IoWrite(c_, ptr, size, &want);
      if (n > 0) return n;
      if (n == kIoError ||
          !WaitFor(c_.fd, want, Clock::now() + milliseconds(limits_.header_timeout_ms), stopping_,
                   false)) {
        failed_ = true;
        return -1;
      }
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.peer_ip;
    port = c_.peer_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.local_ip;
    port = c_.local_port;
  }
  socket_t socket() const override { return c_.fd; }

  bool failed() const { return failed_; }
  // Bytes handed to httplib (header block and body).
  int64_t consumed() const { return consumed_; }

 private:
  // The body must keep up with the minimum rate once the grace has passed; without a rate each
  // wait is bounded by the header timeout.
  Clock::time_point ReadDeadline() const {
    if (limits_.body_min_bytes_per_second <= 0) {
      return Clock::now() + milliseconds(limits_.header_timeout_ms);
    }
    return begin_ + milliseconds(limits_.header_timeout_ms) +
           milliseconds(received_ * 1000 / limits_.body_min_bytes_per_second);
  }

  Connection& c_;
  const HttpConnectionLimits& limits_;
  const std::atomic<bool>& stopping_;
  const Clock::time_point begin_;
  int64_t received_ = 0;
  int64_t consumed_ = 0;
  bool failed_ = false;
};

}  // namespace

class HttpConnectionReactor::Impl {
 public:
  Impl(const HttpConnectionLimits& limits, int threads, ServeFn serve, ProbeFn probe)
      : limits_(limits), threads_(threads), serve_(std::move(serve)), probe_(std::move(probe)) {}

  ~Impl() {
    Stop();
    if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
  }

  // Loads the certificate, key and (mutual TLS) client CA; InvalidArgument when unusable.
  absl::Status UseTls(const HttpTlsFiles& tls);
  absl::StatusOr<int> Bind(const std::string& address, int port);
  void Run();
  void Stop();

 private:
  // A request whose header block is complete leaves the connection thread here.
  struct Returned {
    Connection* c;
    bool keep;
  };

  void Accept();
  void OnReadable(Connection* c);
  // Handles the complete header blocks buffered in `c`: probes answered here, the first other
  // request dispatched to a handler. False when `c` was closed.
  bool Process(Connection* c);
  void Dispatch(Connection* c, const RequestHead& head, size_t head_size);
  void TakeReturned();
  void Sweep(Clock::time_point now);
  bool EvictOldest();
  void Close(Connection* c);
  static void FreeTls(Connection* c) {
    if (c->ssl == nullptr) return;
    if (c->handshaken) SSL_shutdown(c->ssl);  // Best effort close_notify; never waits.
    SSL_free(c->ssl);
    c->ssl = nullptr;
  }
  void SetIdle(Connection* c, Clock::time_point now) {
    c->state = Connection::State::kIdle;
    c->since = now;
    c->deadline = now + milliseconds(limits_.idle_timeout_ms);
  }
  void SetHeaders(Connection* c, Clock::time_point now) {
    c->state = Connection::State::kHeaders;
    c->since = now;
    c->deadline = now + milliseconds(limits_.header_timeout_ms);
  }

  HttpConnectionLimits limits_;
  const int threads_;
  ServeFn serve_;
  ProbeFn probe_;
  SSL_CTX* ssl_ctx_ = nullptr;  // TLS when set.
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::once_flag stop_once_;
  std::thread thread_;
  std::unique_ptr<httplib::ThreadPool> pool_;
  bool accept_paused_ = false;
  Clock::time_point accept_resume_;

  // Connection thread only (and Stop() after it has exited).
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
  std::unordered_map<std::string, int> per_address_;

  std::mutex returned_mu_;
  std::vector<Returned> returned_;  // Guarded by returned_mu_.

  friend class HttpConnectionReactor;
};

absl::Status HttpConnectionReactor::Impl::UseTls(const HttpTlsFiles& tls) {
  ssl_ctx_ = SSL_CTX_new(TLS_server_method());
  if (ssl_ctx_ == nullptr) return absl::InternalError("HTTP: cannot create a TLS context");
  SSL_CTX_set_min_proto_version(ssl_ctx_, TLS1_2_VERSION);
  SSL_CTX_set_options(ssl_ctx_,
                      SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_mode(ssl_ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ssl_ctx_, tls.cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ssl_ctx_, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ssl_ctx_) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("HTTP: cannot use TLS certificate ",
                                                   tls.cert_file, " and key ", tls.key_file,
                                                   " (unreadable, mismatched or not PEM)"));
  }
  if (!tls.client_ca_file.empty()) {
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str());
    if (names == nullptr ||
        SSL_CTX_load_verify_locations(ssl_ctx_, tls.client_ca_file.c_str(), nullptr) != 1) {
      if (names != nullptr) sk_X509_NAME_pop_free(names, X509_NAME_free);
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("HTTP: cannot use TLS client CA ", tls.client_ca_file));
    }
    SSL_CTX_set_client_CA_list(ssl_ctx_, names);
    SSL_CTX_set_verify(ssl_ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> HttpConnectionReactor::Impl::Bind(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  std::string host = address;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot resolve ", address, ": ", gai_strerror(rc)));
  }
  std::string error = "no address";
  for (addrinfo* ai = result; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    // SO_REUSEADDR only, never SO_REUSEPORT: see exclusive_listener.h.
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (ai->ai_family == AF_INET6) {
      int no = 0;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
    }
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(result);
  if (listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot bind ", address, ":", port, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  std::string ip;
  int bound_port = 0;
  AddressText(bound, &ip, &bound_port);

  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("HTTP: epoll: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);

  // Never accept more connections than descriptors remain: EMFILE would stall every client.
  // The soft limit is raised towards the hard one first (as Go's runtime does at start).
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const rlim_t wanted = static_cast<rlim_t>(std::max(0, limits_.max_connections)) +
                          static_cast<rlim_t>(2 * kReservedDescriptors);
    if (files.rlim_cur < wanted && files.rlim_cur < files.rlim_max) {
      rlimit raised = files;
      raised.rlim_cur = std::min(wanted, files.rlim_max);
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) files = raised;
    }
    const int most = std::max<int>(16, static_cast<int>(files.rlim_cur) - kReservedDescriptors);
    if (limits_.max_connections <= 0 || limits_.max_connections > most) {
      spdlog::info(
          "HTTP: at most {} connections (the open-file limit is {}); raise `ulimit -n` for more",
          most, files.rlim_cur);
      limits_.max_connections = most;
    }
  }
  pool_ = std::make_unique<httplib::ThreadPool>(static_cast<size_t>(std::max(1, threads_)));
  thread_ = std::thread([this] { Run(); });
  return bound_port;
}

void HttpConnectionReactor::Impl::Run() {
  std::vector<epoll_event> events(256);
  Clock::time_point last_sweep = Clock::now();
  while (!stopping_.load()) {
    int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 100);
    if (n < 0 && errno != EINTR) {
      spdlog::error("HTTP: epoll_wait: {}", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        Accept();
      } else if (fd == wake_fd_) {
        uint64_t count;
        while (::read(wake_fd_, &count, sizeof(count)) > 0) {
        }
        TakeReturned();
      } else if (auto it = connections_.find(fd);
                 it != connections_.end() && it->second->state != Connection::State::kInHandler) {
        // (An event queued before a dispatch earlier in this batch is the handler's now.)
        OnReadable(it->second.get());
      }
    }
    Clock::time_point now = Clock::now();
    if (now - last_sweep >= milliseconds(100)) {
      Sweep(now);
      last_sweep = now;
    }
  }
  // Refuse new connections from here on.
  ::close(listen_fd_);
  listen_fd_ = -1;
}

void HttpConnectionReactor::Impl::Accept() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop listening for a moment instead of spinning on the backlog.
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accept_paused_ = true;
        accept_resume_ = Clock::now() + milliseconds(100);
        spdlog::warn("HTTP: accept: {}; pausing accepts", std::strerror(errno));
      }
      return;
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    AddressText(addr, &c->peer_ip, &c->peer_port);
    auto peer_count = per_address_.find(c->peer_ip);
    const int from_peer = peer_count == per_address_.end() ? 0 : peer_count->second;
    if (limits_.max_connections_per_address > 0 &&
        from_peer >= limits_.max_connections_per_address) {
      if (ssl_ctx_ == nullptr) {
        SendStatus(*c, 503, true,
                   absl::StrCat("{\"error\":\"too many connections from this address (limit ",
                                limits_.max_connections_per_address, ")\"}"));
      }
      ::close(fd);
      continue;
    }
    if (limits_.max_connections > 0 &&
        static_cast<int>(connections_.size()) >= limits_.max_connections && !EvictOldest()) {
      if (ssl_ctx_ == nullptr) SendStatus(*c, 503, true, "{\"error\":\"too many connections\"}");
      ::close(fd);
      continue;
    }
    ++per_address_[c->peer_ip];
    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0) {
      AddressText(local, &c->local_ip, &c->local_port);
    }
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    if (ssl_ctx_ != nullptr) {
      c->ssl = SSL_new(ssl_ctx_);
      if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) {
        --per_address_[c->peer_ip];
        if (c->ssl != nullptr) SSL_free(c->ssl);
        ::close(fd);
        continue;
      }
      SSL_set_accept_state(c->ssl);
    }
    SetHeaders(c.get(), Clock::now());  // The TLS handshake counts against the header deadline.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      --per_address_[c->peer_ip];
      if (c->ssl != nullptr) SSL_free(c->ssl);
      ::close(fd);
      continue;
    }
    connections_.emplace(fd, std::move(c));
  }
}

void HttpConnectionReactor::Impl::OnReadable(Connection* c) {
  const size_t cap = static_cast<size_t>(std::max<int64_t>(1024, limits_.max_header_bytes));
  if (c->ssl != nullptr && !c->handshaken) {
    ERR_clear_error();
    const int r = SSL_accept(c->ssl);
    if (r != 1) {
      const int e = SSL_get_error(c->ssl, r);
      // Waiting for the client (a server flight that cannot be written at once waits too: the
      // header deadline ends a handshake that never completes).
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
      return Close(c);
    }
    c->handshaken = true;
  }
  bool eof = false;
  for (;;) {
    size_t have = c->pending().size();
    if (have >= cap) break;
    size_t old = c->buf.size();
    size_t room = std::min(kReadChunk, cap - have);
    c->buf.resize(old + room);
    short want = POLLIN;
    ssize_t n = IoRead(*c, c->buf.data() + old, room, &want);
    if (n > 0) {
      c->buf.resize(old + static_cast<size_t>(n));
      if (c->state == Connection::State::kIdle) SetHeaders(c, Clock::now());
      // TLS may hold decrypted bytes the socket no longer signals: read until it would block.
      if (c->ssl == nullptr && static_cast<size_t>(n) < room) break;
      continue;
    }
    c->buf.resize(old);
    if (n == kWouldBlock) break;
    if (n == kIoError) return Close(c);
    eof = true;  // The client half-closed: answer what it sent, then close.
    break;
  }
  if (Process(c) && eof && c->state != Connection::State::kInHandler) Close(c);
}

bool HttpConnectionReactor::Impl::Process(Connection* c) {
  const size_t cap = static_cast<size_t>(std::max<int64_t>(1024, limits_.max_header_bytes));
  while (!c->pending().empty()) {
    std::string_view data = c->pending();
    size_t end = HeaderBlockEnd(data, c->scanned);
    if (end == std::string_view::npos) {
      c->scanned = data.size();
      if (data.size() >= cap) {
        SendStatus(*c, 431, true, "{\"error\":\"request header block too large\"}");
        // Bytes left unread at close() make the kernel answer with a reset, which can destroy
        // the 431 before the client reads it: drop what already arrived (bounded) first.
        char sink[16 << 10];
        for (int i = 0; i < 64 && ::recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; ++i) {
        }
        Close(c);
        return false;
      }
      return true;  // Wait for the rest, until the deadline.
    }
    RequestHead head = ParseHead(absl::string_view(data.data(), end));
    std::optional<int> status;
    if (head.valid && head.method == "GET" && !head.has_body) {
      absl::string_view path = head.target.substr(0, head.target.find('?'));
      status = probe_(std::string_view(path.data(), path.size()));
    }
    if (!status.has_value()) {
      Dispatch(c, head, end);
      return true;
    }
    const bool sent = SendStatus(*c, *status, head.close);
    c->Consume(end);
    if (head.close || !sent) {  // A client that does not read its answers is not kept.
      Close(c);
      return false;
    }
    Clock::time_point now = Clock::now();
    if (c->pending().empty()) {
      SetIdle(c, now);
    } else {
      SetHeaders(c, now);
    }
  }
  return true;
}

void HttpConnectionReactor::Impl::Dispatch(Connection* c, const RequestHead& head,
                                           size_t head_size) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  c->state = Connection::State::kInHandler;
  c->since = Clock::now();
  // A body we cannot delimit, or one the handler leaves unread, ends the connection.
  const bool delimited = head.valid && !head.chunked;
  const int64_t request_bytes = static_cast<int64_t>(head_size) + head.content_length;
  pool_->enqueue([this, c, delimited, request_bytes] {
    bool keep = false;
    try {
      ReactorStream stream(*c, limits_, stopping_);
      keep = serve_(stream);
      keep = keep && delimited && !stream.failed() && stream.consumed() == request_bytes;
    } catch (...) {
      keep = false;
    }
    {
      std::lock_guard<std::mutex> lock(returned_mu_);
      returned_.push_back({c, keep});
    }
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  });
}

void HttpConnectionReactor::Impl::TakeReturned() {
  std::vector<Returned> back;
  {
    std::lock_guard<std::mutex> lock(returned_mu_);
    back.swap(returned_);
  }
  Clock::time_point now = Clock::now();
  for (const Returned& r : back) {
    Connection* c = r.c;
    if (!r.keep || stopping_.load()) {
      Close(c);
      continue;
    }
    c->scanned = 0;
    if (c->pending().empty()) {
      SetIdle(c, now);
    } else {
      SetHeaders(c, now);  // Pipelined: the next request is (partly) buffered already.
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = c->fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
      Close(c);
      continue;
    }
    if (c->ssl != nullptr && SSL_pending(c->ssl) > 0) {
      OnReadable(c);  // Decrypted bytes epoll cannot see.
    } else if (!c->pending().empty()) {
      Process(c);
    }
  }
}

void HttpConnectionReactor::Impl::Sweep(Clock::time_point now) {
  std::vector<Connection*> expired;
  for (auto& [fd, c] : connections_) {
    if (c->state != Connection::State::kInHandler && c->deadline <= now) expired.push_back(c.get());
  }
  for (Connection* c : expired) Close(c);
  if (accept_paused_ && now >= accept_resume_) {
    accept_paused_ = false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = listen_fd_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  }
}

bool HttpConnectionReactor::Impl::EvictOldest() {
  Connection* oldest = nullptr;
  for (auto& [fd, c] : connections_) {
    if (c->state == Connection::State::kInHandler) continue;
    if (oldest == nullptr || c->since < oldest->since) oldest = c.get();
  }
  if (oldest == nullptr) return false;
  Close(oldest);
  return true;
}

void HttpConnectionReactor::Impl::Close(Connection* c) {
  const int fd = c->fd;
  if (c->state != Connection::State::kInHandler) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  }
  if (auto it = per_address_.find(c->peer_ip); it != per_address_.end() && --it->second <= 0) {
    per_address_.erase(it);
  }
  FreeTls(c);
  ::close(fd);
  connections_.erase(fd);  // Destroys *c.
}

void HttpConnectionReactor::Impl::Stop() {
  std::call_once(stop_once_, [this] {
    stopping_.store(true);
    if (wake_fd_ >= 0) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
    }
    if (thread_.joinable()) thread_.join();
    // Handlers in progress finish (bodies still arriving are cut); then every connection closes.
    if (pool_) pool_->shutdown();
    for (auto& [fd, c] : connections_) {
      FreeTls(c.get());
      ::close(fd);
    }
    connections_.clear();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    listen_fd_ = epoll_fd_ = wake_fd_ = -1;
  });
}

absl::StatusOr<std::unique_ptr<HttpConnectionReactor>> HttpConnectionReactor::Start(
    const std::string& bind_address, int port, const HttpConnectionLimits& limits, int threads,
    ServeFn serve, ProbeFn probe, const HttpTlsFiles* tls) {
  std::unique_ptr<HttpConnectionReactor> reactor(new HttpConnectionReactor());
  reactor->impl_ = std::make_unique<Impl>(limits, threads, std::move(serve), std::move(probe));
  if (tls != nullptr) {
    if (absl::Status s = reactor->impl_->UseTls(*tls); !s.ok()) return s;
  }
  absl::StatusOr<int> bound = reactor->impl_->Bind(bind_address, port);
  if (!bound.ok()) return bound.status();
  reactor->port_ = *bound;
  return reactor;
}

HttpConnectionReactor::~HttpConnectionReactor() { Stop(); }

void HttpConnectionReactor::Stop() {
  if (impl_) impl_->Stop();
}

}  // namespace cuvil
