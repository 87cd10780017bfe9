// The node as the API shows it: health, metrics, GPUs, a GPU record's match, the node's checks, the containers
// the hook recorded, the runtime.
#include "agent/api_routes.h"
#include "gpu/properties_record.h"

namespace gpuckpt::agent {

using namespace gpuckpt::node;

namespace {

// GET of one of the service's views: 200 with it, or the view's error.
template <class View>
httplib::Server::Handler view(JobService& service, View read) {
  return [&service, read](const httplib::Request&, httplib::Response& res) {
    auto answer = read(service);
    if (!answer) return refuse(service, res, answer.error());
    send_json(res, 200, answer.value());
  };
}

}  // namespace

std::vector<Route> node_routes(JobService& service) {
  httplib::Server::Handler health = [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  };
  httplib::Server::Handler metrics = [&service](const httplib::Request&, httplib::Response& res) {
    res.set_content(service.metrics_text(), "text/plain; version=0.0.4");
  };
  httplib::Server::Handler match = [&service](const httplib::Request& req, httplib::Response& res) {
    auto record = read_record(req.body, "the request body");
    if (!record) return refuse(service, res, make_error(record.error().message, EINVAL));
    auto verdict = service.match(record.value());
    if (!verdict) return refuse(service, res, verdict.error());
    send_json(res, 200, verdict.value());
  };
  return {
      {Method::get, "/healthz", health},
      {Method::get, "/metrics", metrics},
      {Method::get, "/v1/gpus", view(service, [](JobService& s) { return s.gpus(); })},
      {Method::post, "/v1/match", match},
      {Method::get, "/v1/node",
       view(service, [](JobService& s) { return Result<nlohmann::json>(s.node_report()); })},
      {Method::get, "/v1/containers",
       view(service,
            [](JobService& s) -> Result<nlohmann::json> {
              GPUCKPT_TRY(auto containers, s.containers());
              return nlohmann::json{{"containers", std::move(containers)}};
            })},
      {Method::get, "/v1/runtime",
       view(service, [](JobService& s) { return Result<nlohmann::json>(s.runtime_report()); })},
  };
}

}  // namespace gpuckpt::agent
