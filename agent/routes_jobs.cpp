// The job resources: one entry each (its kind, its collection, how a request starts one), three routes each.
#include <functional>

#include "agent/api_routes.h"
#include "agent/http_server.h"
#include "node/requests.h"
#include "base/log.h"

namespace gpuckpt::agent {

using namespace gpuckpt::node;

namespace {

struct JobResource {
  JobKind kind;
  const char* collection;   // "/v1/checkpoints"
  // Parses the request's body and starts the job for the request's client.
  std::function<Result<std::string>(JobService&, const httplib::Request&)> start;
};

template <class Parsed, class Start>
auto starting(Result<Parsed> (*parse)(std::string_view), Start start) {
  return [parse, start](JobService& service, const httplib::Request& req) -> Result<std::string> {
    GPUCKPT_TRY(auto request, parse(req.body));
    return start(service, request, client_identity(req));
  };
}

std::vector<JobResource> job_resources() {
  return {
      {JobKind::checkpoint, "/v1/checkpoints",
       starting(&parse_checkpoint_request,
                [](JobService& s, const CheckpointRequest& r, const std::string& client) {
                  return s.start_checkpoint(r.ref, r.image_tag, client);
                })},
      {JobKind::restore, "/v1/restores",
       starting(&parse_restore_request, [](JobService& s, const RestoreRequest& r, const std::string& client) {
         return s.start_restore(r, client);
       })},
      {JobKind::image, "/v1/images",
       starting(&parse_image_request, [](JobService& s, const ImageRequest& r, const std::string& client) {
         return s.start_image(r, client);
       })},
      {JobKind::transfer, "/v1/transfers",
       starting(&parse_transfer_request, [](JobService& s, const TransferRequest& r, const std::string& client) {
         return s.start_transfer(r, client);
       })},
      // A store-backed checkpoint image's chunks from a registry into this node's store (node/registry_chunks.h).
      {JobKind::pull, "/v1/chunk-pulls",
       starting(&parse_chunk_pull_request, [](JobService& s, const ChunkPullRequest& r, const std::string& client) {
         return s.start_chunk_pull(r, client);
       })},
  };
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

// ?limit= 1..kMaxListedJobs, kDefaultListedJobs when not given.
Result<std::size_t> list_limit(const httplib::Request& req) {
  if (!req.has_param("limit")) return kDefaultListedJobs;
  const std::string text = req.get_param_value("limit");
  const bool digits = !text.empty() && text.size() <= 4 && text.find_first_not_of("0123456789") == std::string::npos;
  const std::size_t limit = digits ? std::stoul(text) : 0;
  if (limit < 1 || limit > kMaxListedJobs)
    return make_error("'limit' must be a number from 1 to " + std::to_string(kMaxListedJobs) + ", got '" +
                      log::escaped(text, 32) + "'");
  return limit;
}

httplib::Server::Handler start_job(JobService& service, const JobResource& resource) {
  return [&service, resource](const httplib::Request& req, httplib::Response& res) {
    auto id = resource.start(service, req);
    if (!id) return refuse(service, res, id.error());
    res.set_header("Location", std::string(resource.collection) + "/" + id.value());
    send_json(res, 202, to_json(*service.job(id.value())));
  };
}

// Newest first, ?state= one of the job states, ?limit= (list_limit).
httplib::Server::Handler list_jobs(JobService& service, JobKind kind) {
  return [&service, kind](const httplib::Request& req, httplib::Response& res) {
    std::optional<JobState> state;
    if (const std::string text = req.get_param_value("state"); !text.empty()) {
      state = job_state_from_string(text);
      if (!state)
        return refuse(service, res, make_error("'state' must be " + job_state_choices() + ", got '" +
                                                   log::escaped(text, 32) + "'"));
    }
    auto limit = list_limit(req);
    if (!limit) return refuse(service, res, limit.error());
    auto jobs = service.list_jobs(kind, state, *limit + 1);
    const bool truncated = jobs.size() > *limit;
    if (truncated) jobs.pop_back();
    nlohmann::json list = nlohmann::json::array();
    for (const auto& job : jobs) list.push_back(job_summary(job));
    send_json(res, 200, {{"jobs", std::move(list)}, {"truncated", truncated}});
  };
}

httplib::Server::Handler get_job(JobService& service, JobKind kind) {
  return [&service, kind](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    auto job = service.job(id);
    if (!job || job->kind != kind)
      return refuse(service, res, make_error("no " + std::string(to_string(kind)) + " job '" + id + "'", ENOENT));
    send_json(res, 200, to_json(*job));
  };
}

}  // namespace

std::vector<Route> job_routes(JobService& service) {
  std::vector<Route> routes;
  for (const JobResource& resource : job_resources()) {
    const std::string collection = resource.collection;
    routes.push_back({Method::post, collection, start_job(service, resource)});
    routes.push_back({Method::get, collection, list_jobs(service, resource.kind)});
    routes.push_back({Method::get, collection + R"(/([A-Za-z0-9._-]{1,128}))", get_job(service, resource.kind)});
  }
  return routes;
}

}  // namespace gpuckpt::agent
