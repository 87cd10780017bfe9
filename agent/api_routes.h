// The API's routes by resource, each file listing its {method, pattern, handler} (http_api.h Route), and what
// their handlers answer with. http_api.cpp puts them together.
#pragma once

#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "agent/http_api.h"
#include "node/service.h"
#include "base/result.h"

namespace gpuckpt::agent {

void send_json(httplib::Response& res, int status, const nlohmann::json& body);
// {"error": {"code": status, "message": message}}
void send_error(httplib::Response& res, int status, const std::string& message);
// A refused request: its error's status (node::http_status), counted by reason in gpuckpt_api_rejected_total and
// logged; a busy agent's 429 says when to retry.
void refuse(node::JobService& service, httplib::Response& res, const Error& error);

// /v1/checkpoints, /v1/restores, /v1/images, /v1/transfers, /v1/chunk-pulls: start a job, list them, get one.
std::vector<Route> job_routes(node::JobService& service);
// /v1/incoming/NAME: the receiving end of a transfer (node/archive_transfer.h).
std::vector<Route> incoming_routes(node::JobService& service);
// /v1/chunks: which chunks this node's store lacks, and one chunk uploaded (node/chunk_transfer.h).
std::vector<Route> chunk_routes(node::JobService& service);
// /healthz, /metrics and the node's views: /v1/gpus, /v1/match, /v1/node, /v1/containers, /v1/runtime.
std::vector<Route> node_routes(node::JobService& service);

}  // namespace gpuckpt::agent
