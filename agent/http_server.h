// What keeps the agent's HTTP server answering when clients are slow, idle or many (cpp-httplib 0.11 gives one
// worker per connection and only per-read timeouts, so 8 idle connections used to stop /healthz):
//   - an elastic worker pool: up to `max_connections` connections are served at once (threads start on demand
//     and end when idle), beyond that connections wait in the queue;
//   - a per-client limit: a client holding `max_connections_per_client` open connections has further ones closed
//     at accept. A client is a remote address, or on loopback (where every local process has 127.0.0.1) the user
//     owning the connecting socket (the kernel's sock_diag answer for that connection): one local process cannot
//     use up the share of other users' clients;
//   - an overall deadline: a connection open longer than `request_deadline` is shut down, whatever it sends
//     (a request that trickles one byte every few seconds never outlives it).
// The per-client limit and the deadline need the connection's socket at accept, which cpp-httplib does not
// expose: the agent defines accept() (it interposes the C library's for this process; see http_server.cpp) and
// keeps a registry of accepted sockets. Everything else in the process is unaffected.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include <httplib.h>

namespace gpuckpt::agent {

struct HttpLimits {
  std::size_t max_connections = 256;
  std::size_t max_connections_per_client = 32;
  std::chrono::seconds request_deadline{30};
  std::chrono::seconds read_timeout{5};
};

// Who sent `req`, as the per-client limits count it: "10.0.0.7", or "127.0.0.1 uid 1000" on loopback.
std::string client_identity(const httplib::Request& req);

// Installs the pool, timeouts and keep-alive bounds on `server`, and turns on the accept registry with `limits`.
void harden_server(httplib::Server& server, const HttpLimits& limits);

}  // namespace gpuckpt::agent
