// One way to call the Kubernetes API server (and the kubelet, which authenticates the same way): HTTPS with the
// service account's bearer token and the cluster CA. The node labels (PATCH node), the pod events (POST events,
// GET pod) and the kubelet runtime (GET /pods, POST /checkpoint) all go through it. Its answers are read as they
// stream (node/bounded_request.h): at most a bound per kind of answer is kept, and the whole exchange ends at its
// deadline, so that a server that answers without end or a byte at a time holds neither memory nor a thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "base/result.h"

namespace gpuckpt::node {

struct KubeEndpoint {
  // scheme://host[:port][/prefix]: the prefix goes before every path (the API server's node proxy:
  // https://kubernetes.default.svc/api/v1/nodes/NODE/proxy).
  std::string url = "https://kubernetes.default.svc";
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";   // empty: the system's CAs
  bool verify_tls = true;
  std::string name = "the Kubernetes API server";   // who answers, in errors ("the kubelet")
};

// The most of an answer kept, by what was asked; more ends the request (EFBIG). One object (a node, a pod, an
// event, the kubelet's checkpoint answer) cannot be larger than etcd's request limit (1.5 MiB); a list (the
// kubelet's /pods: every pod of the node, at most 110 by default) is many of them.
inline constexpr std::size_t kMaxKubeObjectBytes = 2U << 20;
inline constexpr std::size_t kMaxKubeListBytes = 64U << 20;

struct KubeResponse {
  int status = 0;
  std::string body;
};

class KubeClient {
 public:
  // `read_timeout`: the most a call may take, from its start to the last byte of its answer.
  KubeClient(KubeEndpoint endpoint, std::chrono::seconds connect_timeout, std::chrono::seconds read_timeout);

  // Any answer the server gives is a value (its status and body, at most `max_answer_bytes` of it); an error is no
  // answer at all: the token file cannot be read (re-read on every call: projected tokens are rotated, EACCES), the
  // connection failed (EIO), the answer did not end within read_timeout (ETIMEDOUT) or was larger (EFBIG). Errors
  // name the server (endpoint.name and URL) and the bound.
  Result<KubeResponse> get(const std::string& path, std::size_t max_answer_bytes = kMaxKubeObjectBytes) const;
  Result<KubeResponse> post(const std::string& path, const std::string& body = "",
                            const std::string& content_type = "application/json",
                            std::size_t max_answer_bytes = kMaxKubeObjectBytes) const;
  Result<KubeResponse> patch(const std::string& path, const std::string& body, const std::string& content_type,
                             std::size_t max_answer_bytes = kMaxKubeObjectBytes) const;

  // scheme://host[:port] + prefix + path, for messages.
  std::string url_of(const std::string& path) const { return base_ + prefix_ + path; }

 private:
  Result<KubeResponse> call(const char* method, const std::string& path, const std::string* body,
                            const std::string& content_type, std::size_t max_answer_bytes) const;

  KubeEndpoint endpoint_;
  std::chrono::seconds connect_timeout_;
  std::chrono::seconds read_timeout_;
  std::string base_;     // scheme://host[:port]
  std::string prefix_;   // "" or "/a/b"
};

}  // namespace gpuckpt::node
