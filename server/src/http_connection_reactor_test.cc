#include "http_connection_reactor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void Send(int fd, const std::string& text) {
  ASSERT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
}

// Everything the server sends until it closes or `timeout` passes; `closed` tells which.
std::string ReadUntilClosed(int fd, std::chrono::milliseconds timeout, bool* closed) {
  std::string got;
  *closed = false;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// Reads the request's header block from `stream` and answers 200 with `body`.
bool AnswerHeaders(httplib::Stream& stream, const std::string& body) {
  std::string head;
  char c;
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (stream.read(&c, 1) != 1) return false;
    head.push_back(c);
  }
  std::string out =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return stream.write(out.data(), out.size()) == static_cast<ssize_t>(out.size());
}

std::optional<int> HealthProbe(std::string_view path) {
  if (path == "/v2/health/ready") return 200;
  return std::nullopt;
}

TEST(HttpConnectionReactorTest, ProbesAreAnsweredWhileEveryHandlerIsBusy) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> served{0};
  auto reactor = HttpConnectionReactor::Start(
      "127.0.0.1", 0, HttpConnectionLimits{}, /*threads=*/1,
      [&](httplib::Stream& stream) {
        ++served;
        released.wait();  // The only handler thread is held.
        return AnswerHeaders(stream, "late");
      },
      HealthProbe);
  ASSERT_TRUE(reactor.ok()) << reactor.status();
  const int port = (*reactor)->port();
  int busy = Connect(port);
  Send(busy, "GET /work HTTP/1.1\r\n\r\n");
  while (served.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  int probe = Connect(port);
  Send(probe, "GET /v2/health/ready?x=1 HTTP/1.1\r\nConnection: close\r\n\r\n");
  bool closed = false;
  std::string answer = ReadUntilClosed(probe, std::chrono::seconds(5), &closed);
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 200 OK"));
  EXPECT_TRUE(closed) << "Connection: close was not honoured";
  release.set_value();
  std::string late = ReadUntilClosed(busy, std::chrono::milliseconds(500), &closed);
  EXPECT_THAT(late, HasSubstr("late"));
  ::close(busy);
  ::close(probe);
}

TEST(HttpConnectionReactorTest, HeaderBlockDeadlineCutsATricklingClient) {
  HttpConnectionLimits limits;
  limits.header_timeout_ms = 300;
  std::atomic<int> served{0};
  auto reactor = HttpConnectionReactor::Start(
      "127.0.0.1", 0, limits, 1,
      [&](httplib::Stream& stream) {
        ++served;
        return AnswerHeaders(stream, "");
      },
      HealthProbe);
  ASSERT_TRUE(reactor.ok());
  int fd = Connect((*reactor)->port());
  Send(fd, "GET /work HTTP/1.1\r\nX-Slow: ");
  const auto start = Clock::now();
  bool closed = false;
  while (!closed && Clock::now() - start < std::chrono::seconds(5)) {
    ::send(fd, "a", 1, MSG_NOSIGNAL);  // A byte every 50 ms: no single read ever times out.
    ReadUntilClosed(fd, std::chrono::milliseconds(50), &closed);
  }
  EXPECT_TRUE(closed);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(served.load(), 0) << "an incomplete request reached a handler";
  ::close(fd);
}

TEST(HttpConnectionReactorTest, OversizedHeaderBlockGets431) {
  HttpConnectionLimits limits;
  limits.max_header_bytes = 2048;
  auto reactor = HttpConnectionReactor::Start(
      "127.0.0.1", 0, limits, 1, [](httplib::Stream& s) { return AnswerHeaders(s, ""); },
      HealthProbe);
  ASSERT_TRUE(reactor.ok());
  int fd = Connect((*reactor)->port());
  Send(fd, "GET /work HTTP/1.1\r\nX-Big: " + std::string(4000, 'a'));
  bool closed = false;
  EXPECT_THAT(ReadUntilClosed(fd, std::chrono::seconds(5), &closed), HasSubstr("431"));
  EXPECT_TRUE(closed);
  ::close(fd);
}

TEST(HttpConnectionReactorTest, IdleKeepAliveConnectionsAreClosed) {
  HttpConnectionLimits limits;
  limits.idle_timeout_ms = 300;
  auto reactor = HttpConnectionReactor::Start(
      "127.0.0.1", 0, limits, 1, [](httplib::Stream& s) { return AnswerHeaders(s, "x"); },
      HealthProbe);
  ASSERT_TRUE(reactor.ok());
  int fd = Connect((*reactor)->port());
  Send(fd, "GET /work HTTP/1.1\r\n\r\nGET /v2/health/ready HTTP/1.1\r\n\r\n");
  bool closed = false;
  const auto start = Clock::now();
  std::string got = ReadUntilClosed(fd, std::chrono::seconds(5), &closed);
  EXPECT_TRUE(closed);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  // Both pipelined requests were answered (handler, then probe) before the idle cut.
  EXPECT_THAT(got, HasSubstr("Content-Length: 1\r\n\r\nx"));
  EXPECT_EQ(got.find("HTTP/1.1 200 OK", got.find("\r\n\r\nx")), got.find("\r\n\r\nx") + 5);
  ::close(fd);
}

TEST(HttpConnectionReactorTest, StalledBodyFailsItsReadAtTheMinimumRate) {
  HttpConnectionLimits limits;
  limits.header_timeout_ms = 300;
  limits.body_min_bytes_per_second = 1000;
  std::promise<ssize_t> result;
  auto reactor = HttpConnectionReactor::Start(
      "127.0.0.1", 0, limits, 1,
      [&](httplib::Stream& stream) {
        std::string head;
        char c;
        while (head.find("\r\n\r\n") == std::string::npos && stream.read(&c, 1) == 1) {
          head.push_back(c);
        }
        char body[100000];
        ssize_t total = 0;
        for (;;) {
          ssize_t n = stream.read(body, sizeof(body));
          if (n <= 0) {
            result.set_value(n < 0 ? -1 : total);
            return false;
          }
          total += n;
        }
      },
      HealthProbe);
  ASSERT_TRUE(reactor.ok());
  int fd = Connect((*reactor)->port());
  const auto start = Clock::now();
  Send(fd, "POST /work HTTP/1.1\r\nContent-Length: 100000\r\n\r\n0123456789");
  std::future<ssize_t> got = result.get_future();
  ASSERT_EQ(got.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(got.get(), -1);
  // 300 ms grace plus 10 bytes at 1000 B/s.
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(250));
  bool closed = false;
  ReadUntilClosed(fd, std::chrono::seconds(2), &closed);
  EXPECT_TRUE(closed);
  ::close(fd);
}

}  // namespace
}  // namespace cuvil
