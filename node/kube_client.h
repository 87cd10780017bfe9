// One way to call the Kubernetes API server (and the kubelet, which authenticates the same way): HTTPS with the
// service account's bearer token and the cluster CA. The node labels (PATCH node), the pod events (POST events,
// GET pod) and the kubelet runtime (GET /pods, POST /checkpoint) all go through it.
#pragma once

#include <chrono>
#include <string>

#include "common/result.h"

namespace gpuckpt::node {

struct KubeEndpoint {
  // scheme://host[:port][/prefix]: the prefix goes before every path (the API server's node proxy:
  // https://kubernetes.default.svc/api/v1/nodes/NODE/proxy).
  std::string url = "https://kubernetes.default.svc";
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";   // empty: the system's CAs
  bool verify_tls = true;
};

struct KubeResponse {
  int status = 0;
  std::string body;
};

class KubeClient {
 public:
  KubeClient(KubeEndpoint endpoint, std::chrono::seconds connect_timeout, std::chrono::seconds read_timeout);

  // Any answer the server gives is a value (its status and body); an error is no answer at all: the token file
  // cannot be read (re-read on every call: projected tokens are rotated), the connection failed or timed out.
  Result<KubeResponse> get(const std::string& path) const;
  Result<KubeResponse> post(const std::string& path, const std::string& body = "",
                            const std::string& content_type = "application/json") const;
  Result<KubeResponse> patch(const std::string& path, const std::string& body, const std::string& content_type) const;

  // scheme://host[:port] + prefix + path, for messages.
  std::string url_of(const std::string& path) const { return base_ + prefix_ + path; }

 private:
  Result<KubeResponse> call(const char* method, const std::string& path, const std::string* body,
                            const std::string& content_type) const;

  KubeEndpoint endpoint_;
  std::chrono::seconds connect_timeout_;
  std::chrono::seconds read_timeout_;
  std::string base_;     // scheme://host[:port]
  std::string prefix_;   // "" or "/a/b"
};

}  // namespace gpuckpt::node
