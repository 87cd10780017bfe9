// Pushes a checkpoint image (the OCI image layout write_checkpoint_image makes: index.json naming one manifest, its
// config and layer blobs) to a registry through the OCI distribution API (registry_client.h), so any node (or a
// cluster without a shared store) can pull it: blobs the registry lacks are uploaded (HEAD, then POST + one PUT with
// the digest, streamed from the file), then the manifest is PUT under the tag. The manifest counts as pushed only
// when the registry names the digest it stored (Docker-Content-Digest) and that is the manifest's own.
// A store-backed checkpoint's GPU memory is not in its image: registry_chunks.h pushes its chunks beside it.
#pragma once

#include <filesystem>
#include <string>

#include "base/result.h"
#include "node/registry_client.h"

namespace gpuckpt::node {

// Pushes `layout` as REPOSITORY:TAG; returns "REPOSITORY:TAG@sha256:..." (the manifest digest the registry stored).
Result<std::string> push_checkpoint_image(const RegistryOptions& options, const std::filesystem::path& layout,
                                          const std::string& tag);

}  // namespace gpuckpt::node
