#include "rpc/grpc_unix.h"

#include <cerrno>

namespace gpuckpt {

std::string unix_socket_path(const std::string& endpoint) {
  std::string path = endpoint;
  if (path.rfind("unix://", 0) == 0)
    path.erase(0, 7);
  else if (path.rfind("unix:", 0) == 0)
    path.erase(0, 5);
  return path;
}

std::shared_ptr<grpc::Channel> unix_socket_channel(const std::string& endpoint, int max_receive_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_receive_bytes);
  return grpc::CreateCustomChannel("unix://" + unix_socket_path(endpoint), grpc::InsecureChannelCredentials(), args);
}

void set_deadline(grpc::ClientContext& context, std::chrono::milliseconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

const char* grpc_code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "status";
  }
}

Error grpc_status_error(const grpc::Status& status, const std::string& what, const GrpcRemedies& remedies) {
  std::string message = what + " failed: " + status.error_message() + " (" + grpc_code_name(status.error_code()) + ")";
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE: return make_error(message + ": " + remedies.unavailable, ECONNREFUSED);
    case grpc::StatusCode::DEADLINE_EXCEEDED: return make_error(message + ": " + remedies.deadline, ETIMEDOUT);
    case grpc::StatusCode::NOT_FOUND: return make_error(message, ENOENT);
    case grpc::StatusCode::UNIMPLEMENTED: return make_error(message, ENOTSUP);
    case grpc::StatusCode::INVALID_ARGUMENT: return make_error(message, EINVAL);
    case grpc::StatusCode::ALREADY_EXISTS: return make_error(message, EEXIST);
    default: return make_error(message, EIO);
  }
}

}  // namespace gpuckpt
