#include "archive/checkpoint_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <system_error>

#include "base/atomic_file.h"
#include "gpumem/gpu_image.h"
#include "gpumem/gpu_manifest.h"
#include "base/json_reader.h"
#include "gpu/properties_record.h"

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxNameBytes = 4096;

using ReaderPtr = std::unique_ptr<struct archive, int (*)(struct archive*)>;

Result<ReaderPtr> open_reader(const fs::path& path, const ArchiveLimits& limits) {
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (ec || !fs::exists(status)) return make_error("checkpoint archive " + path.string() + " does not exist", ENOENT);
  // A FIFO: a runtime reading an archive the agent streams to it (archive_pipe.h), bounded by the entries' limits.
  // Paths from requests and watched directories are held to regular files before they get here.
  const bool stream = fs::is_fifo(status);
  if (!fs::is_regular_file(status) && !stream)
    return make_error("checkpoint archive " + path.string() + " is not a regular file (symlinks are refused)");
  const auto size = stream ? 0 : fs::file_size(path, ec);
  if (ec) return make_error("cannot stat " + path.string() + ": " + ec.message(), EIO);
  if (size > limits.max_archive_bytes)
    return make_error("checkpoint archive " + path.string() + " is " + std::to_string(size) +
                      " bytes, over the limit of " + std::to_string(limits.max_archive_bytes) +
                      " (raise checkpoints.max_archive_bytes if it is genuine)", EFBIG);
  ReaderPtr reader(archive_read_new(), archive_read_free);
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_tar(reader.get());
  if (archive_read_open_filename(reader.get(), path.c_str(), 1 << 16) != ARCHIVE_OK)
    return make_error("cannot open checkpoint archive " + path.string() + ": " + archive_message(reader.get()), EIO);
  return reader;
}

// Lexically resolves `target` relative to the directory of `entry_name`; false when it leaves the archive.
bool link_stays_inside(const std::string& entry_name, const std::string& target) {
  if (target.empty() || target.front() == '/') return false;
  std::vector<std::string> parts;
  const fs::path dir = fs::path(entry_name).parent_path();
  for (const auto& p : dir) parts.push_back(p.string());
  for (const auto& p : fs::path(target)) {
    const std::string s = p.string();
    if (s == "." || s.empty()) continue;
    if (s == "..") {
      if (parts.empty()) return false;
      parts.pop_back();
    } else {
      parts.push_back(s);
    }
  }
  return true;
}

struct Totals {
  std::size_t entries = 0;
  std::uint64_t bytes = 0;
};

// Symlinks already seen, so that a path through one of them is refused whatever its text says: with "a -> ."
// and "a/b -> ..", "a/b/x" would land outside although every link is lexically inside. Rules, independent of
// entry order: no entry lies under a symlink, no symlink replaces a directory that holds entries, and no link
// target passes through another symlink (it may end at one: each link is checked itself).
class LinkGraph {
 public:
  Result<void> add(const ArchiveEntry& entry) {
    const std::vector<std::string> parents = prefixes(entry.name);
    for (const auto& p : parents) {
      if (symlinks_.count(p))
        return make_error("entry " + entry.name + " lies under the symlink " + p + "; refusing it");
      directories_.insert(p);
    }
    if (entry.kind == ArchiveEntry::Kind::Hardlink)
      for (const auto& p : prefixes(entry.link_target))
        if (symlinks_.count(p)) return make_error("hardlink " + entry.name + " points through the symlink " + p);
    if (!is_symlink(entry)) return {};
    if (directories_.count(entry.name))
      return make_error("symlink " + entry.name + " replaces a directory that holds entries; refusing it");
    if (auto it = link_intermediates_.find(entry.name); it != link_intermediates_.end())
      return make_error("symlink " + it->second + " points through the symlink " + entry.name + "; refusing it");
    for (const auto& step : resolved_steps(entry)) {
      if (symlinks_.count(step))
        return make_error("symlink " + entry.name + " -> " + entry.link_target + " points through the symlink " +
                          step + "; refusing it");
      link_intermediates_.emplace(step, entry.name);
    }
    symlinks_.insert(entry.name);
    return {};
  }

 private:
  static bool is_symlink(const ArchiveEntry& e) { return e.kind == ArchiveEntry::Kind::Symlink; }

  // "a/b/c" -> {"a", "a/b"}
  static std::vector<std::string> prefixes(const std::string& name) {
    std::vector<std::string> out;
    for (std::size_t pos = name.find('/'); pos != std::string::npos; pos = name.find('/', pos + 1))
      out.push_back(name.substr(0, pos));
    return out;
  }

  // The archive paths a link's target walks through before its last component (link_stays_inside has already
  // checked that it never climbs out lexically).
  static std::vector<std::string> resolved_steps(const ArchiveEntry& link) {
    std::vector<std::string> parts;
    for (const auto& p : fs::path(link.name).parent_path()) parts.push_back(p.string());
    std::vector<std::string> steps;
    std::vector<std::string> components;
    for (const auto& p : fs::path(link.link_target)) components.push_back(p.string());
    for (std::size_t i = 0; i < components.size(); ++i) {
      const std::string& s = components[i];
      if (s == "." || s.empty()) continue;
      if (s == "..") {
        if (!parts.empty()) parts.pop_back();
      } else {
        parts.push_back(s);
      }
      if (i + 1 < components.size() && !parts.empty()) {
        std::string joined;
        for (const auto& part : parts) joined += (joined.empty() ? "" : "/") + part;
        steps.push_back(joined);
      }
    }
    return steps;
  }

  std::set<std::string> symlinks_;
  std::set<std::string> directories_;
  std::map<std::string, std::string> link_intermediates_;   // path a link target walks through -> that link
};

Result<ArchiveEntry> check_entry(struct archive_entry* e, const fs::path& archive, const ArchiveLimits& limits,
                                 Totals& totals) {
  const char* raw = archive_entry_pathname(e);
  ArchiveEntry out;
  GPUCKPT_TRY(out.name, normalise_entry_name(raw ? raw : ""), archive.string());
  if (++totals.entries > limits.max_entries)
    return make_error(archive.string() + ": more than " + std::to_string(limits.max_entries) + " entries", EFBIG);
  if (const char* hard = archive_entry_hardlink(e)) {
    GPUCKPT_TRY(out.link_target, normalise_entry_name(hard), archive.string() + ": hardlink " + out.name);
    out.kind = ArchiveEntry::Kind::Hardlink;
    return out;
  }
  switch (archive_entry_filetype(e)) {
    case AE_IFREG: out.kind = ArchiveEntry::Kind::File; break;
    case AE_IFDIR: out.kind = ArchiveEntry::Kind::Directory; break;
    case AE_IFLNK: {
      out.kind = ArchiveEntry::Kind::Symlink;
      const char* target = archive_entry_symlink(e);
      out.link_target = target ? target : "";
      if (!link_stays_inside(out.name, out.link_target))
        return make_error(archive.string() + ": symlink " + out.name + " -> " + out.link_target +
                          " points outside the archive; refusing it");
      break;
    }
    default:
      return make_error(archive.string() + ": entry " + out.name +
                        " is a device, FIFO or socket; checkpoint archives hold only files, directories and links");
  }
  const la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
  out.size = size > 0 ? static_cast<std::uint64_t>(size) : 0;
  if (out.size > limits.max_entry_bytes)
    return make_error(archive.string() + ": entry " + out.name + " is " + std::to_string(out.size) +
                      " bytes, over the per-entry limit of " + std::to_string(limits.max_entry_bytes), EFBIG);
  totals.bytes += out.size;
  if (totals.bytes > limits.max_total_bytes)
    return make_error(archive.string() + ": content exceeds " + std::to_string(limits.max_total_bytes) +
                      " bytes uncompressed", EFBIG);
  return out;
}

Result<std::string> read_data(struct archive* reader, const ArchiveEntry& entry, std::size_t max_bytes,
                              const fs::path& archive) {
  if (entry.size > max_bytes)
    return make_error(archive.string() + ": " + entry.name + " is " + std::to_string(entry.size) +
                      " bytes, more than the " + std::to_string(max_bytes) + " a metadata entry may have", EFBIG);
  std::string data(static_cast<std::size_t>(entry.size), '\0');
  std::size_t got = 0;
  while (got < data.size()) {
    const la_ssize_t n = archive_read_data(reader, data.data() + got, data.size() - got);
    if (n < 0) return make_error(archive.string() + ": reading " + entry.name + ": " + archive_message(reader), EIO);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got != data.size())
    return make_error(archive.string() + ": " + entry.name + " is truncated (the archive is incomplete)", EIO);
  return data;
}

// Past the current entry's data. A compressed stream has to be decompressed to skip, which a small input can make
// long: it is read block by block so that the deadline holds; an uncompressed one is skipped by seeking.
Result<void> skip_data(struct archive* reader, const ArchiveEntry& entry, const fs::path& archive,
                       const ArchiveLimits& limits) {
  const auto truncated = [&] {
    return make_error("checkpoint archive " + archive.string() + " is truncated in " + entry.name + ": " +
                      archive_message(reader), EIO);
  };
  if (!limits.deadline || archive_filter_code(reader, 0) == ARCHIVE_FILTER_NONE) {
    if (archive_read_data_skip(reader) < ARCHIVE_WARN) return truncated();
    return {};
  }
  const void* block = nullptr;
  std::size_t size = 0;
  la_int64_t offset = 0;
  for (;;) {
    const int rc = archive_read_data_block(reader, &block, &size, &offset);
    if (rc == ARCHIVE_EOF) return {};
    if (rc < ARCHIVE_WARN) return truncated();
    GPUCKPT_TRY_VOID(check_archive_deadline(limits, "reading " + archive.string()));
  }
}

// One validated pass. `visit` returns true when it consumed the entry's data itself.
using Visitor = std::function<Result<bool>(struct archive*, struct archive_entry*, const ArchiveEntry&)>;

Result<Totals> walk(const fs::path& path, const ArchiveLimits& limits, struct archive* reader, const Visitor& visit) {
  Totals totals;
  LinkGraph links;
  struct archive_entry* e = nullptr;
  for (;;) {
    GPUCKPT_TRY_VOID(check_archive_deadline(limits, "reading " + path.string()));
    const int rc = archive_read_next_header(reader, &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN)
      return make_error("checkpoint archive " + path.string() + " is corrupt or truncated: " + archive_message(reader),
                        EIO);
    GPUCKPT_TRY(const auto entry, check_entry(e, path, limits, totals));
    GPUCKPT_TRY_VOID(links.add(entry), path.string());
    GPUCKPT_TRY(const bool consumed, visit(reader, e, entry));
    if (!consumed) GPUCKPT_TRY_VOID(skip_data(reader, entry, path, limits));
  }
  if (totals.entries == 0) return make_error("checkpoint archive " + path.string() + " holds no entries");
  return totals;
}

// A tar inside the archive (rootfs-diff.tar: the container's changed files, which the runtime unpacks into its
// root), read as it streams out of the outer archive and held to the outer limits: entry count, declared sizes
// (which also bound the time: data can never exceed what the headers declare), names inside, intact stream.
Result<void> check_nested_tar(struct archive* outer, const ArchiveEntry& entry, const fs::path& archive,
                              const ArchiveLimits& limits) {
  struct Source {
    struct archive* outer;
    const ArchiveLimits& limits;
    std::vector<char> buffer = std::vector<char>(1 << 16);
  } source{outer, limits};
  const std::string where = archive.string() + ": " + entry.name;
  ReaderPtr nested(archive_read_new(), archive_read_free);
  archive_read_support_filter_all(nested.get());
  archive_read_support_format_tar(nested.get());
  const auto read_block = [](struct archive* self, void* data, const void** block) -> la_ssize_t {
    auto* from = static_cast<Source*>(data);
    if (from->limits.deadline && std::chrono::steady_clock::now() > *from->limits.deadline) {
      archive_set_error(self, ETIMEDOUT, "the time budget for reading it ran out");
      return -1;
    }
    *block = from->buffer.data();
    return archive_read_data(from->outer, from->buffer.data(), from->buffer.size());
  };
  if (archive_read_open(nested.get(), &source, nullptr, read_block, nullptr) != ARCHIVE_OK)
    return make_error(where + " is not a tar archive: " + archive_message(nested.get()), EBADMSG);
  std::size_t entries = 0;
  std::uint64_t bytes = 0;
  struct archive_entry* e = nullptr;
  for (;;) {
    const int rc = archive_read_next_header(nested.get(), &e);
    if (rc == ARCHIVE_EOF) return {};
    if (rc < ARCHIVE_WARN) return make_error(where + " is corrupt or truncated: " + archive_message(nested.get()), EIO);
    if (++entries > limits.max_entries)
      return make_error(where + " holds more than " + std::to_string(limits.max_entries) + " entries", EFBIG);
    const char* raw = archive_entry_pathname(e);
    GPUCKPT_TRY_VOID(normalise_entry_name(raw ? raw : ""), where);
    const la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    bytes += size > 0 ? static_cast<std::uint64_t>(size) : 0;
    if (bytes > limits.max_total_bytes)
      return make_error(where + " holds more than " + std::to_string(limits.max_total_bytes) + " bytes", EFBIG);
    if (archive_read_data_skip(nested.get()) < ARCHIVE_WARN)
      return make_error(where + " is truncated: " + archive_message(nested.get()), EIO);
  }
}

fs::path temporary_sibling(const fs::path& out) {
  static std::atomic<unsigned> counter{0};
  return out.parent_path() /
         ("." + out.filename().string() + ".partial-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
}

// CRIU's image of a tmpfs mounted at /dev (its device nodes): checkpoint/tmpfs-dev-<mount id>.tar.gz.img.
bool is_dev_tmpfs_image(const ArchiveEntry& e) {
  return e.kind == ArchiveEntry::Kind::File && e.name.rfind("checkpoint/tmpfs-dev-", 0) == 0 &&
         e.name.size() > 11 && e.name.compare(e.name.size() - 11, 11, ".tar.gz.img") == 0;
}

// The string at `key` of an object; empty when `j` is no object or the value no string.
std::string entry_string(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return {};
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

}  // namespace

ArchiveWriter::ArchiveWriter() : archive_(archive_write_new()) {}

ArchiveWriter::~ArchiveWriter() {
  if (!closed_) {
    archive_write_fail(archive_);    // fatal: the close below skips finishing the open entry (the padding)
    archive_write_close(archive_);   // but still ends the format, the filters and the output
  }
  archive_write_free(archive_);
}

int ArchiveWriter::close() {
  if (closed_) return ARCHIVE_OK;
  closed_ = true;
  return archive_write_close(archive_);
}

Result<void> check_archive_deadline(const ArchiveLimits& limits, const std::string& what) {
  if (limits.deadline && std::chrono::steady_clock::now() > *limits.deadline)
    return make_error(what + " ran past its time budget (the request's deadline or the watcher's per-file budget); "
                      "stopped", ETIMEDOUT);
  return {};
}

std::string archive_message(struct archive* a) {
  const char* text = archive_error_string(a);
  std::string message = text ? text : "unknown libarchive error";
  // libarchive's own texts ("Write error") leave out the cause that a user can act on (a full disk). EILSEQ is
  // libarchive's code for "not an archive format it knows" (ARCHIVE_ERRNO_FILE_FORMAT), not a system error: its
  // strerror ("Invalid or incomplete multibyte or wide character") would only mislead.
  if (const int err = archive_errno(a); err > 0 && err != EILSEQ && message.find(std::strerror(err)) == std::string::npos)
    message += std::string(" (") + std::strerror(err) + ")";
  return message;
}

Result<std::string> normalise_entry_name(std::string_view name) {
  if (name.size() > kMaxNameBytes) return make_error("entry name longer than 4096 bytes");
  if (name.find('\0') != std::string_view::npos) return make_error("entry name contains NUL");
  if (!name.empty() && name.front() == '/') return make_error("absolute entry name '" + std::string(name) + "'");
  std::string out;
  for (const auto& part : fs::path(name)) {
    const std::string s = part.string();
    if (s.empty() || s == ".") continue;
    if (s == "..") return make_error("entry name '" + std::string(name) + "' climbs out with '..'");
    if (!out.empty()) out += '/';
    out += s;
  }
  return out.empty() ? std::string(".") : out;
}

Result<std::vector<ArchiveEntry>> list_archive(const fs::path& archive, const ArchiveLimits& limits) {
  GPUCKPT_TRY(const auto reader, open_reader(archive, limits));
  std::vector<ArchiveEntry> entries;
  const Visitor collect = [&](struct archive*, struct archive_entry*, const ArchiveEntry& e) {
    entries.push_back(e);
    return Result<bool>(false);
  };
  GPUCKPT_TRY_VOID(walk(archive, limits, reader.get(), collect));
  return entries;
}

Result<std::optional<std::string>> read_archive_entry(const fs::path& archive, std::string_view name,
                                                      const ArchiveLimits& limits) {
  GPUCKPT_TRY(const auto reader, open_reader(archive, limits));
  std::optional<std::string> found;
  const Visitor read_named = [&](struct archive* r, struct archive_entry*, const ArchiveEntry& e) -> Result<bool> {
    if (e.name != name || e.kind != ArchiveEntry::Kind::File) return false;
    GPUCKPT_TRY(found, read_data(r, e, limits.max_metadata_bytes, archive));
    return true;
  };
  GPUCKPT_TRY_VOID(walk(archive, limits, reader.get(), read_named));
  return found;
}

namespace {

// The output's compression: the input's (a file rewritten in place), zstd (what the agent stores) or none (a
// stream for a runtime that unpacks it at once).
enum class OutputCompression { same_as_input, zstd, none };

Result<void> add_output_filter(struct archive* writer, struct archive* reader, OutputCompression compression,
                               const fs::path& in) {
  int code = ARCHIVE_FILTER_NONE;
  if (compression == OutputCompression::zstd) code = ARCHIVE_FILTER_ZSTD;
  if (compression == OutputCompression::same_as_input) code = archive_filter_code(reader, 0);
  switch (code) {
    case ARCHIVE_FILTER_ZSTD:
      archive_write_add_filter_zstd(writer);
      // Fast and on several cores: the GPU memory in an archive is compressed already (the plugin's images) or not
      // there at all (a chunk store); what is left, CPU pages, shrinks nearly as well at level 1. Options a
      // libarchive without them does not know are ignored (ARCHIVE_WARN).
      (void)archive_write_set_filter_option(writer, "zstd", "compression-level", "1");
      (void)archive_write_set_filter_option(writer, "zstd", "threads",
                                            std::to_string(std::clamp(::sysconf(_SC_NPROCESSORS_ONLN), 1L, 8L)).c_str());
      break;
    case ARCHIVE_FILTER_GZIP: archive_write_add_filter_gzip(writer); break;
    case ARCHIVE_FILTER_NONE: break;
    default:
      return make_error(in.string() + ": unsupported compression '" + std::string(archive_filter_name(reader, 0)) +
                        "' (expected zstd, gzip or none)");
  }
  archive_write_set_format_pax_restricted(writer);
  archive_write_set_bytes_per_block(writer, 1 << 20);
  archive_write_set_bytes_in_last_block(writer, 1);   // no zero padding after the end (or a compressed stream)
  return {};
}

// The one pass behind rewrite_archive, receive_archive and send_archive: every entry `reader` yields, validated
// by walk(), goes to the output with `edit` applied. `open_writer` runs once the input's compression is known (at
// the first entry). `target` names the output in messages.
class EditedCopy {
 public:
  EditedCopy(const fs::path& in, ArchiveWriter& output, const std::string& target, const ArchiveEdit& edit,
             const ArchiveLimits& limits, const std::function<Result<void>(struct archive*)>& open_writer)
      : in_(in), output_(output), writer_(output.get()), target_(target), edit_(edit), limits_(limits),
        open_writer_(open_writer) {}

  // walk()'s visitor: true when the entry's data was consumed here.
  Result<bool> copy_entry(struct archive* r, struct archive_entry* e, const ArchiveEntry& entry) {
    if (!writer_open_) {
      GPUCKPT_TRY_VOID(open_writer_(r));
      writer_open_ = true;
    }
    if (edit_.add.count(entry.name)) return false;   // written at the end instead
    if (edit_.take) {
      GPUCKPT_TRY(const bool taken, take(r, entry));
      if (taken) return false;   // the walk skips what it left unread
    }
    if (auto it = edit_.replace.find(entry.name); it != edit_.replace.end()) {
      edited_.insert(entry.name);
      GPUCKPT_TRY_VOID(write_blob(e, it->second));
      return false;   // the old content is skipped
    }
    if (auto it = edit_.transform.find(entry.name); it != edit_.transform.end())
      return transform(r, e, entry, it->second);
    if (auto it = edit_.peek.find(entry.name); it != edit_.peek.end() && entry.kind == ArchiveEntry::Kind::File &&
                                               entry.size <= limits_.max_metadata_bytes)
      return peek(r, e, entry, it->second);
    return copy_as_is(r, e, entry);
  }

  // After the walk: every replaced or changed entry was there; the added and appended entries; the output's end.
  Result<void> finish() {
    for (const auto& [name, data] : edit_.replace)
      if (!edited_.count(name)) return make_error(in_.string() + " has no entry " + name + " to replace");
    for (const auto& [name, change] : edit_.transform)
      if (!edited_.count(name)) return make_error(in_.string() + " has no entry " + name + " to change");
    for (const auto& [name, data] : edit_.add) {
      const auto e = new_file_entry(name, 0644);
      GPUCKPT_TRY_VOID(write_blob(e.get(), data));
    }
    if (edit_.append) {
      const EntryAppender append = [&](const std::string& name, std::span<const std::byte> data) -> Result<void> {
        GPUCKPT_TRY_VOID(check_archive_deadline(limits_, "writing " + target_));
        const auto e = new_file_entry(name, 0600);
        archive_entry_set_size(e.get(), static_cast<la_int64_t>(data.size()));
        if (archive_write_header(writer_, e.get()) < ARCHIVE_WARN ||
            archive_write_data(writer_, data.data(), data.size()) != static_cast<la_ssize_t>(data.size()))
          return write_failed();
        return {};
      };
      GPUCKPT_TRY_VOID(edit_.append(append));
    }
    if (output_.close() != ARCHIVE_OK)
      return make_error("finishing " + target_ + ": " + archive_message(writer_), EIO);
    return {};
  }

 private:
  using EntryPtr = std::unique_ptr<struct archive_entry, void (*)(struct archive_entry*)>;

  static EntryPtr new_file_entry(const std::string& name, mode_t mode) {
    EntryPtr e(archive_entry_new(), archive_entry_free);
    archive_entry_set_pathname(e.get(), name.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), mode);
    archive_entry_set_mtime(e.get(), ::time(nullptr), 0);
    return e;
  }

  Error write_failed() const { return make_error("writing " + target_ + ": " + archive_message(writer_), EIO); }
  Error truncated_in(struct archive* r, const ArchiveEntry& entry) const {
    return make_error(in_.string() + " is truncated in " + entry.name + ": " + archive_message(r), EIO);
  }

  Result<void> write_blob(struct archive_entry* e, const std::string& data) {
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    if (archive_write_header(writer_, e) < ARCHIVE_WARN ||
        archive_write_data(writer_, data.data(), data.size()) != static_cast<la_ssize_t>(data.size()))
      return write_failed();
    return {};
  }

  // edit.take, handed a reader of the entry's data: true when it took the entry out of the copy.
  Result<bool> take(struct archive* r, const ArchiveEntry& entry) {
    const EntryDataReader read = [&](char* data, std::size_t size) -> Result<std::size_t> {
      GPUCKPT_TRY_VOID(check_archive_deadline(limits_, "reading " + in_.string()));
      const la_ssize_t n = archive_read_data(r, data, size);
      if (n < 0) return truncated_in(r, entry);
      return static_cast<std::size_t>(n);
    };
    return edit_.take(entry, read);
  }

  Result<bool> transform(struct archive* r, struct archive_entry* e, const ArchiveEntry& entry,
                         const std::function<Result<std::string>(const std::string&)>& change) {
    if (entry.kind != ArchiveEntry::Kind::File)
      return make_error(in_.string() + ": " + entry.name + " is not a regular file");
    GPUCKPT_TRY(const auto old, read_data(r, entry, limits_.max_metadata_bytes, in_));
    GPUCKPT_TRY(const auto changed, change(old), in_.string());
    edited_.insert(entry.name);
    GPUCKPT_TRY_VOID(write_blob(e, changed));
    return true;
  }

  Result<bool> peek(struct archive* r, struct archive_entry* e, const ArchiveEntry& entry,
                    const std::function<void(const std::string&)>& see) {
    GPUCKPT_TRY(const auto seen, read_data(r, entry, limits_.max_metadata_bytes, in_));
    see(seen);
    GPUCKPT_TRY_VOID(write_blob(e, seen));
    return true;
  }

  Result<bool> copy_as_is(struct archive* r, struct archive_entry* e, const ArchiveEntry& entry) {
    if (archive_write_header(writer_, e) < ARCHIVE_WARN) return write_failed();
    if (entry.kind != ArchiveEntry::Kind::File) return false;
    std::uint64_t copied = 0;
    for (;;) {
      const la_ssize_t n = archive_read_data(r, buffer_.get(), kBufferSize);
      if (n < 0) return truncated_in(r, entry);
      if (n == 0) break;
      copied += static_cast<std::uint64_t>(n);
      GPUCKPT_TRY_VOID(check_archive_deadline(limits_, "copying " + in_.string()));
      if (archive_write_data(writer_, buffer_.get(), static_cast<std::size_t>(n)) != n) return write_failed();
    }
    if (copied != entry.size) return make_error(in_.string() + " is truncated in " + entry.name, EIO);
    return true;
  }

  const fs::path& in_;
  ArchiveWriter& output_;
  struct archive* writer_;
  const std::string& target_;
  const ArchiveEdit& edit_;
  const ArchiveLimits& limits_;
  const std::function<Result<void>(struct archive*)>& open_writer_;
  bool writer_open_ = false;
  std::set<std::string> edited_;
  // Filled before it is read, so never zeroed: zeroing 1 MiB per walk was most of what a small archive cost
  // (measured with perf under fuzz/archive_walk_fuzz).
  static constexpr std::size_t kBufferSize = 1 << 20;
  const std::unique_ptr<char[]> buffer_ = std::make_unique_for_overwrite<char[]>(kBufferSize);
};

Result<void> copy_edited(struct archive* reader, const fs::path& in, ArchiveWriter& output, const std::string& target,
                         const ArchiveEdit& edit, const ArchiveLimits& limits,
                         const std::function<Result<void>(struct archive*)>& open_writer) {
  EditedCopy copy(in, output, target, edit, limits, open_writer);
  const Visitor visit = [&copy](struct archive* r, struct archive_entry* e, const ArchiveEntry& entry) {
    return copy.copy_entry(r, e, entry);
  };
  GPUCKPT_TRY_VOID(walk(in, limits, reader, visit));
  return copy.finish();
}

// An archive written beside its final name and renamed into place only when complete and synced.
class TemporaryArchive {
 public:
  explicit TemporaryArchive(fs::path out) : out_(std::move(out)), temp_(temporary_sibling(out_)) {}
  ~TemporaryArchive() {
    if (fd_ >= 0) ::close(fd_);
    std::error_code ec;
    if (!committed_) fs::remove(temp_, ec);
  }
  TemporaryArchive(const TemporaryArchive&) = delete;
  TemporaryArchive& operator=(const TemporaryArchive&) = delete;

  Result<int> open() {
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0) return make_error("cannot create " + temp_.string() + ": " + std::strerror(errno), errno);
    return fd_;
  }
  const fs::path& temp() const { return temp_; }
  // fsync, rename over `out`, fsync its directory; the bytes written.
  Result<std::uint64_t> commit() {
    if (::fsync(fd_) != 0) return make_error("fsync " + temp_.string() + ": " + std::strerror(errno), errno);
    std::error_code ec;
    const auto bytes = fs::file_size(temp_, ec);
    fs::rename(temp_, out_, ec);
    if (ec) return make_error("cannot rename " + temp_.string() + " to " + out_.string() + ": " + ec.message(), EIO);
    committed_ = true;
    sync_parent_directory(out_);
    return static_cast<std::uint64_t>(bytes);
  }

 private:
  fs::path out_;
  fs::path temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// libarchive's side of an ArchiveByteSource or ArchiveByteSink: the first error keeps its own message and errno.
struct StreamEnd {
  const ArchiveByteSource* source = nullptr;
  const ArchiveByteSink* sink = nullptr;
  std::uint64_t bytes = 0;
  std::uint64_t max_bytes = 0;
  std::string name;
  std::unique_ptr<char[]> buffer;   // a source's: filled by it before libarchive reads it, so never zeroed
  std::size_t buffer_size = 0;
  std::optional<Error> failure;

  la_ssize_t fail(struct archive* a, Error error) {
    archive_set_error(a, error.errno_value ? error.errno_value : EIO, "%s", error.message.c_str());
    failure = std::move(error);
    return -1;
  }
  static la_ssize_t read(struct archive* a, void* self, const void** block) {
    auto* end = static_cast<StreamEnd*>(self);
    auto got = (*end->source)(end->buffer.get(), end->buffer_size);
    if (!got) return end->fail(a, got.error());
    end->bytes += got.value();
    if (end->bytes > end->max_bytes)
      return end->fail(a, make_error(end->name + " is more than " + std::to_string(end->max_bytes) +
                                         " bytes (raise checkpoints.max_archive_bytes if it is genuine)", EFBIG));
    *block = end->buffer.get();
    return static_cast<la_ssize_t>(got.value());
  }
  static la_ssize_t write(struct archive* a, void* self, const void* data, std::size_t size) {
    auto* end = static_cast<StreamEnd*>(self);
    auto sent = (*end->sink)(static_cast<const char*>(data), size);
    if (!sent) return end->fail(a, sent.error());
    end->bytes += size;
    return static_cast<la_ssize_t>(size);
  }
};

// copy_edited into a file beside `out`, renamed over it once complete and synced. A failure of the input stream
// (`input_failure`, when given) is reported as it is rather than as libarchive's reading of it.
Result<std::uint64_t> copy_to_file(struct archive* reader, const fs::path& in, const fs::path& out,
                                   const ArchiveEdit& edit, const ArchiveLimits& limits, OutputCompression compression,
                                   const std::optional<Error>* input_failure) {
  TemporaryArchive file(out);
  GPUCKPT_TRY(const int fd, file.open());
  ArchiveWriter writer;
  auto copied = copy_edited(reader, in, writer, file.temp().string(), edit, limits,
                            [&](struct archive* r) -> Result<void> {
                              GPUCKPT_TRY_VOID(add_output_filter(writer.get(), r, compression, in));
                              if (archive_write_open_fd(writer.get(), fd) != ARCHIVE_OK)
                                return make_error("cannot write " + file.temp().string() + ": " +
                                                  archive_message(writer.get()), EIO);
                              return {};
                            });
  if (!copied) return input_failure && *input_failure ? **input_failure : copied.error();
  if (edit.before_commit) GPUCKPT_TRY_VOID(edit.before_commit());
  return file.commit();
}

}  // namespace

Result<std::uint64_t> rewrite_archive(const fs::path& in, const fs::path& out, const ArchiveEdit& edit,
                                      const ArchiveLimits& limits) {
  GPUCKPT_TRY(const auto reader, open_reader(in, limits));
  return copy_to_file(reader.get(), in, out, edit, limits, OutputCompression::same_as_input, nullptr);
}

Result<std::uint64_t> receive_archive(const ArchiveByteSource& read, std::string_view source, const fs::path& out,
                                      const ArchiveEdit& edit, const ArchiveLimits& limits) {
  StreamEnd input;
  input.source = &read;
  input.max_bytes = limits.max_archive_bytes;
  input.name = std::string(source);
  input.buffer_size = 1 << 20;
  input.buffer = std::make_unique_for_overwrite<char[]>(input.buffer_size);
  ReaderPtr reader(archive_read_new(), archive_read_free);
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_tar(reader.get());
  if (archive_read_open(reader.get(), &input, nullptr, &StreamEnd::read, nullptr) != ARCHIVE_OK)
    return input.failure ? *input.failure
                         : make_error("cannot read the archive from " + input.name + ": " +
                                      archive_message(reader.get()), EIO);
  return copy_to_file(reader.get(), fs::path(source), out, edit, limits, OutputCompression::zstd, &input.failure);
}

Result<void> send_archive(const fs::path& in, const ArchiveByteSink& write, const ArchiveEdit& edit,
                          const ArchiveLimits& limits) {
  GPUCKPT_TRY(const auto reader, open_reader(in, limits));
  StreamEnd output;
  output.sink = &write;
  output.name = "the stream of " + in.string();
  ArchiveWriter writer;
  auto copied = copy_edited(reader.get(), in, writer, output.name, edit, limits,
                            [&](struct archive* r) -> Result<void> {
                              GPUCKPT_TRY_VOID(add_output_filter(writer.get(), r, OutputCompression::none, in));
                              if (archive_write_open(writer.get(), &output, nullptr, &StreamEnd::write, nullptr) !=
                                  ARCHIVE_OK)
                                return make_error("cannot start " + output.name + ": " +
                                                  archive_message(writer.get()), EIO);
                              return {};
                            });
  if (!copied) return output.failure ? *output.failure : copied.error();
  return edit.before_commit ? edit.before_commit() : Result<void>{};
}

namespace {

// inspect_checkpoint_archive's pass: what it counts of each entry and what it keeps. The /dev tmpfs images and the
// GPU memory manifests are kept in memory, bounded together by max_metadata_bytes; so is each metadata file.
class CheckpointSurvey {
 public:
  CheckpointSurvey(const fs::path& archive, const ArchiveLimits& limits, CheckpointInfo& info)
      : archive_(archive), limits_(limits), info_(info) {}

  // walk()'s visitor: true when the entry's data was read here.
  Result<bool> entry(struct archive* r, const ArchiveEntry& e) {
    if (e.name == "checkpoint/inventory.img") info_.has_criu_images = true;
    if (is_dev_tmpfs_image(e)) {
      GPUCKPT_TRY(info_.dev_tmpfs_images[e.name], read_kept(r, e));
      return true;
    }
    if (e.kind == ArchiveEntry::Kind::File && e.name.starts_with(std::string(kCarriedChunksDir) + "/")) {
      ++info_.carried_chunks;
      info_.carried_chunk_bytes += e.size;
      return false;
    }
    if (e.kind == ArchiveEntry::Kind::File && e.name.starts_with("checkpoint/")) {
      const std::string base = e.name.substr(11);
      if (gpu_image::is_manifest_name(base)) return keep_memory_manifest(r, e, base);
      if (base.starts_with(gpu_image::kFilePrefix)) {   // a main file or one of its shards
        info_.gpu_image_files += gpu_image::vpid_from_file_name(base) > 0 ? 1 : 0;
        info_.gpu_image_bytes += e.size;
        return false;
      }
    }
    if (e.name == "rootfs-diff.tar" && e.kind == ArchiveEntry::Kind::File) {
      GPUCKPT_TRY_VOID(check_nested_tar(r, e, archive_, limits_));
      return false;   // the walk skips what is left of it
    }
    if (e.kind != ArchiveEntry::Kind::File ||
        (e.name != "config.dump" && e.name != "spec.dump" && e.name != kRecordEntry))
      return false;
    GPUCKPT_TRY(metadata_[e.name], read_data(r, e, limits_.max_metadata_bytes, archive_));
    return true;
  }

  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  Result<std::string> read_kept(struct archive* r, const ArchiveEntry& e) {
    GPUCKPT_TRY(auto data, read_data(r, e, limits_.max_metadata_bytes - kept_bytes_, archive_));
    kept_bytes_ += data.size();
    return data;
  }

  Result<bool> keep_memory_manifest(struct archive* r, const ArchiveEntry& e, const std::string& base) {
    // Which of two copies a restore reads is tar's business; which one a reference keeps must not be.
    if (info_.memory_manifests.contains(base))
      return make_error(archive_.string() + ": " + e.name + " is in the archive twice: "
                        "refusing it (a checkpoint has one manifest per process or page image)", EBADMSG);
    GPUCKPT_TRY(info_.memory_manifests[base], read_kept(r, e));
    return true;
  }

  const fs::path& archive_;
  const ArchiveLimits& limits_;
  CheckpointInfo& info_;
  std::map<std::string, std::string> metadata_;
  std::size_t kept_bytes_ = 0;
};

// Who made the checkpoint, from the marks each engine leaves in config.dump and the spec's annotations.
std::string checkpoint_engine(const nlohmann::json& config, const nlohmann::json& spec) {
  static const nlohmann::json kNone = nlohmann::json::object();
  const auto annotations_it = spec.find("annotations");
  const nlohmann::json& annotations =
      annotations_it != spec.end() && annotations_it->is_object() ? *annotations_it : kNone;
  if (entry_string(annotations, "io.container.manager") == "libpod") return "podman";
  if (annotations.contains("io.kubernetes.cri-o.ContainerID") || annotations.contains("io.kubernetes.cri-o.Name"))
    return "cri-o";
  if (entry_string(config, "engine") == "containerd" ||
      annotations.contains("io.kubernetes.cri.container-type"))   // containerd's CRI plugin (1.7 and 2.x)
    return "containerd";
  return "unknown";
}

// The container's facts from config.dump and spec.dump. Descriptive fields: a wrong type reads as absent (they
// are shown, never acted on).
void read_container_facts(const nlohmann::json& config, CheckpointInfo& info) {
  info.container_name = entry_string(config, "name");
  info.container_id = entry_string(config, "id");
  info.image = entry_string(config, "rootfsImageName");
  info.image_id = entry_string(config, "rootfsImageID");
  info.raw_image = entry_string(config, "RawImageName");
  if (info.raw_image.empty()) info.raw_image = entry_string(config, "rootfsImageRef");
  info.runtime = entry_string(config, "runtime");
  if (info.runtime.empty()) info.runtime = entry_string(config, "ociRuntime");
  info.created = entry_string(config, "createdTime");
  info.engine = checkpoint_engine(config, info.spec);
  if (auto linux_it = info.spec.find("linux"); linux_it != info.spec.end() && linux_it->is_object())
    if (auto devices = linux_it->find("devices"); devices != linux_it->end() && devices->is_array())
      for (const auto& d : *devices)
        if (auto path = entry_string(d, "path"); !path.empty()) info.spec_devices.push_back(path);
}

// config.dump and spec.dump, which make the archive a container checkpoint, and gpuckpt's record where it has one.
Result<void> read_checkpoint_metadata(const fs::path& archive, const std::map<std::string, std::string>& metadata,
                                      CheckpointInfo& info) {
  for (const char* required : {"config.dump", "spec.dump"})
    if (!metadata.count(required))
      return make_error(archive.string() + " is not a container checkpoint: it has no " + required +
                        " (expected an archive from `podman container checkpoint --export` or kubelet)");
  GPUCKPT_TRY(const auto config, parse_json(metadata.at("config.dump"), archive.string() + ": config.dump"));
  GPUCKPT_TRY(auto spec, parse_json(metadata.at("spec.dump"), archive.string() + ": spec.dump"));
  if (!config.is_object()) return make_error(archive.string() + ": config.dump is not a JSON object");
  if (!spec.is_object()) return make_error(archive.string() + ": spec.dump is not a JSON object");
  info.spec = std::move(spec);
  read_container_facts(config, info);
  if (auto it = metadata.find(kRecordEntry); it != metadata.end()) {
    const std::string where = archive.string() + ": " + kRecordEntry;
    GPUCKPT_TRY(const auto json, parse_json(it->second, where));
    GPUCKPT_TRY(info.gpus, checkpoint_record_from_json(json, where));
  }
  return {};
}

}  // namespace

Result<CheckpointInfo> inspect_checkpoint_archive(const fs::path& archive, const ArchiveLimits& limits) {
  GPUCKPT_TRY(const auto reader, open_reader(archive, limits));
  CheckpointInfo info;
  CheckpointSurvey survey(archive, limits, info);
  const Visitor visit = [&survey](struct archive* r, struct archive_entry*, const ArchiveEntry& e) {
    return survey.entry(r, e);
  };
  GPUCKPT_TRY(const auto totals, walk(archive, limits, reader.get(), visit));
  info.entry_count = totals.entries;
  info.content_bytes = totals.bytes;
  std::error_code ec;
  info.archive_bytes = fs::file_size(archive, ec);
  GPUCKPT_TRY_VOID(read_checkpoint_metadata(archive, survey.metadata(), info));
  return info;
}

ArchiveEdit checkpoint_annotation(const CheckpointGpuRecord& record) {
  ArchiveEdit edit;
  edit.transform["spec.dump"] = [record](const std::string& text) -> Result<std::string> {
    GPUCKPT_TRY(auto spec, parse_json(text, "spec.dump"));
    if (!spec.is_object()) return make_error("spec.dump is not a JSON object");
    auto& annotations = spec["annotations"];
    if (annotations.is_null()) annotations = nlohmann::json::object();
    if (!annotations.is_object())
      return make_error("spec.dump's annotations is " + json_type(annotations) + ", not an object");
    std::string used;
    for (const auto& id : record.record.used_gpu_ids) used += (used.empty() ? "" : ",") + id;
    annotations[kAnnotationVersion] = std::to_string(CheckpointGpuRecord::kVersion);
    annotations[kAnnotationCheckpointId] = record.checkpoint_id;
    annotations[kAnnotationUsedGpus] = used;
    annotations[kAnnotationRecordEntry] = kRecordEntry;
    // CRI-O restores a container with the annotations this JSON holds (the original container's), not with
    // spec.dump's own: the checkpoint id goes in too, so gpuckpt-nri recognises the restore (restore_recognition.h).
    if (auto crio = annotations.find("io.kubernetes.cri-o.Annotations"); crio != annotations.end() && crio->is_string()) {
      GPUCKPT_TRY(auto carried, parse_json(crio->get<std::string>(), "spec.dump's io.kubernetes.cri-o.Annotations"));
      // "null" where the CreateContainer request had no annotations (CRI-O marshals a nil map)
      if (carried.is_null()) carried = nlohmann::json::object();
      if (!carried.is_object()) return make_error("spec.dump's io.kubernetes.cri-o.Annotations is not a JSON object");
      carried[kAnnotationCheckpointId] = record.checkpoint_id;
      *crio = carried.dump();
    }
    return spec.dump();
  };
  edit.add[kRecordEntry] = to_json(record).dump(2);
  return edit;
}

Result<std::uint64_t> annotate_checkpoint_archive(const fs::path& in, const fs::path& out,
                                                  const CheckpointGpuRecord& record, const ArchiveLimits& limits) {
  return rewrite_archive(in, out, checkpoint_annotation(record), limits);
}

}  // namespace gpuckpt
