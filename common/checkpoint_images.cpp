#include "common/checkpoint_images.h"

#include "common/checkpoint_image.h"
#include "common/json_reader.h"
#include "common/restore_plan.h"

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

constexpr int kIndexVersion = 1;

fs::path index_path(const fs::path& state_dir, const std::string& reference) {
  const std::string normal = normalise_image_reference(reference);
  Sha256 hash;
  hash.update(normal.data(), normal.size());
  return state_dir / "checkpoint-images" / (hash.hex() + ".json");
}

}  // namespace

Result<void> register_checkpoint_image(const fs::path& state_dir, const std::string& reference,
                                       const CheckpointGpuRecord& record) {
  if (reference.empty() || reference.size() > 4096) return make_error("checkpoint image reference is empty or too long");
  const nlohmann::json entry = {{"version", kIndexVersion},
                                {"reference", reference},
                                {"checkpoint_id", record.checkpoint_id},
                                {"gpus", to_json(record)}};
  std::error_code ec;
  fs::create_directories(state_dir / "checkpoint-images", ec);
  if (ec) return make_error("cannot create " + (state_dir / "checkpoint-images").string() + ": " + ec.message(), EIO);
  return write_file_atomically(index_path(state_dir, reference), entry.dump(2));
}

Result<std::optional<CheckpointGpuRecord>> find_checkpoint_image(const fs::path& state_dir,
                                                                 const std::string& reference) {
  if (reference.empty()) return std::optional<CheckpointGpuRecord>();
  const fs::path path = index_path(state_dir, reference);
  auto read = read_json_file(path);
  if (!read) return read.error();
  if (!read.value()) return std::optional<CheckpointGpuRecord>();
  const auto& entry = *read.value();
  JsonFields fields(path.string());
  fields.version(entry, kIndexVersion, "checkpoint image index entry");
  std::string stored;
  fields.get(entry, "", "reference", stored, true);
  const auto* gpus = fields.object(entry, "", "gpus", true);
  if (fields.failed()) return fields.error();
  if (normalise_image_reference(stored) != normalise_image_reference(reference)) return make_error(path.string() + " indexes '" + stored + "', not '" + reference + "'");
  auto record = checkpoint_record_from_json(*gpus, path.string());
  if (!record) return record.error();
  return std::optional<CheckpointGpuRecord>(std::move(record.value()));
}

std::string normalise_image_reference(const std::string& reference) {
  std::string out = reference;
  const auto slash = out.find('/');
  const std::string first = slash == std::string::npos ? "" : out.substr(0, slash);
  const bool has_domain = !first.empty() && (first == "localhost" || first.find_first_of(".:") != std::string::npos);
  if (!has_domain) out = "docker.io/" + (slash == std::string::npos ? "library/" + out : out);
  const auto last = out.rfind('/');
  if (out.find('@') == std::string::npos && out.find(':', last) == std::string::npos) out += ":latest";
  return out;
}

std::string container_image_reference(const std::map<std::string, std::string>& annotations) {
  for (const char* key : {"io.kubernetes.cri.image-name", "io.kubernetes.cri-o.ImageName"})
    if (auto it = annotations.find(key); it != annotations.end() && !it->second.empty()) return it->second;
  return {};
}

}  // namespace gpuckpt
