// The agent's HTTP API (docs/api.md) on cpp-httplib: routes, bearer-token auth on every /v1 call, JSON errors.
// The routes are data, by resource (api_routes.h); install_routes registers them behind the checks every request
// passes first (the token on /v1 paths, the body's size).
#pragma once

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include <httplib.h>

#include "node/service.h"

namespace gpuckpt::agent {

// GET /v1/checkpoints|restores|images answer this many jobs unless ?limit= says otherwise, and never more than
// kMaxListedJobs (the agent keeps up to 1000 finished jobs).
inline constexpr std::size_t kDefaultListedJobs = 50;
inline constexpr std::size_t kMaxListedJobs = 500;

// Constant-time comparison: the time taken does not depend on where the strings differ.
bool token_matches(std::string_view presented, std::string_view expected);

enum class Method { get, post, put };
const char* to_string(Method method);   // "GET", "POST", "PUT"

struct Route {
  Method method;
  std::string pattern;   // cpp-httplib's: a path, or a regular expression whose groups are the request's matches
  // A handler with a content reader reads the body itself, as it arrives (a transfer's piece, a chunk).
  std::variant<httplib::Server::Handler, httplib::Server::HandlerWithContentReader> handler;
};

// Every route of the API, each resource's in turn. The handlers hold `service` (and what they share, such as the
// transfers being received) for as long as they live.
std::vector<Route> api_routes(node::JobService& service);

// Registers every route on `server`; `token` is the bearer token /v1 calls must present.
void install_routes(httplib::Server& server, node::JobService& service, std::string token);

}  // namespace gpuckpt::agent
