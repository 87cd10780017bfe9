// Restore plans applied to checkpoint archives (spec.dump and CRIU's /dev tmpfs images). Kept apart from
// restore_plan.cpp so that the OCI hook, which only applies plans to configs, does not load libarchive.
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <memory>
#include <set>

#include "base/json_reader.h"
#include "archive/restore_archive.h"

namespace gpuckpt {

namespace fs = std::filesystem;

Result<std::optional<std::string>> renumber_device_nodes(std::string_view tmpfs_image,
                                                         const std::map<std::string, DeviceNodeTarget>& nodes,
                                                         const ArchiveLimits& limits) {
  std::set<std::string> new_names;
  for (const auto& [name, target] : nodes)
    if (target.name != name) new_names.insert(target.name);
  using Handle = std::unique_ptr<struct archive, int (*)(struct archive*)>;
  Handle reader(archive_read_new(), archive_read_free);
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_tar(reader.get());
  if (archive_read_open_memory(reader.get(), tmpfs_image.data(), tmpfs_image.size()) != ARCHIVE_OK)
    return make_error(std::string("cannot read a /dev tmpfs image: ") + archive_message(reader.get()), EIO);
  std::string out;   // before the writer, which writes into it
  ArchiveWriter writer;   // an early return must not pad an entry
  archive_write_add_filter_gzip(writer.get());
  archive_write_set_format_pax_restricted(writer.get());
  archive_write_set_bytes_in_last_block(writer.get(), 1);   // tar/gzip must see no padding after the stream
  archive_write_open(
      writer.get(), &out, nullptr,
      [](struct archive*, void* sink, const void* data, std::size_t size) -> la_ssize_t {
        static_cast<std::string*>(sink)->append(static_cast<const char*>(data), size);
        return static_cast<la_ssize_t>(size);
      },
      nullptr);
  int renumbered = 0;
  std::size_t entries = 0;
  std::uint64_t bytes = 0;
  struct archive_entry* entry = nullptr;
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const int rc = archive_read_next_header(reader.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN)
      return make_error(std::string("corrupt /dev tmpfs image: ") + archive_message(reader.get()), EIO);
    if (++entries > limits.max_entries)
      return make_error("a /dev tmpfs image holds more than " + std::to_string(limits.max_entries) + " entries", EFBIG);
    GPUCKPT_TRY(const std::string name,
                normalise_entry_name(archive_entry_pathname(entry) ? archive_entry_pathname(entry) : ""),
                "a /dev tmpfs image has a bad entry");
    const auto node = archive_entry_filetype(entry) == AE_IFCHR ? nodes.find(name) : nodes.end();
    if (node != nodes.end()) {
      const DeviceNodeTarget& target = node->second;
      if (target.name != name) {
        // Keep the image's own spelling of the directory ("./nvidia0" -> "./nvidia1").
        const std::string original = archive_entry_pathname(entry);
        const std::string prefix = original.substr(0, original.size() - std::min(original.size(), name.size()));
        archive_entry_set_pathname(entry, (prefix + target.name).c_str());
      }
      archive_entry_set_rdevmajor(entry, target.major);
      archive_entry_set_rdevminor(entry, target.minor);
      ++renumbered;
    } else if (new_names.count(name)) {
      ++renumbered;   // dropped: a node of the plan takes this name
      continue;
    }
    // The declared size first: the writer is never asked for an entry the limit would not let through.
    const la_int64_t declared = archive_entry_size_is_set(entry) ? archive_entry_size(entry) : 0;
    if (declared < 0 || static_cast<std::uint64_t>(declared) > limits.max_nested_bytes - bytes)
      return make_error("a /dev tmpfs image entry " + name + " declares " + std::to_string(declared) +
                        " bytes: it expands to more than " + std::to_string(limits.max_nested_bytes) +
                        " bytes; refusing it", EFBIG);
    if (archive_write_header(writer.get(), entry) < ARCHIVE_WARN)
      return make_error(std::string("rewriting a /dev tmpfs image: ") + archive_message(writer.get()), EIO);
    for (;;) {
      const la_ssize_t n = archive_read_data(reader.get(), buffer.data(), buffer.size());
      if (n < 0) return make_error(std::string("corrupt /dev tmpfs image: ") + archive_message(reader.get()), EIO);
      if (n == 0) break;
      bytes += static_cast<std::uint64_t>(n);
      if (bytes > limits.max_nested_bytes)
        return make_error("a /dev tmpfs image expands to more than " + std::to_string(limits.max_nested_bytes) +
                          " bytes; refusing it (a decompression bomb?)", EFBIG);
      archive_write_data(writer.get(), buffer.data(), static_cast<std::size_t>(n));
    }
  }
  if (writer.close() != ARCHIVE_OK)
    return make_error(std::string("rewriting a /dev tmpfs image: ") + archive_message(writer.get()), EIO);
  if (renumbered == 0) return std::optional<std::string>{};
  return std::optional<std::string>(std::move(out));
}

Result<std::optional<ArchiveEdit>> restore_edits(const CheckpointInfo& info, const RestorePlan& plan,
                                                 const DeviceNumberLookup& lookup, const ArchiveLimits& limits) {
  ArchiveEdit edit;
  nlohmann::json spec = info.spec;
  GPUCKPT_TRY(const int moved, apply_restore_plan(spec, plan, lookup), "spec.dump");
  // Where nothing moves the archive goes as it is, unless its spec.dump names a plan: an earlier restore's, used
  // up (the archive is a checkpoint of a restored container), which the hook would refuse. It names this one then.
  const bool names_a_plan = info.spec.is_object() && info.spec.contains("annotations") &&
                            info.spec["annotations"].is_object() &&
                            info.spec["annotations"].contains(kAnnotationRestorePlan);
  if (moved == 0 && plan.env.empty() && !names_a_plan) return std::optional<ArchiveEdit>{};
  edit.replace["spec.dump"] = spec.dump();
  std::map<std::string, DeviceNodeTarget> nodes;
  for (const auto& d : plan.devices) {
    const std::string& restored = d.path_after_restore();
    if (d.container_path.rfind("/dev/", 0) != 0 || restored.rfind("/dev/", 0) != 0) continue;
    GPUCKPT_TRY(const auto numbers, lookup(d.host_path));
    nodes[d.container_path.substr(5)] = {restored.substr(5), numbers.first, numbers.second};
  }
  if (nodes.empty()) return std::optional<ArchiveEdit>(std::move(edit));
  for (const auto& [name, image] : info.dev_tmpfs_images) {
    auto renumbered = renumber_device_nodes(image, nodes, limits);
    // By hand, not GPUCKPT_TRY: EINVAL whatever the cause (EIO, EFBIG), as a tmpfs image that cannot be rewritten
    // is the archive's doing.
    if (!renumbered) return make_error(name + ": " + renumbered.error().message);
    if (renumbered.value()) edit.replace[name] = std::move(*renumbered.value());
  }
  return std::optional<ArchiveEdit>(std::move(edit));
}

}  // namespace gpuckpt
