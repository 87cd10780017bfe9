// The HTTP server under slow, idle and many clients, for real on loopback: raw sockets hold connections open
// with partial requests while a probe asks /healthz.
#include <catch2/catch_test_macros.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "agent/http_server.h"
#include "base/log.h"

using namespace gpuckpt;
using Clock = std::chrono::steady_clock;

namespace {

struct Socket {
  int fd = -1;
  explicit Socket(int f) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

// A TCP connection to 127.0.0.1:port from `from` (any 127/8 address), with receive timeout `timeout`.
Socket connect_to(int port, const char* from = "127.0.0.1", std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &local.sin_addr);
  REQUIRE(::bind(s.fd, reinterpret_cast<sockaddr*>(&local), sizeof local) == 0);
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &server.sin_addr);
  REQUIRE(::connect(s.fd, reinterpret_cast<sockaddr*>(&server), sizeof server) == 0);
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return s;
}

void send_text(const Socket& s, const std::string& text) {
  REQUIRE(::send(s.fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
}

// What the server sends until it closes or the receive timeout strikes.
std::string receive(const Socket& s) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(s.fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  return out;
}

struct Server {
  httplib::Server http;
  std::thread thread;
  int port = 0;
  explicit Server(const agent::HttpLimits& limits) {
    http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
    http.Get("/whoami", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(agent::client_identity(req), "text/plain");
    });
    agent::harden_server(http, limits);
    port = http.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { http.listen_after_bind(); });
    while (!http.is_running()) std::this_thread::yield();
  }
  ~Server() {
    http.stop();
    thread.join();
  }
};

const std::string kPartial = "GET /healthz HTTP/1.1\r\nHost: agent\r\n";   // no blank line: the request never ends
const std::string kHealthz = "GET /healthz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n";

}  // namespace

TEST_CASE("/healthz answers within 1 s while 200 slow connections are open", "[unit]") {
  agent::HttpLimits limits;
  limits.max_connections_per_client = 1000;   // all from one address here: the workers must suffice
  Server server(limits);
  std::vector<Socket> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(connect_to(server.port));
    send_text(slow.back(), kPartial);
  }
  const Socket probe = connect_to(server.port, "127.0.0.1", std::chrono::milliseconds(1000));
  const auto start = Clock::now();
  send_text(probe, kHealthz);
  const std::string answer = receive(probe);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  INFO("answered in " << seconds << " s: " << answer.substr(0, 40));
  CHECK(answer.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(seconds < 1.0);
}

TEST_CASE("a client over its connection limit is cut off at accept while others are served", "[unit]") {
  agent::HttpLimits limits;
  limits.max_connections_per_client = 4;
  Server server(limits);
  std::vector<Socket> held;
  for (int i = 0; i < 10; ++i) {
    held.push_back(connect_to(server.port, "127.0.0.1", std::chrono::milliseconds(2000)));
    send_text(held.back(), kPartial);
  }
  int closed_by_server = 0;
  for (std::size_t i = 4; i < held.size(); ++i)
    if (receive(held[i]).empty()) ++closed_by_server;   // end of file, not the 2 s timeout
  CHECK(closed_by_server == 6);
  const Socket other = connect_to(server.port, "127.0.0.2", std::chrono::milliseconds(2000));
  send_text(other, kHealthz);
  CHECK(receive(other).rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("a connection that trickles its request is closed at the deadline", "[unit]") {
  agent::HttpLimits limits;
  limits.request_deadline = std::chrono::seconds(2);
  Server server(limits);
  const Socket slow = connect_to(server.port, "127.0.0.1", std::chrono::milliseconds(200));
  const auto start = Clock::now();
  bool closed = false;
  // One header byte every 200 ms: each read succeeds, only the overall deadline can end it.
  for (int i = 0; i < 40 && !closed; ++i) {
    const std::string piece = i == 0 ? "GET /healthz HTTP/1.1\r\nX-Slow: " : "a";
    if (::send(slow.fd, piece.data(), piece.size(), MSG_NOSIGNAL) < 0) closed = true;
    char byte = 0;
    if (::recv(slow.fd, &byte, 1, 0) == 0) closed = true;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  INFO("closed after " << seconds << " s");
  CHECK(closed);
  CHECK(seconds < 5.0);
}

TEST_CASE("client text in log lines is escaped and bounded", "[unit]") {
  CHECK(log::escaped("/v1/x\nINFO forged line") == "/v1/x\\x0aINFO forged line");
  CHECK(log::escaped("a\\b\x7f\xff") == "a\\x5cb\\x7f\\xff");
  CHECK(log::escaped(std::string(300, 'p')).size() == 259);
  // Whatever a message carries unescaped (an NRI container id, a runtime's error text), log::write starts no line
  // of its own: every control character leaves as \xNN.
  std::vector<std::string> lines;
  log::set_sink([&](log::Level, std::string_view line) { lines.emplace_back(line); });
  log::warn("NRI container id 'abc\ngpuckpt-nri: error: forged\r\x1b[2K' is not a safe file name");
  log::set_sink(nullptr);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "NRI container id 'abc\\x0agpuckpt-nri: error: forged\\x0d\\x1b[2K' is not a safe file name");
}

namespace {

// Runs `request` on a fresh loopback connection from a child process that has become `uid` first; what the server
// answered (empty when it closed the connection).
std::string answer_as_user(int port, uid_t uid, const std::string& request) {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {   // only plain system calls below: the parent has threads
    ::close(out[0]);
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(2);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in server{};
    server.sin_family = AF_INET;
    server.sin_port = htons(static_cast<std::uint16_t>(port));
    server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof server) != 0) ::_exit(3);
    timeval tv{3, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) ::_exit(4);
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) (void)!::write(out[1], buffer, n);
    ::_exit(0);
  }
  ::close(out[1]);
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) answer.append(buffer, static_cast<std::size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return answer;
}

}  // namespace

TEST_CASE("on loopback each local user has its own connection share: one process cannot lock out others", "[unit]") {
  if (::geteuid() != 0) SKIP("needs root to connect as another user");
  agent::HttpLimits limits;
  limits.max_connections_per_client = 4;
  Server server(limits);
  // This user (root here) holds its whole share with idle connections, as the attacking process did.
  std::vector<Socket> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(connect_to(server.port, "127.0.0.1", std::chrono::milliseconds(2000)));
    send_text(held.back(), kPartial);
  }
  const Socket refused = connect_to(server.port, "127.0.0.1", std::chrono::milliseconds(2000));
  send_text(refused, kHealthz);
  CHECK(receive(refused).empty());   // its own fifth is still closed at accept
  // Another local user on the same address is served (before: reset, since every local client was "127.0.0.1").
  const std::string other = answer_as_user(server.port, 65534, "GET /whoami HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  INFO(other);
  CHECK(other.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(other.find("127.0.0.1 uid 65534") != std::string::npos);
}
