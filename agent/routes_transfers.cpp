// What other agents send this one: a transfer's archive, piece by piece (/v1/incoming), and a store-backed
// checkpoint's chunks before it (/v1/chunks).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "agent/api_routes.h"
#include "node/archive_transfer.h"
#include "node/chunk_transfer.h"
#include "gpumem/chunk_receive.h"

namespace gpuckpt::agent {

using namespace gpuckpt::node;

namespace {

// cpp-httplib's content reader as the receivers take it: a sink fed each piece of the body as it arrives.
auto body_reader(const httplib::ContentReader& content_reader) {
  return [&content_reader](const std::function<bool(const char*, std::size_t)>& sink) {
    return content_reader([&](const char* data, std::size_t length) { return sink(data, length); });
  };
}

}  // namespace

std::vector<Route> incoming_routes(JobService& service) {
  // A store-backed checkpoint is admitted within the commit's request, so within its deadline (less a margin for the
  // answer): its chunks came before (PUT /v1/chunks/...), so this only checks them and writes references; an archive
  // uploaded by hand that carries its chunks has them imported here. Past the deadline the commit answers 409 and
  // the sender commits again (archive_transfer.h).
  const auto admit_budget = std::chrono::seconds(std::max(1, service.config().request_deadline_seconds - 3));
  auto admit = [&service, admit_budget](const std::filesystem::path& received) {
    ArchiveLimits limits = service.config().archive_limits;
    limits.deadline = std::chrono::steady_clock::now() + admit_budget;
    return admit_received_archive(received, service.config().gpu_memory, limits);
  };
  auto incoming = std::make_shared<IncomingArchives>(service.config().checkpoint_dir,
                                                     service.config().archive_limits.max_archive_bytes, admit);
  const std::string name = R"(/v1/incoming/([A-Za-z0-9._-]{1,200}))";
  httplib::Server::Handler state = [&service, incoming](const httplib::Request& req, httplib::Response& res) {
    auto held = incoming->state(req.matches[1]);
    if (!held) return refuse(service, res, held.error());
    send_json(res, 200, held.value());
  };
  httplib::Server::HandlerWithContentReader piece = [&service, incoming](const httplib::Request& req,
                                                                          httplib::Response& res,
                                                                          const httplib::ContentReader& reader) {
    auto received = incoming->receive(req.matches[1], req.get_param_value("offset"), req.get_param_value("total"),
                                      body_reader(reader));
    if (!received) return refuse(service, res, received.error());
    send_json(res, 200, received.value());
  };
  httplib::Server::Handler commit = [&service, incoming](const httplib::Request& req, httplib::Response& res) {
    auto committed = incoming->commit(req.matches[1], nlohmann::json::parse(req.body, nullptr, false));
    if (!committed) return refuse(service, res, committed.error());
    send_json(res, 200, committed.value());
  };
  return {{Method::get, name, state}, {Method::put, name, piece}, {Method::post, name + "/commit", commit}};
}

std::vector<Route> chunk_routes(JobService& service) {
  httplib::Server::Handler missing = [&service](const httplib::Request& req, httplib::Response& res) {
    auto lacking = missing_chunks(service.config().gpu_memory, nlohmann::json::parse(req.body, nullptr, false),
                                  std::chrono::seconds(service.config().retention.gc_grace_seconds));
    if (!lacking) return refuse(service, res, lacking.error());
    send_json(res, 200, lacking.value());
  };
  // One chunk of a store-backed checkpoint, from the agent that sends it.
  auto uploads = std::make_shared<ChunkUploads>(service.config().gpu_memory, service.config().unreferenced_chunk_quota);
  httplib::Server::HandlerWithContentReader upload = [&service, uploads](const httplib::Request& req,
                                                                          httplib::Response& res,
                                                                          const httplib::ContentReader& reader) {
    const std::string length = req.has_header("Content-Length") ? req.get_header_value("Content-Length") : "";
    auto received = uploads->receive(req.matches[1].str(), length, body_reader(reader));
    if (!received) {
      if (received.error().errno_value == EBADMSG) service.metrics().chunk_received("refused");
      return refuse(service, res, received.error());
    }
    const bool present = received->value("present", false);
    service.metrics().chunk_received(present ? "present" : "added");
    send_json(res, present ? 200 : 201, received.value());
  };
  return {{Method::post, "/v1/chunks/missing", missing}, {Method::put, R"(/v1/chunks/([^/]{1,200}))", upload}};
}

}  // namespace gpuckpt::agent
