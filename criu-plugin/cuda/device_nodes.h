// The GPU device nodes a restored process's driver opens. After the CUDA checkpoint a process holds no GPU node;
// the driver's restore opens each target GPU by its own name, /dev/nvidia<minor>, inside the process's root. CRIU
// restores a container's /dev tmpfs from the checkpoint's image, which names the source GPUs: restored onto
// another GPU (a pod given GPU 0 where it ran on GPU 1), the target's node is not there and the driver's restore
// fails. Restore plans fix this for archives the agent restores (restore/restore_plan.h); runtimes that restore
// from a checkpoint image (CRI-O, containerd >= 2.1) hand CRIU the image as it was, so the plugin makes the nodes
// itself, right before the driver's restore.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"

namespace gpuckpt::cuda {

struct GpuNode {
  unsigned minor = 0;   // /dev/nvidia<minor>
  unsigned major = 0;   // the host's node's major (195 on every NVIDIA driver so far)
};

// Makes `/dev/nvidia<minor>` a character device major:minor under `root` (a process's root: "/proc/PID/root")
// for each node: created (mode 0666) where absent, left alone where it already is that device. A node of that
// name that is something else, or a /dev that is not a plain directory (a symlink would lead out of the
// container), is an error naming it: nothing is replaced. Returns how many nodes were created.
Result<int> ensure_gpu_nodes(const std::string& root, const std::vector<GpuNode>& nodes);

}  // namespace gpuckpt::cuda
