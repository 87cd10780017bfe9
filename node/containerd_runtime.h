// containerd as a ContainerRuntime (runtime.kind: containerd), through containerd's own API where CRI cannot
// (containerd 1.7 answers CRI CheckpointContainer with UNIMPLEMENTED):
//   checkpoint: Tasks.Checkpoint with runc's image_path (the task keeps running), the snapshot's upper dir as
//     rootfs-diff.tar (+ deleted.files for overlay whiteouts), spec.dump and config.dump: the archive layout podman
//     and CRI-O write, with a "containerd" section in config.dump (namespace, snapshotter, image snapshot).
//   restore: a new container on a fresh snapshot of the same image (+ the rootfs diff), its task created with
//     runc's criu_image_path (runc restore). The restored container is containerd's, not a CRI pod: kubelet does
//     not see it (CRI restores need containerd >= 2.1 and a checkpoint image, docs/kubernetes.md).
// Paths: containerd's shim writes the CRIU images into (and restores from) a directory next to the archive, and
// the snapshot layers are read and written at the paths containerd reports: the archive directory and containerd's
// root must be at the same paths for the agent as on the host (the chart mounts them so).
#pragma once

#include <filesystem>
#include <memory>

#include "node/containerd_client.h"
#include "archive/checkpoint_archive.h"
#include "runtime/container_runtime.h"

namespace gpuckpt::node {

inline constexpr const char* kLabelContainerName = "io.gpuckpt.container-name";   // restored containers' name
inline constexpr const char* kLabelRestoredFrom = "io.gpuckpt.restored-from";    // the checkpoint's container id

struct ContainerdRuntimeOptions {
  ContainerdOptions containerd;
  std::filesystem::path state_dir;                // the agent's: restore plans come only from there
  ArchiveLimits limits;
};

std::unique_ptr<ContainerRuntime> make_containerd_runtime(ContainerdRuntimeOptions options);

}  // namespace gpuckpt::node
