#include "node/kube_client.h"

#include <httplib.h>

#include <fstream>

#include "node/bounded_request.h"

namespace gpuckpt::node {

KubeClient::KubeClient(KubeEndpoint endpoint, std::chrono::seconds connect_timeout, std::chrono::seconds read_timeout)
    : endpoint_(std::move(endpoint)), connect_timeout_(connect_timeout), read_timeout_(read_timeout) {
  const std::string& url = endpoint_.url;
  const auto scheme_end = url.find("://");
  const auto path_start = url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  base_ = path_start == std::string::npos ? url : url.substr(0, path_start);
  prefix_ = path_start == std::string::npos ? "" : url.substr(path_start);
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
}

Result<KubeResponse> KubeClient::get(const std::string& path, std::size_t max_answer_bytes) const {
  return call("GET", path, nullptr, "", max_answer_bytes);
}

Result<KubeResponse> KubeClient::post(const std::string& path, const std::string& body,
                                      const std::string& content_type, std::size_t max_answer_bytes) const {
  return call("POST", path, &body, content_type, max_answer_bytes);
}

Result<KubeResponse> KubeClient::patch(const std::string& path, const std::string& body,
                                       const std::string& content_type, std::size_t max_answer_bytes) const {
  return call("PATCH", path, &body, content_type, max_answer_bytes);
}

Result<KubeResponse> KubeClient::call(const char* method, const std::string& path, const std::string* body,
                                      const std::string& content_type, std::size_t max_answer_bytes) const {
  std::ifstream in(endpoint_.token_file);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty())
    return make_error("cannot read the service-account token " + endpoint_.token_file + " (is the token mounted?)",
                      EACCES);
  const auto deadline = std::chrono::steady_clock::now() + read_timeout_;
  httplib::Client client(base_);
  if (!endpoint_.ca_file.empty()) client.set_ca_cert_path(endpoint_.ca_file.c_str());
  client.enable_server_certificate_verification(endpoint_.verify_tls);
  client.set_bearer_token_auth(token.c_str());
  client.set_connection_timeout(static_cast<time_t>(connect_timeout_.count()));
  client.set_read_timeout(static_cast<time_t>(read_timeout_.count()));
  client.set_write_timeout(static_cast<time_t>(read_timeout_.count()));
  httplib::Request request;
  request.method = method;
  request.path = prefix_ + path;
  if (body != nullptr) {
    request.body = *body;
    request.headers.emplace("Content-Type", content_type);
  }
  GPUCKPT_TRY(auto answer, bounded_send(client, std::move(request), endpoint_.name + " at " + base_, deadline,
                                        std::to_string(read_timeout_.count()) + " s for the whole answer",
                                        max_answer_bytes));
  return KubeResponse{answer.status, std::move(answer.body)};
}

}  // namespace gpuckpt::node
