#include "archive/directory_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <tuple>

#include "archive/checkpoint_archive.h"
#include "base/log.h"

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

using Handle = std::unique_ptr<struct archive, int (*)(struct archive*)>;
using EntryHandle = std::unique_ptr<struct archive_entry, void (*)(struct archive_entry*)>;

Result<void> copy_file_data(struct archive* writer, const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return make_error("cannot read " + file.string() + ": " + std::strerror(errno), errno);
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return make_error("cannot read " + file.string() + ": " + std::strerror(e), e);
    }
    if (n == 0) break;
    if (archive_write_data(writer, buffer, static_cast<std::size_t>(n)) != n) {
      ::close(fd);
      return make_error("cannot write the tar: " + archive_message(writer), EIO);
    }
  }
  ::close(fd);
  return {};
}

// overlayfs keeps its own bookkeeping in trusted.overlay.* (origin, redirect, ...): meaningless in another layer.
void drop_overlay_xattrs(struct archive_entry* entry) {
  std::vector<std::tuple<std::string, std::string>> keep;
  archive_entry_xattr_reset(entry);
  const char* name = nullptr;
  const void* value = nullptr;
  std::size_t size = 0;
  while (archive_entry_xattr_next(entry, &name, &value, &size) == ARCHIVE_OK)
    if (std::string_view(name).rfind("trusted.overlay.", 0) != 0)
      keep.emplace_back(name, std::string(static_cast<const char*>(value), size));
  archive_entry_xattr_clear(entry);
  for (const auto& [key, data] : keep) archive_entry_xattr_add_entry(entry, key.c_str(), data.data(), data.size());
}

// Adds `tree` (a directory) under `prefix` to `writer`, skipping overlayfs whiteouts.
Result<void> pack_tree(struct archive* writer, const std::string& prefix, const fs::path& tree,
                       std::vector<std::string>* whiteouts) {
  Handle disk(archive_read_disk_new(), archive_read_free);
  archive_read_disk_set_standard_lookup(disk.get());
  archive_read_disk_set_behavior(disk.get(), ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
  if (archive_read_disk_open(disk.get(), tree.c_str()) != ARCHIVE_OK)
    return make_error("cannot read " + tree.string() + ": " + archive_message(disk.get()), EIO);
  struct archive_entry_linkresolver* links = archive_entry_linkresolver_new();
  archive_entry_linkresolver_set_strategy(links, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
  const std::string root = tree.string();
  Result<void> result;
  for (;;) {
    EntryHandle entry(archive_entry_new(), archive_entry_free);
    const int rc = archive_read_next_header2(disk.get(), entry.get());
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      result = make_error("cannot read " + tree.string() + ": " + archive_message(disk.get()), EIO);
      break;
    }
    archive_read_disk_descend(disk.get());
    const std::string source = archive_entry_sourcepath(entry.get());
    std::string relative = source.size() > root.size() ? source.substr(root.size() + 1) : std::string();
    if (archive_entry_filetype(entry.get()) == AE_IFCHR && archive_entry_rdev(entry.get()) == 0) {
      if (whiteouts) whiteouts->push_back(relative);   // overlayfs: "deleted in this layer"
      continue;
    }
    drop_overlay_xattrs(entry.get());
    const std::string name = prefix.empty() ? relative : relative.empty() ? prefix : prefix + "/" + relative;
    if (name.empty()) continue;   // the tree's own root, when it is the tar's root
    archive_entry_set_pathname(entry.get(), name.c_str());
    struct archive_entry* sparse = nullptr;
    struct archive_entry* e = entry.release();
    archive_entry_linkify(links, &e, &sparse);
    if (e == nullptr) continue;   // a hardlink whose first copy is still to come
    EntryHandle owned(e, archive_entry_free);
    if (archive_entry_hardlink(e)) {
      const std::string target = archive_entry_hardlink(e);
      if (target.rfind(root, 0) == 0)
        archive_entry_set_hardlink(
            e, ((prefix.empty() ? "" : prefix + "/") + target.substr(root.size() + 1)).c_str());
    }
    if (archive_write_header(writer, e) < ARCHIVE_WARN) {
      result = make_error("cannot write the tar entry " + std::string(archive_entry_pathname(e)) + ": " +
                              archive_message(writer), EIO);
      break;
    }
    if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0) {
      auto copied = copy_file_data(writer, archive_entry_sourcepath(e) ? fs::path(archive_entry_sourcepath(e))
                                                                       : tree / relative);
      if (!copied) {
        result = copied.error();
        break;
      }
    }
  }
  archive_entry_linkresolver_free(links);
  return result;
}

Result<void> extract_into(const fs::path& archive, const fs::path& dir, const ArchiveLimits& limits) {
  Handle reader(archive_read_new(), archive_read_free);
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_tar(reader.get());
  if (archive_read_open_filename(reader.get(), archive.c_str(), 1 << 16) != ARCHIVE_OK)
    return make_error("cannot open " + archive.string() + ": " + archive_message(reader.get()), EIO);
  Handle writer(archive_write_disk_new(), archive_write_free);
  archive_write_disk_set_options(writer.get(), ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_OWNER |
                                                   ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                                   ARCHIVE_EXTRACT_SECURE_SYMLINKS);
  // Names are made relative (normalise_entry_name) and then placed under `dir`, hence absolute on disk.
  std::uint64_t total = 0;
  std::size_t count = 0;
  for (;;) {
    struct archive_entry* e = nullptr;
    const int rc = archive_read_next_header(reader.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) return make_error(archive.string() + " is truncated or corrupt: " + archive_message(reader.get()), EIO);
    if (++count > limits.max_entries)
      return make_error(archive.string() + " has more than " + std::to_string(limits.max_entries) + " entries", EFBIG);
    GPUCKPT_TRY(const std::string name, normalise_entry_name(archive_entry_pathname(e) ? archive_entry_pathname(e) : ""),
                archive.string());
    const auto type = archive_entry_filetype(e);
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      log::warn(archive.string() + ": skipped " + name + " (not a file, directory or link)");
      continue;
    }
    // Declared sizes are checked before the disk writer sees the entry (it would extend a short file to them).
    const la_int64_t declared = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    if (declared < 0 || static_cast<std::uint64_t>(declared) > limits.max_entry_bytes)
      return make_error(archive.string() + ": entry " + name + " declares " + std::to_string(declared) +
                        " bytes, over the per-entry limit of " + std::to_string(limits.max_entry_bytes), EFBIG);
    total += static_cast<std::uint64_t>(declared);
    if (total > limits.max_total_bytes)
      return make_error(archive.string() + " expands beyond " + std::to_string(limits.max_total_bytes) + " bytes", EFBIG);
    archive_entry_set_pathname(e, (dir / name).c_str());
    if (const char* hard = archive_entry_hardlink(e)) {
      GPUCKPT_TRY(const std::string target, normalise_entry_name(hard), archive.string() + ": hardlink " + name);
      archive_entry_set_hardlink(e, (dir / target).c_str());
    }
    if (archive_write_header(writer.get(), e) < ARCHIVE_WARN)
      return make_error("cannot extract " + name + " from " + archive.string() + ": " + archive_message(writer.get()), EIO);
    const void* block = nullptr;
    std::size_t size = 0;
    la_int64_t offset = 0;
    int data;
    while ((data = archive_read_data_block(reader.get(), &block, &size, &offset)) == ARCHIVE_OK)
      if (archive_write_data_block(writer.get(), block, size, offset) < ARCHIVE_WARN)
        return make_error("cannot write " + name + ": " + archive_message(writer.get()), EIO);
    if (data != ARCHIVE_EOF)
      return make_error(archive.string() + " is truncated or corrupt at " + name + ": " + archive_message(reader.get()), EIO);
  }
  if (archive_write_close(writer.get()) != ARCHIVE_OK)
    return make_error("cannot finish extracting " + archive.string() + ": " + archive_message(writer.get()), EIO);
  return {};
}

}  // namespace

Result<std::uint64_t> pack_tar(const std::vector<PackEntry>& entries, const fs::path& out,
                               std::vector<std::string>* whiteouts) {
  ArchiveWriter writer;
  archive_write_set_format_pax_restricted(writer.get());
  if (archive_write_open_filename(writer.get(), out.c_str()) != ARCHIVE_OK)
    return make_error("cannot create " + out.string() + ": " + archive_message(writer.get()), EIO);
  for (const auto& entry : entries) {
    if (!entry.source.empty()) {
      std::error_code ec;
      if (fs::is_directory(entry.source, ec)) {
        GPUCKPT_TRY_VOID(pack_tree(writer.get(), entry.name, entry.source, whiteouts));
        continue;
      }
      struct stat st{};
      if (::stat(entry.source.c_str(), &st) != 0)
        return make_error("cannot read " + entry.source.string() + ": " + std::strerror(errno), errno);
      EntryHandle e(archive_entry_new(), archive_entry_free);
      archive_entry_copy_stat(e.get(), &st);
      archive_entry_set_pathname(e.get(), entry.name.c_str());
      if (archive_write_header(writer.get(), e.get()) < ARCHIVE_WARN)
        return make_error("cannot write " + entry.name + " into " + out.string() + ": " + archive_message(writer.get()), EIO);
      GPUCKPT_TRY_VOID(copy_file_data(writer.get(), entry.source));
      continue;
    }
    EntryHandle e(archive_entry_new(), archive_entry_free);
    archive_entry_set_pathname(e.get(), entry.name.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), 0600);
    archive_entry_set_size(e.get(), static_cast<la_int64_t>(entry.content.size()));
    archive_entry_set_mtime(e.get(), ::time(nullptr), 0);
    if (archive_write_header(writer.get(), e.get()) < ARCHIVE_WARN ||
        archive_write_data(writer.get(), entry.content.data(), entry.content.size()) !=
            static_cast<la_ssize_t>(entry.content.size()))
      return make_error("cannot write " + entry.name + " into " + out.string() + ": " + archive_message(writer.get()), EIO);
  }
  if (writer.close() != ARCHIVE_OK)
    return make_error("cannot finish " + out.string() + ": " + archive_message(writer.get()), EIO);
  std::error_code ec;
  const auto size = fs::file_size(out, ec);
  return ec ? 0 : static_cast<std::uint64_t>(size);
}

Result<void> extract_archive(const fs::path& archive, const fs::path& dir, const ArchiveLimits& limits) {
  GPUCKPT_TRY_VOID(list_archive(archive, limits));   // every rule checked before anything is written
  return extract_into(archive, dir, limits);
}

Result<void> apply_rootfs_diff(const fs::path& diff_tar, const fs::path& root, const ArchiveLimits& limits) {
  return extract_into(diff_tar, root, limits);
}

}  // namespace gpuckpt
