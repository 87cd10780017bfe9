// The runtime the configuration names (runtime.kind), built and introduced: for CRI and containerd the agent asks
// the runtime its name and version once and logs them (a runtime that does not answer yet is a warning: the
// node's runtime may start after the agent).
#pragma once

#include <memory>

#include "node/config.h"
#include "runtime/container_runtime.h"

namespace gpuckpt::node {

struct ConfiguredRuntime {
  std::unique_ptr<ContainerRuntime> runtime;
  std::string name;      // as the runtime introduced itself ("containerd"), else runtime.kind
  std::string version;   // "1.7.24~ds1"; empty when it did not answer (or is not asked: podman, kubelet)
};

ConfiguredRuntime make_configured_runtime(const AgentConfig& config);

}  // namespace gpuckpt::node
