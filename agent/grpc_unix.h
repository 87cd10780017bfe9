// What the CRI and containerd clients share: a gRPC channel over a unix socket, per-call deadlines, and gRPC
// statuses turned into errors a person can act on.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/result.h"

namespace gpuckpt::agent {

// "unix:///run/x.sock", "unix:/run/x.sock" or "/run/x.sock" -> a channel (connects lazily, on the first call).
std::shared_ptr<grpc::Channel> unix_socket_channel(const std::string& endpoint);

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

// "WHAT failed: <message> (<code name>)", with what to do for the codes that have an obvious cause:
// UNAVAILABLE (nothing listens on `endpoint`), DEADLINE_EXCEEDED (names `timeout` and the setting to raise).
Error grpc_error(const grpc::Status& status, const std::string& what, const std::string& endpoint,
                 std::chrono::milliseconds timeout, const std::string& timeout_setting);

const char* grpc_code_name(grpc::StatusCode code);

}  // namespace gpuckpt::agent
