#include "agent/http_server.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/caught.h"
#include "base/log.h"

namespace gpuckpt::agent {

namespace {

using Clock = std::chrono::steady_clock;

// Accepted sockets, so that the per-client limit and the deadline can act on them. A socket is identified by
// fd and inode: when httplib closes one, its fd may be reused, and the inode tells the new socket apart.
class ConnectionRegistry {
 public:
  static ConnectionRegistry& instance() {
    static ConnectionRegistry registry;
    return registry;
  }

  void enable(const HttpLimits& limits) {
    std::lock_guard lock(mutex_);
    limits_ = limits;
    if (enabled_) return;
    enabled_ = true;
    std::thread([this] {   // lives as long as the process
      if (auto watched = caught("the connection deadline watcher", [this] { watch(); }); !watched)
        log::error(watched.error().message);
    }).detach();
  }

  // False: the client already holds its share; the caller closes the socket.
  bool admit(int fd, const sockaddr_storage& peer) {
    std::lock_guard lock(mutex_);
    if (!enabled_) return true;
    prune_closed();
    const std::string client = client_of(fd, peer);
    std::size_t held = 0;
    for (const auto& [other, c] : open_)
      if (c.client == client) ++held;
    if (held >= limits_.max_connections_per_client) {
      ++refused_since_log_;
      if (Clock::now() - last_refusal_log_ > std::chrono::seconds(10)) {
        log::warn("refused " + std::to_string(refused_since_log_) + " connection(s) from " + client + ": it holds " +
                  std::to_string(held) + " open (limits.max_connections_per_client)");
        refused_since_log_ = 0;
        last_refusal_log_ = Clock::now();
      }
      return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0) open_[fd] = {st.st_ino, client, port_of(peer), Clock::now(), false};
    return true;
  }

  // The client key admit() gave the open connection from `address`:`port`; the address when none matches.
  std::string client_of_connection(const std::string& address, int port) {
    std::lock_guard lock(mutex_);
    for (const auto& [fd, c] : open_)
      if (c.port == port && (c.client == address || c.client.rfind(address + " ", 0) == 0)) return c.client;
    return address;
  }

 private:
  struct Connection {
    ino_t inode = 0;
    std::string client;
    int port = 0;
    Clock::time_point accepted;
    bool shut = false;
  };

  static int port_of(const sockaddr_storage& peer) {
    if (peer.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(peer).sin_port);
    if (peer.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(peer).sin6_port);
    return 0;
  }

  static bool is_loopback(const sockaddr_storage& peer) {
    if (peer.ss_family == AF_INET)
      return (ntohl(reinterpret_cast<const sockaddr_in&>(peer).sin_addr.s_addr) >> 24) == 127;
    if (peer.ss_family == AF_INET6) {
      const auto& a = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
      return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
    }
    return false;
  }

  // Who a connection belongs to. Remote clients: their address. Local clients all share 127.0.0.1, so there the
  // user owning the peer's socket tells them apart ("127.0.0.1 uid 1000"). One unprivileged process can then only
  // use up its own user's share.
  static std::string client_of(int fd, const sockaddr_storage& peer) {
    std::string client = address_of(peer);
    if (!is_loopback(peer)) return client;
    if (auto uid = loopback_owner(fd, peer)) return client + " uid " + std::to_string(*uid);
    return client;
  }

  // IPv4 as itself, also when a dual-stack listener shows it as ::ffff:a.b.c.d: the kernel keeps the client's
  // socket of such a connection in its IPv4 table.
  static void diag_endpoint(const sockaddr_storage& address, std::uint8_t& family, __be16& port, __be32* words) {
    if (address.ss_family == AF_INET) {
      const auto& in = reinterpret_cast<const sockaddr_in&>(address);
      family = AF_INET;
      port = in.sin_port;
      std::memcpy(words, &in.sin_addr, 4);
      return;
    }
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    port = in6.sin6_port;
    if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
      family = AF_INET;
      std::memcpy(words, &in6.sin6_addr.s6_addr[12], 4);
    } else {
      family = AF_INET6;
      std::memcpy(words, &in6.sin6_addr, 16);
    }
  }

  // The uid owning the client end of the loopback connection `fd` accepted from `peer`, asked from the kernel by
  // the connection's addresses and ports (sock_diag's exact lookup: no table of every socket to read per accept).
  static std::optional<unsigned long> loopback_owner(int fd, const sockaddr_storage& peer) {
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return std::nullopt;
    struct {
      nlmsghdr header;
      inet_diag_req_v2 request;
    } message{};
    message.header.nlmsg_len = sizeof message;
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST;
    auto& request = message.request;
    request.sdiag_protocol = IPPROTO_TCP;
    request.idiag_states = ~0u;
    request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    // The client's socket: its source is our peer, its destination our end.
    std::uint8_t local_family = 0;
    diag_endpoint(peer, request.sdiag_family, request.id.idiag_sport, request.id.idiag_src);
    diag_endpoint(local, local_family, request.id.idiag_dport, request.id.idiag_dst);
    if (local_family != request.sdiag_family) return std::nullopt;
    const int diag = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (diag < 0) return std::nullopt;
    const timeval wait{1, 0};
    ::setsockopt(diag, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    alignas(nlmsghdr) char answer[8192];
    ssize_t got = -1;
    if (::sendto(diag, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
        static_cast<ssize_t>(sizeof message))
      got = ::recv(diag, answer, sizeof answer, 0);
    ::close(diag);
    if (got <= 0) return std::nullopt;
    const auto* header = reinterpret_cast<const nlmsghdr*>(answer);
    if (!NLMSG_OK(header, static_cast<unsigned>(got)) || header->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
        header->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg)))
      return std::nullopt;
    return static_cast<const inet_diag_msg*>(NLMSG_DATA(header))->idiag_uid;
  }

  static std::string address_of(const sockaddr_storage& peer) {
    char text[INET6_ADDRSTRLEN] = "?";
    if (peer.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(peer).sin_addr, text, sizeof text);
    else if (peer.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr, text, sizeof text);
    return text;
  }

  bool still_open(int fd, const Connection& c) const {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && st.st_ino == c.inode && S_ISSOCK(st.st_mode);
  }

  void prune_closed() {
    for (auto it = open_.begin(); it != open_.end();)
      it = still_open(it->first, it->second) ? std::next(it) : open_.erase(it);
  }

  // Once a second: a connection past the deadline is shut down; the worker blocked on it then sees end of file.
  void watch() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::lock_guard lock(mutex_);
      prune_closed();
      const auto now = Clock::now();
      for (auto& [fd, c] : open_) {
        if (c.shut || now - c.accepted < limits_.request_deadline) continue;
        ::shutdown(fd, SHUT_RDWR);
        c.shut = true;
        log::warn("closed a connection from " + c.client + " open longer than " +
                  std::to_string(limits_.request_deadline.count()) + " s (limits.request_deadline_seconds)");
      }
    }
  }

  std::mutex mutex_;
  bool enabled_ = false;
  HttpLimits limits_;
  std::map<int, Connection> open_;
  std::size_t refused_since_log_ = 0;
  Clock::time_point last_refusal_log_{};
};

// One thread per connection being served, started on demand up to `max`; idle threads end after a while.
class ElasticTaskQueue final : public httplib::TaskQueue {
 public:
  explicit ElasticTaskQueue(std::size_t max) : max_(max < 2 ? 2 : max) {}
  ~ElasticTaskQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(fn));
    if (queue_.size() > idle_ && threads_ < max_) {
      ++threads_;
      std::thread([this] { work(); }).detach();
    }
    ready_.notify_one();
  }

  void shutdown() override {
    std::unique_lock lock(mutex_);
    stopping_ = true;
    ready_.notify_all();
    finished_.wait(lock, [&] { return threads_ == 0; });
  }

 private:
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ++idle_;
      const bool woke = ready_.wait_for(lock, std::chrono::seconds(30), [&] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty() && (stopping_ || !woke)) break;
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      try {
        fn();
      } catch (...) {
        // httplib handles a request's exceptions itself; a connection's failure must never end the agent.
      }
      lock.lock();
    }
    --threads_;
    finished_.notify_all();
  }

  const std::size_t max_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable finished_;
  std::deque<std::function<void()>> queue_;
  std::size_t threads_ = 0;
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace

std::string client_identity(const httplib::Request& req) {
  return ConnectionRegistry::instance().client_of_connection(req.remote_addr, req.remote_port);
}

void harden_server(httplib::Server& server, const HttpLimits& limits) {
  server.new_task_queue = [max = limits.max_connections] { return new ElasticTaskQueue(max); };
  server.set_read_timeout(limits.read_timeout);
  server.set_write_timeout(limits.read_timeout);
  server.set_keep_alive_timeout(limits.read_timeout.count());
  server.set_keep_alive_max_count(20);
  ConnectionRegistry::instance().enable(limits);
}

}  // namespace gpuckpt::agent

// cpp-httplib accepts connections with accept() and gives no hook before it hands the socket to a worker; the
// agent's definition takes precedence over the C library's for the whole process (the executable is searched
// first), registers each accepted socket and closes those of clients over their limit. Until harden_server
// enables the registry it is a plain accept.
extern "C" int accept(int listener, struct sockaddr* __restrict address, socklen_t* __restrict length) {
  // cpp-httplib listens with a backlog of 5: a burst of connections would wait for SYN retransmits (1 s each),
  // health probes included. listen() on a listening socket only changes its backlog.
  ::listen(listener, SOMAXCONN);
  for (;;) {
    sockaddr_storage peer{};
    socklen_t peer_length = sizeof peer;
    const int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&peer), &peer_length, 0);
    if (fd < 0) return fd;
    if (!gpuckpt::agent::ConnectionRegistry::instance().admit(fd, peer)) {
      ::close(fd);
      continue;
    }
    if (address && length) {
      const socklen_t n = *length < peer_length ? *length : peer_length;
      std::memcpy(address, &peer, n);
      *length = peer_length;
    }
    return fd;
  }
}
