#include "agent/http_api.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include "agent/api_routes.h"
#include "node/archive_transfer.h"
#include "gpumem/chunk_receive.h"
#include "base/log.h"

namespace gpuckpt::agent {

// The HTTP API serves node/'s jobs.
using namespace gpuckpt::node;

namespace {

bool is_incoming_piece(const httplib::Request& req) {
  return req.method == "PUT" && req.path.rfind("/v1/incoming/", 0) == 0;
}

bool is_chunk_upload(const httplib::Request& req) {
  return req.method == "PUT" && req.path.rfind("/v1/chunks/", 0) == 0;
}

bool has_token(const httplib::Request& req, const std::string& token) {
  const auto header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  return header.rfind(prefix, 0) == 0 && token_matches(std::string_view(header).substr(prefix.size()), token);
}

// Before any body is read: the token (for every /v1 path, whichever route it names or none), then the body's size,
// announced with a Content-Length, held to its route's own limit: limits.max_request_bytes for all but a transfer's
// pieces and chunk uploads.
httplib::Server::HandlerResponse check_request(JobService& service, const std::string& token,
                                               const httplib::Request& req, httplib::Response& res) {
  if (req.path.rfind("/v1/", 0) == 0 && !has_token(req, token)) {
    log::warn("refused " + log::escaped(req.method, 16) + " " + log::escaped(req.path) + " from " + req.remote_addr +
              ": missing or wrong bearer token");
    service.metrics().request_rejected(RejectReason::auth);
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, 401, "missing or wrong bearer token (send 'Authorization: Bearer <token>' with the agent's token)");
    return httplib::Server::HandlerResponse::Handled;
  }
  const std::size_t limit = is_incoming_piece(req)  ? kMaxChunkBytes
                            : is_chunk_upload(req) ? static_cast<std::size_t>(chunk_receive::kMaxChunkFileBytes)
                                                   : service.config().max_request_bytes;
  const auto length = req.get_header_value("Content-Length");
  const bool chunked = req.has_header("Transfer-Encoding");
  const bool too_long = !length.empty() && (length.size() > 19 || length.find_first_not_of("0123456789") != std::string::npos ||
                                            std::stoull(length) > limit);
  if (chunked || too_long) {
    service.metrics().request_rejected(RejectReason::validation);
    send_error(res, chunked ? 411 : 413, chunked ? "send the body with a Content-Length" :
               "request body too large (at most " + std::to_string(limit) + " bytes here)");
    return httplib::Server::HandlerResponse::Handled;
  }
  return httplib::Server::HandlerResponse::Unhandled;
}

// Reads that succeed (a client polling its job, a scraper) at debug; changes and refusals at info.
void log_request(const httplib::Request& req, const httplib::Response& res) {
  const std::string line = log::escaped(req.method, 16) + " " + log::escaped(req.path) + " -> " +
                           std::to_string(res.status) + " (" + req.remote_addr + ")";
  if (req.method == "GET" && res.status < 300) log::debug(line);
  else log::info(line);
}

void answer_error(const httplib::Request& req, httplib::Response& res) {
  if (!res.body.empty()) return;
  if (res.status == 404)
    send_error(res, 404, "no such endpoint or object: " + log::escaped(req.method, 16) + " " + log::escaped(req.path));
  else if (res.status == 413) send_error(res, 413, "request body too large");
  else send_error(res, res.status, "request failed");
}

void answer_exception(const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
  std::string what = "unknown";
  try {
    if (ep) std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  log::error("internal error in " + log::escaped(req.method, 16) + " " + log::escaped(req.path) + ": " + what);
  send_error(res, 500, "internal error: " + what);
}

void add_route(httplib::Server& server, const Route& route) {
  std::visit(
      [&](const auto& handler) {
        using H = std::decay_t<decltype(handler)>;
        if constexpr (std::is_same_v<H, httplib::Server::Handler>) {
          if (route.method == Method::get) server.Get(route.pattern, handler);
          else if (route.method == Method::post) server.Post(route.pattern, handler);
          else server.Put(route.pattern, handler);
        } else if (route.method == Method::post) {
          server.Post(route.pattern, handler);
        } else if (route.method == Method::put) {
          server.Put(route.pattern, handler);
        } else {   // cpp-httplib reads a body with a content reader for POST and PUT only
          throw std::invalid_argument("route GET " + route.pattern + " cannot take a content reader");
        }
      },
      route.handler);
}

}  // namespace

bool token_matches(std::string_view presented, std::string_view expected) {
  // Walks the expected token fully whatever is presented; length differences only set the result bit.
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned char>(p ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0 && !expected.empty();
}

const char* to_string(Method method) {
  switch (method) {
    case Method::get: return "GET";
    case Method::post: return "POST";
    case Method::put: return "PUT";
  }
  return "?";
}

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(2) + "\n", "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, {{"error", {{"code", status}, {"message", message}}}});
}

void refuse(JobService& service, httplib::Response& res, const Error& error) {
  const ErrorKind kind = error_kind(error);
  const int status = http_status(kind);
  service.metrics().request_rejected(reject_reason(kind));
  log::warn("request refused (" + std::to_string(status) + "): " + error.message);
  if (kind == ErrorKind::busy) res.set_header("Retry-After", "10");
  send_error(res, status, error.message);
}

std::vector<Route> api_routes(JobService& service) {
  std::vector<Route> routes;
  for (auto&& part : {node_routes(service), job_routes(service), incoming_routes(service), chunk_routes(service)})
    routes.insert(routes.end(), part.begin(), part.end());
  return routes;
}

void install_routes(httplib::Server& server, JobService& service, std::string token) {
  // cpp-httplib has one body limit for every route: the largest of a transfer's pieces (node/archive_transfer.h)
  // and a chunk file (node/chunk_transfer.h). Every request is held to its route's own limit before its body is
  // read (check_request): limits.max_request_bytes for all but those two.
  server.set_payload_max_length(std::max({service.config().max_request_bytes, kMaxChunkBytes,
                                          static_cast<std::size_t>(chunk_receive::kMaxChunkFileBytes)}));
  server.set_pre_routing_handler([&service, token](const httplib::Request& req, httplib::Response& res) {
    return check_request(service, token, req, res);
  });
  server.set_logger(log_request);
  server.set_error_handler(answer_error);
  server.set_exception_handler(answer_exception);
  for (const Route& route : api_routes(service)) add_route(server, route);
}

}  // namespace gpuckpt::agent
