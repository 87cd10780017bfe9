// The agent's HTTP API (docs/api.md) on cpp-httplib: routes, bearer-token auth on every /v1 call, JSON errors.
#pragma once

#include <cstddef>
#include <string>

#include <httplib.h>

#include "node/service.h"

namespace gpuckpt::agent {

// GET /v1/checkpoints|restores|images answer this many jobs unless ?limit= says otherwise, and never more than
// kMaxListedJobs (the agent keeps up to 1000 finished jobs).
inline constexpr std::size_t kDefaultListedJobs = 50;
inline constexpr std::size_t kMaxListedJobs = 500;

// Constant-time comparison: the time taken does not depend on where the strings differ.
bool token_matches(std::string_view presented, std::string_view expected);

// Registers every route on `server`; `token` is the bearer token /v1 calls must present.
void install_routes(httplib::Server& server, node::JobService& service, std::string token);

}  // namespace gpuckpt::agent
