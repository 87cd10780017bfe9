// CRI runtimes (CRI-O, containerd >= 2.0) as a ContainerRuntime (runtime.kind: cri), through the agent's own CRI
// client: find/list by the pod labels kubelet sets, checkpoint with CheckpointContainer. CRI has no restore call:
// a CRI restore is a pod whose container image is a checkpoint image, which kubelet creates.
#pragma once

#include <memory>

#include "node/cri_client.h"
#include "runtime/container_runtime.h"

namespace gpuckpt::node {

std::unique_ptr<ContainerRuntime> make_cri_runtime(CriOptions options);

}  // namespace gpuckpt::node
