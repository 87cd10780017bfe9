// The agent's HTTP API (docs/api.md) on cpp-httplib: routes, bearer-token auth on every /v1 call, JSON errors.
#pragma once

#include <string>

#include <httplib.h>

#include "agent/service.h"

namespace gpuckpt::agent {

// Constant-time comparison: the time taken does not depend on where the strings differ.
bool token_matches(std::string_view presented, std::string_view expected);

// Registers every route on `server`; `token` is the bearer token /v1 calls must present.
void install_routes(httplib::Server& server, AgentService& service, std::string token);

}  // namespace gpuckpt::agent
