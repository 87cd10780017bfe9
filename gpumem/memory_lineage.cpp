#include "gpumem/memory_lineage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <ctime>
#include <sstream>
#include <string_view>
#include <vector>

#include "base/errno_text.h"
#include "gpumem/chunk_store.h"

namespace gpuckpt::memory_lineage {
namespace {

namespace cs = chunk_store;
namespace gi = gpu_image;

template <class Number>
bool parse_number(std::string_view text, Number& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

// "<32 hex>-<pid>-<ticks>.json" into its identity, or false.
bool parse_record_name(std::string_view name, ProcessIdentity& out) {
  constexpr std::string_view suffix = ".json";
  if (name.size() < 32 + 4 + suffix.size() || !name.ends_with(suffix) || name[32] != '-' ||
      !cs::is_lower_hex(name.substr(0, 32), 32))
    return false;
  const auto rest = name.substr(33, name.size() - 33 - suffix.size());
  const auto dash = rest.find('-');
  if (dash == std::string_view::npos) return false;
  out.boot_id = std::string(name.substr(0, 32));
  return parse_number(rest.substr(0, dash), out.pid) && out.pid > 0 &&
         parse_number(rest.substr(dash + 1), out.start_ticks);
}

constexpr long kPartialGraceSeconds = 600;   // a write in flight is never that old

std::string store_root(const std::string& node_store) {
  return node_store.empty() ? std::string(cs::kNodeStoreDir) : node_store;
}

std::string records_shown(const std::string& node_store, const char* dir = kRecordsDir) {
  return store_root(node_store) + "/" + dir;
}

// A directory of the node store (its records by default), created when missing, once the store is known to be
// root's alone. `create_store`: the store too.
Result<int> open_records_dir(const std::string& node_store, bool create, const char* dir_name = kRecordsDir,
                             bool create_store = true) {
  const std::string root = store_root(node_store);
  GPUCKPT_TRY(const auto store, cs::Store::open(root, create && create_store));
  if (!gi::ingest_verified_store(*store, root))
    return make_error("the node store " + root + " is not root's alone (owner root, not writable by group or others)",
                      EPERM);
  const std::string shown = records_shown(node_store, dir_name);
  if (create && ::mkdirat(store->root_fd(), dir_name, 0700) != 0 && errno != EEXIST)
    return make_error("cannot create " + shown + ": " + errno_text(errno), errno);
  const int fd = ::openat(store->root_fd(), dir_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open " + shown + ": " + errno_text(errno), errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    ::close(fd);
    return make_error(shown + " is not root's alone", EPERM);
  }
  return fd;
}

// The names in `dir_fd`, each given to `fn` (a copy of the listing: `fn` may remove what it is given).
template <class Fn>
void for_each_name(int dir_fd, Fn&& fn) {
  const int fd = ::dup(dir_fd);
  if (fd < 0) return;
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(dir)) names.emplace_back(e->d_name);
  ::closedir(dir);
  for (const std::string& name : names) fn(name);
}

enum class Entry { other, live, gone };

// Removes from `dir_fd` every entry `classify` calls gone, and the temporary files of writes that died before their
// rename long ago; returns how many entries it called live.
template <class Classify>
std::size_t remove_gone_entries(int dir_fd, Classify&& classify) {
  std::size_t live = 0;
  const time_t now = ::time(nullptr);
  for_each_name(dir_fd, [&](const std::string& name) {
    Entry entry = Entry::other;
    if (name.starts_with(".") && name.ends_with(".partial")) {
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_mtime + kPartialGraceSeconds < now)
        entry = Entry::gone;
    } else {
      entry = classify(name);
    }
    if (entry == Entry::gone) (void)::unlinkat(dir_fd, name.c_str(), 0);
    if (entry == Entry::live) ++live;
  });
  return live;
}

// Removes the records of processes that are gone (another boot, no such pid, or a pid started at another time);
// returns how many records stay.
std::size_t remove_gone(int dir_fd, const HostRoot& host, const std::string& boot_id) {
  return remove_gone_entries(dir_fd, [&](const std::string& name) {
    ProcessIdentity recorded;
    if (!parse_record_name(name, recorded)) return Entry::other;
    auto now = identify_process(recorded.pid, host);
    return recorded.boot_id != boot_id || !now || now->start_ticks != recorded.start_ticks ? Entry::gone : Entry::live;
  });
}

// "<pid>.json" into its pid, or 0.
int spooled_pid(std::string_view name) {
  constexpr std::string_view suffix = ".json";
  int pid = 0;
  if (!name.ends_with(suffix) || !parse_number(name.substr(0, name.size() - suffix.size()), pid)) return 0;
  return pid > 0 ? pid : 0;
}

std::string spool_name(int pid) { return std::to_string(pid) + ".json"; }

// Removes the spooled files of pids that are gone and partial writes long dead, except `keep`'s; returns how many
// files of live pids stay.
std::size_t remove_gone_restores(int dir_fd, const HostRoot& host, int keep) {
  return remove_gone_entries(dir_fd, [&](const std::string& name) {
    const int pid = spooled_pid(name);
    if (pid == 0 || pid == keep) return Entry::other;
    struct stat st {};
    return ::stat(host.resolve("proc/" + std::to_string(pid)).c_str(), &st) != 0 ? Entry::gone : Entry::live;
  });
}

// The spooled file `name` of `dir_fd` (shown as `shown`), removed as it is read: none when there is no such file; an
// error for one that is not a regular file of at most kMaxRestoreTimingsBytes (removed all the same).
Result<std::optional<std::string>> take_spooled(int dir_fd, const std::string& name, const std::string& shown) {
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return std::optional<std::string>();
    (void)::unlinkat(dir_fd, name.c_str(), 0);
    return make_error("cannot open " + shown + ": " + errno_text(err), err);
  }
  (void)::unlinkat(dir_fd, name.c_str(), 0);
  struct stat st {};
  Result<std::optional<std::string>> out = make_error(shown + " is not a regular file of at most " +
                                                      std::to_string(kMaxRestoreTimingsBytes) + " bytes", EINVAL);
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) <= kMaxRestoreTimingsBytes) {
    std::string text(static_cast<std::size_t>(st.st_size), '\0');
    const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
    if (n == static_cast<ssize_t>(text.size())) out = std::optional<std::string>(std::move(text));
    else out = make_error("cannot read " + shown + ": " + errno_text(n < 0 ? errno : EIO), n < 0 ? errno : EIO);
  }
  ::close(fd);
  return out;
}

}  // namespace

std::string ProcessIdentity::record_name() const {
  return boot_id + "-" + std::to_string(pid) + "-" + std::to_string(start_ticks) + ".json";
}

Result<ProcessIdentity> identify_process(int pid, const HostRoot& host) {
  ProcessIdentity id;
  id.pid = pid;
  const std::string boot_path = "proc/sys/kernel/random/boot_id";
  auto boot = host.read_line(boot_path);
  if (boot) std::erase(*boot, '-');
  if (!boot || !cs::is_lower_hex(*boot, 32))
    return make_error("cannot read this boot's id from " + host.resolve(boot_path).string(), EIO);
  id.boot_id = *boot;
  const std::string stat_path = "proc/" + std::to_string(pid) + "/stat";
  auto stat = host.read_file(stat_path, 4096);
  const auto close = stat ? stat->rfind(')') : std::string::npos;
  if (close == std::string::npos)
    return make_error("pid " + std::to_string(pid) + ": cannot read " + host.resolve(stat_path).string(), ESRCH);
  // Fields after the command's ")": state is field 3, the start time field 22.
  std::istringstream fields(stat->substr(close + 1));
  std::string field;
  for (int n = 3; n <= 22 && fields >> field; ++n)
    if (n == 22 && parse_number(std::string_view(field), id.start_ticks)) return id;
  return make_error("pid " + std::to_string(pid) + ": no start time in " + host.resolve(stat_path).string(), EIO);
}

Result<void> remember(const std::string& node_store, const ProcessIdentity& process, const gi::Manifest& manifest,
                      const HostRoot& host) {
  GPUCKPT_TRY(const int dir_fd, open_records_dir(node_store, true));
  Result<void> result;
  if (remove_gone(dir_fd, host, process.boot_id) >= kMaxProcessRecords) {
    result = make_error("the node keeps the last GPU memory manifest of " + std::to_string(kMaxProcessRecords) +
                        " live processes already", ENOSPC);
  } else {
    // No fsync: a record lost in a crash costs the next dump its speed, nothing else.
    result = gi::write_file_atomically(dir_fd, process.record_name(), gi::serialize_manifest(manifest), false,
                                       records_shown(node_store));
  }
  ::close(dir_fd);
  return result;
}

Result<gi::Manifest> recall(const std::string& node_store, const ProcessIdentity& process) {
  GPUCKPT_TRY(const int dir_fd, open_records_dir(node_store, false));
  auto manifest = gi::read_manifest(dir_fd, process.record_name());
  ::close(dir_fd);
  return manifest;
}

Result<void> spool_restore_timings(const std::string& node_store, int pid, const std::string& text,
                                   const HostRoot& host) {
  if (pid <= 0) return make_error("internal: no restored pid to spool restore timings for", EINVAL);
  if (text.size() > kMaxRestoreTimingsBytes)
    return make_error("restore timings of " + std::to_string(text.size()) + " bytes: more than " +
                      std::to_string(kMaxRestoreTimingsBytes), EINVAL);
  // Only into a node store that exists: a node that restores inline archives only gets none for this.
  GPUCKPT_TRY(const int dir_fd, open_records_dir(node_store, true, kRestoreTimingsDir, false));
  Result<void> result;
  if (remove_gone_restores(dir_fd, host, pid) >= kMaxSpooledRestores) {
    result = make_error(records_shown(node_store, kRestoreTimingsDir) + " holds the restore timings of " +
                        std::to_string(kMaxSpooledRestores) + " live processes already", ENOSPC);
  } else {
    // No fsync: timings lost in a crash cost the job record its split, nothing else.
    result = gi::write_file_atomically(dir_fd, spool_name(pid), text, false,
                                       records_shown(node_store, kRestoreTimingsDir));
  }
  ::close(dir_fd);
  return result;
}

Result<std::optional<std::string>> take_restore_timings(const std::string& node_store, int pid) {
  if (pid <= 0) return std::optional<std::string>();
  auto opened = open_records_dir(node_store, false, kRestoreTimingsDir);
  if (!opened) {
    if (opened.error().errno_value == ENOENT) return std::optional<std::string>();
    return opened.error();
  }
  const std::string name = spool_name(pid);
  auto taken = take_spooled(*opened, name, records_shown(node_store, kRestoreTimingsDir) + "/" + name);
  ::close(*opened);
  return taken;
}

std::vector<std::string> take_stale_restore_timings(const std::string& node_store, long min_age_seconds) {
  std::vector<std::string> taken;
  auto opened = open_records_dir(node_store, false, kRestoreTimingsDir);
  if (!opened) return taken;
  const int dir_fd = *opened;
  const std::string shown = records_shown(node_store, kRestoreTimingsDir);
  const time_t now = ::time(nullptr);
  std::size_t seen = 0;
  for_each_name(dir_fd, [&](const std::string& name) {
    struct stat st {};
    if (seen >= kMaxSpooledRestores || spooled_pid(name) == 0 ||
        ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_mtime + min_age_seconds > now)
      return;
    ++seen;
    if (auto text = take_spooled(dir_fd, name, shown + "/" + name); text && *text) taken.push_back(std::move(**text));
  });
  ::close(dir_fd);
  return taken;
}

}  // namespace gpuckpt::memory_lineage
