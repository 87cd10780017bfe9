// The agent's side of rpc/grpc_unix.h (the CRI and containerd clients include this): how a failed call to a
// container runtime's socket is worded.
#pragma once

#include <chrono>
#include <string>

#include "rpc/grpc_unix.h"

namespace gpuckpt::node {

// "WHAT failed: <message> (<code name>)", and for UNAVAILABLE that nothing answers on `endpoint` (is the runtime
// running, is its socket mounted into the agent), for DEADLINE_EXCEEDED the `timeout` and the setting to raise.
Error grpc_error(const grpc::Status& status, const std::string& what, const std::string& endpoint,
                 std::chrono::milliseconds timeout, const std::string& timeout_setting);

}  // namespace gpuckpt::node
