#include "node/registry_push.h"

#include <fstream>
#include <optional>

#include "base/json_reader.h"
#include "base/log.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxMetadataBytes = 1 << 20;   // index.json, a manifest

std::optional<std::string> read_small(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxMetadataBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxMetadataBytes) return std::nullopt;
  return text;
}

struct Blob {
  std::string digest;   // sha256:HEX
  std::uint64_t size = 0;
};

Result<Blob> blob_of(const nlohmann::json& descriptor, const char* what) {
  if (!descriptor.is_object() || !descriptor.contains("digest") || !descriptor["digest"].is_string() ||
      !descriptor.contains("size") || !descriptor["size"].is_number_unsigned())
    return make_error(std::string("the layout's ") + what + " has no digest or size");
  Blob b{descriptor["digest"].get<std::string>(), descriptor["size"].get<std::uint64_t>()};
  if (!is_sha256(b.digest)) return make_error(std::string("the layout's ") + what + " digest is not sha256:HEX");
  return b;
}

}  // namespace

Result<std::string> push_checkpoint_image(const RegistryOptions& options, const fs::path& layout, const std::string& tag) {
  GPUCKPT_TRY(auto repo, split_repository(options.repository));
  JsonLimits limits;
  limits.max_bytes = kMaxMetadataBytes;
  limits.max_depth = 8;
  const auto index_text = read_small(layout / "index.json");
  if (!index_text) return make_error("cannot read " + (layout / "index.json").string(), EIO);
  GPUCKPT_TRY(auto index, parse_json(*index_text, (layout / "index.json").string(), limits));
  if (!index.contains("manifests") || !index["manifests"].is_array() || index["manifests"].size() != 1)
    return make_error(layout.string() + " is not a checkpoint image layout (one manifest)");
  GPUCKPT_TRY(auto manifest_blob, blob_of(index["manifests"][0], "manifest"));
  const fs::path blobs = layout / "blobs" / "sha256";
  const auto manifest_text = read_small(blobs / manifest_blob.digest.substr(7));
  if (!manifest_text) return make_error("cannot read the manifest of " + layout.string(), EIO);
  GPUCKPT_TRY(auto manifest, parse_json(*manifest_text, "the manifest of " + layout.string(), limits));
  std::vector<Blob> parts;
  if (auto config = blob_of(manifest.value("config", nlohmann::json()), "config"); config) parts.push_back(*config);
  else return config.error();
  if (!manifest.contains("layers") || !manifest["layers"].is_array())
    return make_error("the manifest of " + layout.string() + " has no layers");
  for (const auto& layer : manifest["layers"]) {
    GPUCKPT_TRY(auto b, blob_of(layer, "layer"));
    parts.push_back(b);
  }
  RegistryClient pusher(options, repo, "pull,push", std::chrono::steady_clock::now() + options.push_timeout);
  for (const auto& part : parts)
    GPUCKPT_TRY_VOID(pusher.push_blob_file(blobs / part.digest.substr(7), part.digest, part.size));
  const std::string media_type = manifest.value("mediaType", std::string("application/vnd.oci.image.manifest.v1+json"));
  GPUCKPT_TRY(const std::string stored, pusher.push_manifest(*manifest_text, media_type, tag));
  if (stored != manifest_blob.digest)
    return make_error("the registry stored the manifest as " + log::escaped(stored, 80) + ", not " +
                      manifest_blob.digest + "; the push counts as failed", EIO);
  return options.repository + ":" + tag + "@" + stored;
}

}  // namespace gpuckpt::node
