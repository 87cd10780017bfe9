#include "node/kube_client.h"

#include <httplib.h>

#include <fstream>

namespace gpuckpt::node {

namespace {

// Why a call got no answer: httplib's names alone ("Connection") say nothing one can act on.
std::string no_answer(httplib::Error error, std::chrono::seconds connect, std::chrono::seconds read) {
  switch (error) {
    case httplib::Error::Connection:
      return "could not connect (nothing listens there, the connection was refused, or the host is unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "the connection timed out (" + std::to_string(connect.count()) + " s)";
    case httplib::Error::Read:
      return "no answer within " + std::to_string(read.count()) + " s, or the connection broke while reading it";
    case httplib::Error::Write: return "the connection broke while sending the request";
    case httplib::Error::SSLConnection: return "the TLS handshake failed";
    case httplib::Error::SSLLoadingCerts: return "the CA file cannot be loaded";
    case httplib::Error::SSLServerVerification: return "the server's certificate is not signed by the CA file's CA";
    default: return httplib::to_string(error);
  }
}

}  // namespace

KubeClient::KubeClient(KubeEndpoint endpoint, std::chrono::seconds connect_timeout, std::chrono::seconds read_timeout)
    : endpoint_(std::move(endpoint)), connect_timeout_(connect_timeout), read_timeout_(read_timeout) {
  const std::string& url = endpoint_.url;
  const auto scheme_end = url.find("://");
  const auto path_start = url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  base_ = path_start == std::string::npos ? url : url.substr(0, path_start);
  prefix_ = path_start == std::string::npos ? "" : url.substr(path_start);
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
}

Result<KubeResponse> KubeClient::get(const std::string& path) const { return call("GET", path, nullptr, ""); }

Result<KubeResponse> KubeClient::post(const std::string& path, const std::string& body,
                                      const std::string& content_type) const {
  return call("POST", path, &body, content_type);
}

Result<KubeResponse> KubeClient::patch(const std::string& path, const std::string& body,
                                       const std::string& content_type) const {
  return call("PATCH", path, &body, content_type);
}

Result<KubeResponse> KubeClient::call(const char* method, const std::string& path, const std::string* body,
                                      const std::string& content_type) const {
  std::ifstream in(endpoint_.token_file);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty())
    return make_error("cannot read the service-account token " + endpoint_.token_file + " (is the token mounted?)",
                      EACCES);
  httplib::Client client(base_);
  if (!endpoint_.ca_file.empty()) client.set_ca_cert_path(endpoint_.ca_file.c_str());
  client.enable_server_certificate_verification(endpoint_.verify_tls);
  client.set_bearer_token_auth(token.c_str());
  client.set_connection_timeout(static_cast<time_t>(connect_timeout_.count()));
  client.set_read_timeout(static_cast<time_t>(read_timeout_.count()));
  client.set_write_timeout(static_cast<time_t>(read_timeout_.count()));
  const std::string full = prefix_ + path;
  const std::string verb = method;
  httplib::Result result = verb == "GET"    ? client.Get(full)
                           : verb == "POST" ? client.Post(full, *body, content_type)
                                            : client.Patch(full, *body, content_type);
  if (!result)
    return make_error(verb + " " + url_of(path) + ": " + no_answer(result.error(), connect_timeout_, read_timeout_),
                      EIO);
  return KubeResponse{result->status, result->body};
}

}  // namespace gpuckpt::node
