// Loads a checkpoint image (the OCI image layout write_checkpoint_image makes: one manifest, one layer) into
// containerd's image store through containerd's own API, so the node's runtime can create a container from it
// (containerd >= 2.1 restores from such an image): blobs through the content service, the layer unpacked into
// the snapshotter through the diff service, the image record through the images service, everything under a
// lease so containerd's garbage collector cannot take half of it.
#pragma once

#include <filesystem>
#include <string>

#include "node/containerd_client.h"
#include "runtime/container_runtime.h"
#include "base/result.h"

namespace gpuckpt::node {

// Imports `layout` as image `name` ("localhost/gpuckpt-checkpoint:ck-1"), unpacked for `snapshotter`. An image of
// that name is replaced. Every call ends by `deadline` (the agent job's), except the lease's removal and the
// removal of a half-made snapshot, which clean up after a call that ran out of time.
Result<void> import_checkpoint_image(const ContainerdOptions& options, const std::filesystem::path& layout,
                                     const std::string& name, JobDeadline deadline,
                                     const std::string& snapshotter = "overlayfs");

}  // namespace gpuckpt::node
