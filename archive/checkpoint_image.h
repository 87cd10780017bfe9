// A checkpoint archive as an OCI image (image layout directory): what CRI-O restores from in Kubernetes (a pod
// whose container image is a checkpoint image). The archive itself is the single layer (tar, tar+gzip or
// tar+zstd, unchanged); the manifest carries the annotations CRI-O looks for
// (io.kubernetes.cri-o.annotations.checkpoint.name) and gpuckpt's GPU annotations (io.gpuckpt.*).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "archive/checkpoint_archive.h"
#include "base/result.h"

namespace gpuckpt {

// SHA-256, streaming (OCI digests).
class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  std::string hex();   // finishes; the object is spent afterwards

 private:
  void block(const unsigned char* p);
  std::array<std::uint32_t, 8> state_;
  std::array<unsigned char, 64> buffer_{};
  std::uint64_t length_ = 0;
  std::size_t used_ = 0;
};

struct CheckpointImage {
  std::filesystem::path layout;     // the OCI image layout directory
  std::string reference;            // org.opencontainers.image.ref.name
  std::string manifest_digest;      // "sha256:..."
};

// The OCI name of the architecture this gpuckpt runs on ("amd64", "arm64", "ppc64le", "s390x", "riscv64"): the
// architecture of every checkpoint it writes, since the agent checkpoints containers on its own node and a
// checkpoint restores only on the architecture it was taken on.
std::string_view oci_architecture();

// Writes `layout` (must not exist; built under a temporary name and renamed when complete) holding `archive`
// as an image tagged `reference` (e.g. "localhost/checkpoint-trainer:ck-2026..."). The archive is validated
// first. podman can then `pull oci:LAYOUT`, skopeo can push it to a registry.
// The name a checkpoint image loaded into a runtime's store with tag `tag` has there, the one pods and
// `podman container restore` name it by: localhost/gpuckpt-checkpoint:TAG (docker normalisation leaves names with a
// domain as they are).
std::string checkpoint_image_name(const std::string& tag);

Result<CheckpointImage> write_checkpoint_image(const std::filesystem::path& archive, const std::filesystem::path& layout,
                                               const std::string& reference, const ArchiveLimits& limits);

}  // namespace gpuckpt
