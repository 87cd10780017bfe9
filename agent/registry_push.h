// Pushes a checkpoint image (the OCI image layout write_checkpoint_image makes: index.json naming one manifest, its
// config and layer blobs) to a registry through the OCI distribution API, so any node (or a cluster without a
// shared store) can pull it: blobs the registry lacks are uploaded (HEAD, then POST + one PUT with the digest,
// streamed from the file), then the manifest is PUT under the tag. Authentication as the registry's 401 asks:
// HTTP Basic with `credentials_file` ("USER:PASSWORD" on one line), or a Bearer token for pull and push on the
// repository from the token service the challenge names (asked with the same credentials, or anonymously).
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "common/result.h"

namespace gpuckpt::agent {

struct RegistryOptions {
  std::string repository;          // HOST[:PORT]/PATH, e.g. registry.example:5000/ml/checkpoints; empty: no push
  std::string credentials_file;    // USER:PASSWORD; empty: anonymous
  bool plain_http = false;         // http:// (a local registry); else https:// with the system's CAs
  std::chrono::seconds timeout{600};   // per request (a layer is one request)
};

// Checks `repository`'s shape (host, optional port, lower-case path components); an error names what is wrong.
Result<void> check_repository(const std::string& repository);

// Pushes `layout` as REPOSITORY:TAG; returns "REPOSITORY:TAG@sha256:..." (the manifest digest the registry stored).
Result<std::string> push_checkpoint_image(const RegistryOptions& options, const std::filesystem::path& layout,
                                          const std::string& tag);

}  // namespace gpuckpt::agent
