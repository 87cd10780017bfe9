#include "agent/http_api.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "agent/http_server.h"
#include "node/archive_transfer.h"
#include "node/chunk_transfer.h"
#include "node/requests.h"
#include "common/chunk_receive.h"
#include "common/log.h"
#include "common/properties_record.h"

namespace gpuckpt::agent {

// The HTTP API serves node/'s jobs.
using namespace gpuckpt::node;

namespace {

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(2) + "\n", "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, {{"error", {{"code", status}, {"message", message}}}});
}

// A job in a list: what it is, how it went, what it was asked (the request is small: names and paths).
nlohmann::json job_summary(const JobStatus& job) {
  nlohmann::json out = {{"id", job.id},           {"kind", to_string(job.kind)},
                        {"state", to_string(job.state)}, {"phase", job.phase},
                        {"created_at", job.created_at}, {"finished_at", job.finished_at},
                        {"request", job.request}};
  if (!job.error.empty()) out["error"] = job.error;
  if (job.result.is_object() && job.result.contains("archive")) out["archive"] = job.result["archive"];
  return out;
}

bool is_incoming_piece(const httplib::Request& req) {
  return req.method == "PUT" && req.path.rfind("/v1/incoming/", 0) == 0;
}

bool is_chunk_upload(const httplib::Request& req) {
  return req.method == "PUT" && req.path.rfind("/v1/chunks/", 0) == 0;
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

void install_routes(httplib::Server& server, JobService& service, std::string token) {
  // cpp-httplib has one body limit for every route: the largest of a transfer's pieces (node/archive_transfer.h)
  // and a chunk file (node/chunk_transfer.h). Every request is held to its route's own limit before its body is
  // read (below): limits.max_request_bytes for all but those two.
  server.set_payload_max_length(std::max({service.config().max_request_bytes, kMaxChunkBytes,
                                          static_cast<std::size_t>(chunk_receive::kMaxChunkFileBytes)}));

  server.set_pre_routing_handler([&service, token](const httplib::Request& req, httplib::Response& res) {
    // Before any body is read: the token (for /v1), then the body's size, announced with a Content-Length.
    if (req.path.rfind("/v1/", 0) == 0) {
      const auto header = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      if (header.rfind(prefix, 0) != 0 || !token_matches(std::string_view(header).substr(prefix.size()), token)) {
        log::warn("refused " + log::escaped(req.method, 16) + " " + log::escaped(req.path) + " from " + req.remote_addr +
                  ": missing or wrong bearer token");
        service.metrics().request_rejected(RejectReason::auth);
        res.set_header("WWW-Authenticate", "Bearer");
        send_error(res, 401, "missing or wrong bearer token (send 'Authorization: Bearer <token>' with the agent's token)");
        return httplib::Server::HandlerResponse::Handled;
      }
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
  });

  // Reads that succeed (a client polling its job, a scraper) at debug; changes and refusals at info.
  server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    const std::string line = log::escaped(req.method, 16) + " " + log::escaped(req.path) + " -> " +
                             std::to_string(res.status) + " (" + req.remote_addr + ")";
    if (req.method == "GET" && res.status < 300) log::debug(line);
    else log::info(line);
  });

  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, 404, "no such endpoint or object: " + log::escaped(req.method, 16) + " " + log::escaped(req.path));
    else if (res.status == 413) send_error(res, 413, "request body too large");
    else send_error(res, res.status, "request failed");
  });

  server.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log::error("internal error in " + log::escaped(req.method, 16) + " " + log::escaped(req.path) + ": " + what);
    send_error(res, 500, "internal error: " + what);
  });

  auto fail = [&service](httplib::Response& res, const Error& error) {
    const int status = http_status(error);
    service.metrics().request_rejected(reject_reason(error_kind(error)));
    log::warn("request refused (" + std::to_string(status) + "): " + error.message);
    if (status == 429) res.set_header("Retry-After", "10");
    send_error(res, status, error.message);
  };

  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });

  server.Get("/metrics", [&service](const httplib::Request&, httplib::Response& res) {
    res.set_content(service.metrics_text(), "text/plain; version=0.0.4");
  });

  server.Get("/v1/gpus", [&service, fail](const httplib::Request&, httplib::Response& res) {
    auto gpus = service.gpus();
    if (!gpus) return fail(res, gpus.error());
    send_json(res, 200, gpus.value());
  });

  server.Post("/v1/match", [&service, fail](const httplib::Request& req, httplib::Response& res) {
    auto record = read_record(req.body, "the request body");
    if (!record) return fail(res, make_error(record.error().message, EINVAL));
    auto verdict = service.match(record.value());
    if (!verdict) return fail(res, verdict.error());
    send_json(res, 200, verdict.value());
  });

  server.Get("/v1/node", [&service](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, service.node_report());
  });

  server.Get("/v1/containers", [&service, fail](const httplib::Request&, httplib::Response& res) {
    auto containers = service.containers();
    if (!containers) return fail(res, containers.error());
    send_json(res, 200, {{"containers", containers.value()}});
  });

  server.Post("/v1/checkpoints", [&service, fail](const httplib::Request& req, httplib::Response& res) {
    auto request = parse_checkpoint_request(req.body);
    if (!request) return fail(res, request.error());
    auto id = service.start_checkpoint(request->ref, request->image_tag, client_identity(req));
    if (!id) return fail(res, id.error());
    res.set_header("Location", "/v1/checkpoints/" + id.value());
    send_json(res, 202, to_json(*service.job(id.value())));
  });

  server.Post("/v1/restores", [&service, fail](const httplib::Request& req, httplib::Response& res) {
    auto request = parse_restore_request(req.body);
    if (!request) return fail(res, request.error());
    auto id = service.start_restore(request.value(), client_identity(req));
    if (!id) return fail(res, id.error());
    res.set_header("Location", "/v1/restores/" + id.value());
    send_json(res, 202, to_json(*service.job(id.value())));
  });

  server.Post("/v1/images", [&service, fail](const httplib::Request& req, httplib::Response& res) {
    auto request = parse_image_request(req.body);
    if (!request) return fail(res, request.error());
    auto id = service.start_image(request.value(), client_identity(req));
    if (!id) return fail(res, id.error());
    res.set_header("Location", "/v1/images/" + id.value());
    send_json(res, 202, to_json(*service.job(id.value())));
  });

  server.Post("/v1/transfers", [&service, fail](const httplib::Request& req, httplib::Response& res) {
    auto request = parse_transfer_request(req.body);
    if (!request) return fail(res, request.error());
    auto id = service.start_transfer(request.value(), client_identity(req));
    if (!id) return fail(res, id.error());
    res.set_header("Location", "/v1/transfers/" + id.value());
    send_json(res, 202, to_json(*service.job(id.value())));
  });

  // A store-backed checkpoint image's chunks from a registry into this node's store (node/registry_chunks.h).
  server.Post("/v1/chunk-pulls", [&service, fail](const httplib::Request& req, httplib::Response& res) {
    auto request = parse_chunk_pull_request(req.body);
    if (!request) return fail(res, request.error());
    auto id = service.start_chunk_pull(request.value(), client_identity(req));
    if (!id) return fail(res, id.error());
    res.set_header("Location", "/v1/chunk-pulls/" + id.value());
    send_json(res, 202, to_json(*service.job(id.value())));
  });

  // The receiving end of a transfer (node/archive_transfer.h).
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
  constexpr const char* kIncomingName = R"(/v1/incoming/([A-Za-z0-9._-]{1,200}))";
  server.Get(kIncomingName, [incoming, fail](const httplib::Request& req, httplib::Response& res) {
    auto state = incoming->state(req.matches[1]);
    if (!state) return fail(res, state.error());
    send_json(res, 200, state.value());
  });
  server.Put(kIncomingName, [incoming, fail](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& content_reader) {
    auto received = incoming->receive(req.matches[1], req.get_param_value("offset"), req.get_param_value("total"),
                                      [&](const std::function<bool(const char*, std::size_t)>& sink) {
                                        return content_reader([&](const char* data, std::size_t length) {
                                          return sink(data, length);
                                        });
                                      });
    if (!received) return fail(res, received.error());
    send_json(res, 200, received.value());
  });
  server.Post(std::string(kIncomingName) + "/commit", [incoming, fail](const httplib::Request& req, httplib::Response& res) {
    auto committed = incoming->commit(req.matches[1], nlohmann::json::parse(req.body, nullptr, false));
    if (!committed) return fail(res, committed.error());
    send_json(res, 200, committed.value());
  });

  // Which chunks of a store-backed checkpoint this node's store lacks (node/chunk_transfer.h).
  server.Post("/v1/chunks/missing", [&service, fail](const httplib::Request& req, httplib::Response& res) {
    auto missing = missing_chunks(service.config().gpu_memory, nlohmann::json::parse(req.body, nullptr, false),
                                  std::chrono::seconds(service.config().retention.gc_grace_seconds));
    if (!missing) return fail(res, missing.error());
    send_json(res, 200, missing.value());
  });

  // One chunk of a store-backed checkpoint, from the agent that sends it (node/chunk_transfer.h).
  auto chunk_uploads = std::make_shared<ChunkUploads>(service.config().gpu_memory,
                                                      service.config().unreferenced_chunk_quota);
  server.Put(R"(/v1/chunks/([^/]{1,200}))", [&service, chunk_uploads, fail](const httplib::Request& req,
                                                                          httplib::Response& res,
                                                                          const httplib::ContentReader& content_reader) {
    const std::string length = req.has_header("Content-Length") ? req.get_header_value("Content-Length") : "";
    auto received = chunk_uploads->receive(req.matches[1].str(), length,
                                           [&](const std::function<bool(const char*, std::size_t)>& sink) {
                                             return content_reader([&](const char* data, std::size_t n) {
                                               return sink(data, n);
                                             });
                                           });
    if (!received) {
      if (received.error().errno_value == EBADMSG) service.metrics().chunk_received("refused");
      return fail(res, received.error());
    }
    const bool present = received->value("present", false);
    service.metrics().chunk_received(present ? "present" : "added");
    send_json(res, present ? 200 : 201, received.value());
  });

  server.Get("/v1/runtime", [&service](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, service.runtime_report());
  });

  auto get_job = [&service, fail](JobKind kind) {
    return [&service, fail, kind](const httplib::Request& req, httplib::Response& res) {
      const std::string id = req.matches[1];
      auto job = service.job(id);
      if (!job || job->kind != kind)
        return fail(res, make_error("no " + std::string(to_string(kind)) + " job '" + id + "'", ENOENT));
      send_json(res, 200, to_json(*job));
    };
  };
  // Lists: newest first, ?state= one of the job states, ?limit= 1..kMaxListedJobs (default kDefaultListedJobs).
  auto list_jobs = [&service, fail](JobKind kind) {
    return [&service, fail, kind](const httplib::Request& req, httplib::Response& res) {
      const std::string state_text = req.get_param_value("state");
      const auto state = job_state_from_string(state_text);
      if (!state_text.empty() && !state)
        return fail(res, make_error("'state' must be " + job_state_choices() + ", got '" +
                                    log::escaped(state_text, 32) + "'"));
      std::size_t limit = kDefaultListedJobs;
      if (req.has_param("limit")) {
        const std::string text = req.get_param_value("limit");
        const bool digits = !text.empty() && text.size() <= 4 &&
                            text.find_first_not_of("0123456789") == std::string::npos;
        limit = digits ? std::stoul(text) : 0;
        if (limit < 1 || limit > kMaxListedJobs)
          return fail(res, make_error("'limit' must be a number from 1 to " + std::to_string(kMaxListedJobs) +
                                      ", got '" + log::escaped(text, 32) + "'"));
      }
      auto jobs = service.list_jobs(kind, state, limit + 1);
      const bool truncated = jobs.size() > limit;
      if (truncated) jobs.pop_back();
      nlohmann::json list = nlohmann::json::array();
      for (const auto& job : jobs) list.push_back(job_summary(job));
      send_json(res, 200, {{"jobs", std::move(list)}, {"truncated", truncated}});
    };
  };
  server.Get("/v1/checkpoints", list_jobs(JobKind::checkpoint));
  server.Get("/v1/restores", list_jobs(JobKind::restore));
  server.Get("/v1/images", list_jobs(JobKind::image));
  server.Get("/v1/transfers", list_jobs(JobKind::transfer));
  server.Get("/v1/chunk-pulls", list_jobs(JobKind::pull));
  server.Get(R"(/v1/checkpoints/([A-Za-z0-9._-]{1,128}))", get_job(JobKind::checkpoint));
  server.Get(R"(/v1/restores/([A-Za-z0-9._-]{1,128}))", get_job(JobKind::restore));
  server.Get(R"(/v1/images/([A-Za-z0-9._-]{1,128}))", get_job(JobKind::image));
  server.Get(R"(/v1/transfers/([A-Za-z0-9._-]{1,128}))", get_job(JobKind::transfer));
  server.Get(R"(/v1/chunk-pulls/([A-Za-z0-9._-]{1,128}))", get_job(JobKind::pull));
}

}  // namespace gpuckpt::agent
