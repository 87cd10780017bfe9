#include "node/grpc_unix.h"

namespace gpuckpt::node {

Error grpc_error(const grpc::Status& status, const std::string& what, const std::string& endpoint,
                 std::chrono::milliseconds timeout, const std::string& timeout_setting) {
  return grpc_status_error(
      status, what,
      {"nothing answers on " + unix_socket_path(endpoint) +
           "; check that the runtime runs and that the socket is mounted into the agent",
       "no answer after " + std::to_string(timeout.count() / 1000) + " s; raise " + timeout_setting +
           " (GPU memory is part of a checkpoint: large GPUs take minutes)"});
}

}  // namespace gpuckpt::node
