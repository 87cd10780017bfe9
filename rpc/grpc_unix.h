// A gRPC client's plumbing for a local daemon's unix socket (the container runtimes for the agent, the kubelet's
// PodResources API for gpuckpt-nri): a channel on the socket, per-call deadlines, and a failed status turned into
// an error a person can act on. Its own library so that a component gets gRPC only by asking for it (the hook and
// the CRIU plugin never do).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "base/result.h"

namespace gpuckpt {

// CRI answers (ListContainers on a busy node, verbose status) can exceed gRPC's 4 MiB default.
inline constexpr int kDefaultMaxReceiveBytes = 16 << 20;

// "unix:///run/x.sock", "unix:/run/x.sock" or "/run/x.sock" -> a channel (connects lazily, on the first call) that
// refuses answers larger than `max_receive_bytes` (RESOURCE_EXHAUSTED).
std::shared_ptr<grpc::Channel> unix_socket_channel(const std::string& endpoint,
                                                   int max_receive_bytes = kDefaultMaxReceiveBytes);

// The socket path inside an endpoint ("unix:///run/x.sock" -> "/run/x.sock").
std::string unix_socket_path(const std::string& endpoint);

void set_deadline(grpc::ClientContext& context, std::chrono::milliseconds timeout);

// One unary call with a deadline and optional metadata (containerd's namespace header): every client method is
// "fill the request, call, turn a failed status into an error".
template <class Stub, class Request, class Response>
grpc::Status call_unary(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                        const Request& request, Response& response, std::chrono::milliseconds timeout,
                        const std::string& metadata_key = {}, const std::string& metadata_value = {}) {
  grpc::ClientContext context;
  set_deadline(context, timeout);
  if (!metadata_key.empty()) context.AddMetadata(metadata_key, metadata_value);
  return (stub.*method)(&context, request, &response);
}

// What to tell a person for the two failures that have an obvious cause.
struct GrpcRemedies {
  std::string unavailable;   // UNAVAILABLE: nothing answers on the socket
  std::string deadline;      // DEADLINE_EXCEEDED: the call took longer than its deadline
};

// "WHAT failed: <message> (<code name>)", followed by the matching remedy, with an errno that says the kind of
// failure (ECONNREFUSED, ETIMEDOUT, ENOENT, ENOTSUP, EINVAL, EEXIST, else EIO).
Error grpc_status_error(const grpc::Status& status, const std::string& what, const GrpcRemedies& remedies);

const char* grpc_code_name(grpc::StatusCode code);

}  // namespace gpuckpt
