// The kubelet checkpoint API as a ContainerRuntime (runtime.kind: kubelet): containers come from the kubelet's
// GET /pods, checkpoints from POST /checkpoint/{namespace}/{pod}/{container} (ContainerCheckpoint feature), which
// leaves the archive in kubelet's checkpoint directory; the adapter copies it to where the agent wants it.
// The URL may carry a path prefix (the API server's node proxy: https://kubernetes.default.svc/api/v1/nodes/N/proxy).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "node/config.h"
#include "runtime/container_runtime.h"

namespace gpuckpt::node {

struct KubeletRuntimeOptions {
  KubeletConfig kubelet;
  std::filesystem::path checkpoint_dir;   // where kubelet's archives are visible to the agent
  std::chrono::seconds timeout{600};
  bool verify_tls = true;
};

std::unique_ptr<ContainerRuntime> make_kubelet_runtime(KubeletRuntimeOptions options);

}  // namespace gpuckpt::node
