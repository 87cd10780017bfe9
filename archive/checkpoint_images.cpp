#include "archive/checkpoint_images.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "base/atomic_file.h"
#include "archive/checkpoint_image.h"
#include "base/json_reader.h"

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

constexpr int kIndexVersion = 2;
// A node keeps few checkpoints; the scan by id stops here rather than read an unbounded directory.
constexpr std::size_t kMaxEntries = 10000;

fs::path index_dir(const fs::path& state_dir) { return state_dir / "checkpoint-images"; }

// Images by their normalised reference, archives by their path: the two never collide (a path starts with '/').
std::string entry_key(const std::string& name_or_path) {
  return !name_or_path.empty() && name_or_path.front() == '/' ? name_or_path : normalise_image_reference(name_or_path);
}

fs::path index_path(const fs::path& state_dir, const std::string& key) {
  Sha256 hash;
  hash.update(key.data(), key.size());
  return index_dir(state_dir) / (hash.hex() + ".json");
}

std::string_view kind_text(CheckpointSourceKind kind) {
  return kind == CheckpointSourceKind::Image ? "image" : "kubelet-archive";
}

Result<void> write_entry(const fs::path& state_dir, const CheckpointImageEntry& entry) {
  if (entry.name.empty() || entry.name.size() > 4096) return make_error("checkpoint image name is empty or too long");
  if (!is_safe_id(entry.record.checkpoint_id))
    return make_error("checkpoint id '" + entry.record.checkpoint_id.substr(0, 128) + "' is not one the agent makes");
  nlohmann::json json = {{"version", kIndexVersion},
                         {"kind", kind_text(entry.kind)},
                         {"name", entry.name},
                         {"checkpoint_id", entry.record.checkpoint_id},
                         {"manifest_digest", entry.manifest_digest},
                         {"gpus", to_json(entry.record)}};
  if (entry.kind == CheckpointSourceKind::KubeletArchive)
    json["archive"] = {{"size", entry.archive.size}, {"mtime_ns", entry.archive.mtime_ns}, {"inode", entry.archive.inode}};
  std::error_code ec;
  fs::create_directories(index_dir(state_dir), ec);
  if (ec) return make_error("cannot create " + index_dir(state_dir).string() + ": " + ec.message(), EIO);
  fs::permissions(index_dir(state_dir), fs::perms::owner_all, fs::perm_options::replace, ec);
  return write_file_atomically(index_path(state_dir, entry.name), json.dump(2));
}

Result<CheckpointImageEntry> entry_from_json(const nlohmann::json& json, const std::string& source) {
  JsonFields fields(source);
  fields.version(json, kIndexVersion, "checkpoint image index entry");
  CheckpointImageEntry entry;
  std::string kind;
  std::string checkpoint_id;
  fields.get(json, "", "kind", kind, true);
  fields.get(json, "", "name", entry.name, true);
  fields.get(json, "", "checkpoint_id", checkpoint_id, true);
  fields.get(json, "", "manifest_digest", entry.manifest_digest);
  const auto* gpus = fields.object(json, "", "gpus", true);
  if (kind == "kubelet-archive") {
    entry.kind = CheckpointSourceKind::KubeletArchive;
    if (const auto* archive = fields.object(json, "", "archive", true)) {
      fields.get_integer(*archive, "archive", "size", entry.archive.size, true);
      fields.get_integer(*archive, "archive", "mtime_ns", entry.archive.mtime_ns, true);
      fields.get_integer(*archive, "archive", "inode", entry.archive.inode, true);
    }
  } else if (kind != "image" && !fields.failed()) {
    fields.fail("kind", "is neither image nor kubelet-archive");
  }
  if (fields.failed()) return fields.error();
  GPUCKPT_TRY(entry.record, checkpoint_record_from_json(*gpus, source));
  if (entry.record.checkpoint_id != checkpoint_id)
    return make_error(source + ": its checkpoint_id and its GPU record's disagree");
  return entry;
}

}  // namespace

Result<ArchiveFileIdentity> archive_file_identity(const fs::path& archive) {
  struct stat st {};
  if (::stat(archive.c_str(), &st) != 0)
    return make_error("cannot stat " + archive.string() + ": " + std::strerror(errno), errno);
  if (!S_ISREG(st.st_mode)) return make_error(archive.string() + " is not a regular file");
  return ArchiveFileIdentity{static_cast<std::uint64_t>(st.st_size),
                             static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                             static_cast<std::uint64_t>(st.st_ino)};
}

Result<void> register_checkpoint_image(const fs::path& state_dir, const std::string& reference,
                                       const std::string& manifest_digest, const CheckpointGpuRecord& record) {
  if (reference.empty() || reference.front() == '/') return make_error("'" + reference + "' is not an image reference");
  CheckpointImageEntry entry;
  entry.kind = CheckpointSourceKind::Image;
  entry.name = normalise_image_reference(reference);
  entry.manifest_digest = manifest_digest;
  entry.record = record;
  return write_entry(state_dir, entry);
}

Result<void> register_kubelet_archive(const fs::path& state_dir, const fs::path& archive,
                                      const CheckpointGpuRecord& record) {
  if (!archive.is_absolute()) return make_error("kubelet archive path " + archive.string() + " is not absolute");
  CheckpointImageEntry entry;
  GPUCKPT_TRY(entry.archive, archive_file_identity(archive));
  entry.kind = CheckpointSourceKind::KubeletArchive;
  entry.name = archive.lexically_normal().string();
  entry.record = record;
  return write_entry(state_dir, entry);
}

Result<std::optional<CheckpointImageEntry>> find_checkpoint_source(const fs::path& state_dir,
                                                                   const std::string& name_or_path) {
  if (name_or_path.empty() || name_or_path.size() > 4096) return std::optional<CheckpointImageEntry>();
  const std::string key =
      name_or_path.front() == '/' ? fs::path(name_or_path).lexically_normal().string() : entry_key(name_or_path);
  const fs::path path = index_path(state_dir, key);
  GPUCKPT_TRY(const auto json, read_json_file(path));
  if (!json) return std::optional<CheckpointImageEntry>();
  GPUCKPT_TRY(auto entry, entry_from_json(*json, path.string()));
  if (entry.name != key) return make_error(path.string() + " indexes '" + entry.name + "', not '" + key + "'");
  return std::optional<CheckpointImageEntry>(std::move(entry));
}

Result<std::vector<CheckpointImageEntry>> find_checkpoint_by_id(const fs::path& state_dir,
                                                                const std::string& checkpoint_id) {
  std::vector<CheckpointImageEntry> found;
  if (!is_safe_id(checkpoint_id)) return found;
  std::error_code ec;
  std::size_t seen = 0;
  for (fs::directory_iterator it(index_dir(state_dir), ec), end; !ec && it != end; it.increment(ec)) {
    if (++seen > kMaxEntries)
      return make_error(index_dir(state_dir).string() + " holds more than " + std::to_string(kMaxEntries) +
                        " entries; remove the ones of checkpoints that are gone");
    if (it->path().extension() != ".json") continue;
    GPUCKPT_TRY(const auto json, read_json_file(it->path()));
    if (!json) continue;   // removed meanwhile
    GPUCKPT_TRY(auto entry, entry_from_json(*json, it->path().string()));
    if (entry.record.checkpoint_id == checkpoint_id) found.push_back(std::move(entry));
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    return make_error("cannot read " + index_dir(state_dir).string() + ": " + ec.message(), EIO);
  return found;
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

}  // namespace gpuckpt
