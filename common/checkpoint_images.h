// Which checkpoint a container being created restores, when the runtime restores from a checkpoint image
// (CRI-O, containerd >= 2.1): the agent registers every checkpoint image it writes or loads on this node under
// the image reference, with the checkpoint's GPU record; gpuckpt-nri looks the reference of a container being
// created up there. The index lives in the agent's state directory (root-only on the node): a pod author can
// name an image, never add or change what an image means.
//   <state_dir>/checkpoint-images/<sha256 of the reference>.json
//     {"version": 1, "reference", "checkpoint_id", "gpus": <gpuckpt-gpus.json>}
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "common/checkpoint_archive.h"
#include "common/result.h"

namespace gpuckpt {

Result<void> register_checkpoint_image(const std::filesystem::path& state_dir, const std::string& reference,
                                       const CheckpointGpuRecord& record);
// std::nullopt: no checkpoint image of that reference is known on this node.
Result<std::optional<CheckpointGpuRecord>> find_checkpoint_image(const std::filesystem::path& state_dir,
                                                                 const std::string& reference);

// Docker's normalisation, which containerd applies before it names a container's image: "ck" ->
// "docker.io/library/ck:latest", "ml/ck:1" -> "docker.io/ml/ck:1"; names with a domain keep it. The index is
// keyed by the normalised reference.
std::string normalise_image_reference(const std::string& reference);

// The image reference a runtime gives a container it creates, from the container's annotations (containerd's
// CRI: io.kubernetes.cri.image-name; CRI-O: io.kubernetes.cri-o.ImageName); empty when neither says.
std::string container_image_reference(const std::map<std::string, std::string>& annotations);

}  // namespace gpuckpt
