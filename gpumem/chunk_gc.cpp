#include "gpumem/chunk_gc.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include "base/errno_text.h"


namespace gpuckpt::chunk_gc {
namespace {

namespace cs = chunk_store;

bool before(const struct ::timespec& a, const struct ::timespec& b) {
  return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

bool is_fanout_name(const char* name) { return cs::is_lower_hex(name, 2); }

bool is_partial_name(std::string_view name) { return name.starts_with(".") && name.ends_with(".partial"); }

// The entries of an open directory (`fd` stays open), "." and ".." left out.
Result<std::vector<std::string>> entries_of(int fd, const std::string& shown) {
  const int dup_fd = ::dup(fd);
  DIR* dir = dup_fd < 0 ? nullptr : ::fdopendir(dup_fd);
  if (dir == nullptr) {
    const int err = errno;
    if (dup_fd >= 0) ::close(dup_fd);
    return make_error("cannot read " + shown + ": " + errno_text(err), err);
  }
  ::rewinddir(dir);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(dir);
  return names;
}

// Moves `name` from `from_fd` to `to_fd` unless `to_fd` has it already, in which case the `from_fd` copy (the same
// bytes: the name is their digest) goes.
void move_back(int from_fd, int to_fd, const std::string& name) {
  if (cs::rename_noreplace(from_fd, name.c_str(), to_fd, name.c_str()) != 0 && errno == EEXIST)
    (void)::unlinkat(from_fd, name.c_str(), 0);
}

}  // namespace

Result<std::unique_ptr<Collection>> Collection::begin(cs::Store& store, Options options) {
  std::unique_ptr<Collection> c(new Collection(store, options));
  c->report_.dry_run = !options.remove;
  const std::string root = store.root().string();
  c->lock_fd_ = ::openat(store.root_fd(), kLockFile, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (c->lock_fd_ < 0)
    return make_error("cannot open " + root + "/" + kLockFile + ": " + errno_text(errno), errno);
  if (::flock(c->lock_fd_, LOCK_EX | LOCK_NB) != 0)
    return make_error(errno == EWOULDBLOCK ? "another garbage collection of the chunk store " + root +
                                                 " is running (it holds " + root + "/" + kLockFile + "); try again "
                                                 "when it has finished"
                                           : "cannot lock " + root + "/" + kLockFile + ": " + errno_text(errno),
                      errno == EWOULDBLOCK ? EBUSY : errno);
  // The start, in the store's clock: a file written now (on a shared volume, its server sets the time, the same
  // clock that stamps the chunks the nodes write and touch).
  // One name, truncated: the lock makes this collection its only writer, so a killed one leaves nothing new.
  const std::string temp = std::string(".") + kGenerationFile + ".partial";
  const int fd = ::openat(store.root_fd(), temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return make_error("cannot write " + root + "/" + temp + ": " + errno_text(errno), errno);
  const std::string text = "pid " + std::to_string(::getpid()) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  struct stat st {};
  const bool stamped = written && ::fstat(fd, &st) == 0;
  ::close(fd);
  if (!stamped || ::renameat(store.root_fd(), temp.c_str(), store.root_fd(), kGenerationFile) != 0) {
    const int err = errno;
    (void)::unlinkat(store.root_fd(), temp.c_str(), 0);
    return make_error("cannot write " + root + "/" + kGenerationFile + ": " + errno_text(err), err);
  }
  c->cutoff_ = st.st_mtim;
  c->cutoff_.tv_sec -= static_cast<time_t>(options.grace.count());
  return c;
}

Collection::~Collection() {
  if (lock_fd_ >= 0) ::close(lock_fd_);   // releases the flock
}

bool Collection::keep(const cs::Digest& d, const struct ::timespec& mtime) const {
  return refcounts_.contains(d) || !before(mtime, cutoff_);
}

Result<gpu_image::Manifest> read_reference(const cs::Store& store, const std::string& name) {
  const std::string shown = (store.root() / cs::kRefsDir / name).string();
  GPUCKPT_TRY(const std::string text, store.read_ref(name, gpu_image::kMaxManifestBytes));
  auto manifest = gpu_image::parse_manifest(text, shown);
  if (!manifest) return make_error(manifest.error().message, EIO);
  return manifest;
}

namespace {

// The distinct stored chunks a manifest names, with the sizes of their files as this gpuckpt lays them out (a raw
// chunk an older one wrote is 4064 bytes smaller: not worth a stat of every chunk for a summary).
std::map<cs::Digest, std::uint64_t> stored_chunks(const gpu_image::Manifest& m) {
  std::map<cs::Digest, std::uint64_t> out;
  for (std::size_t i = 0; i < m.entries.size(); ++i)
    if (m.entries[i].encoding != gpu_image::Encoding::Zero) {
      cs::ChunkHeader header;
      header.encoding = static_cast<std::uint8_t>(m.entries[i].encoding);
      header.stored_size = m.entries[i].stored_size;
      header.version = cs::layout_version(header.encoding);
      out.emplace(m.digests[i], header.file_size());
    }
  return out;
}

}  // namespace

Result<std::vector<ReferenceSummary>> summarize_references(const cs::Store& store) {
  GPUCKPT_TRY(const auto names, store.list_refs());
  std::vector<ReferenceSummary> out;
  std::vector<std::map<cs::Digest, std::uint64_t>> chunks;
  std::map<cs::Digest, std::uint32_t> counts;
  for (const std::string& name : names) {
    auto manifest = read_reference(store, name);
    if (!manifest && manifest.error().errno_value == ENOENT) continue;
    GPUCKPT_TRY_VOID(manifest);
    ReferenceSummary s;
    s.name = name;
    s.checkpoint = manifest->checkpoint;
    s.vpid = manifest->header.vpid;
    chunks.push_back(stored_chunks(*manifest));
    for (const auto& [digest, bytes] : chunks.back()) {
      ++counts[digest];
      s.stored_bytes += bytes;
    }
    s.chunks = chunks.back().size();
    out.push_back(std::move(s));
  }
  for (std::size_t r = 0; r < out.size(); ++r)
    for (const auto& [digest, bytes] : chunks[r])
      if (counts[digest] == 1) out[r].exclusive_bytes += bytes;
  return out;
}

Result<void> Collection::mark() {
  GPUCKPT_TRY(const auto names, store_.list_refs());
  for (const std::string& name : names) {
    auto manifest = read_reference(store_, name);
    if (!manifest && manifest.error().errno_value == ENOENT) continue;   // removed since the listing: holds nothing
    if (!manifest)
      return make_error("garbage collection of " + store_.root().string() + " stopped, nothing removed: the reference " +
                        (store_.root() / cs::kRefsDir / name).string() + " cannot be read (" +
                        manifest.error().message + "), so which chunks it holds is unknown. If its checkpoint is "
                        "gone, remove it: gpuckpt store unref " + name.substr(0, 32), EIO);
    for (const auto& [digest, bytes] : stored_chunks(*manifest)) {
      ++refcounts_[digest];
      first_ref_.try_emplace(digest, name);
    }
    ++report_.refs;
  }
  report_.live_chunks = refcounts_.size();
  marked_ = true;
  return {};
}

Result<void> Collection::recover() {
  if (!marked_) return make_error("internal: recover before mark", EINVAL);
  GPUCKPT_TRY(const int trash_fd, store_.open_trash_dir());
  const std::string shown = (store_.root() / cs::kTrashDir).string();
  auto names = entries_of(trash_fd, shown);
  Result<void> result;
  if (!names) result = names.error();
  for (const std::string& name : names ? *names : std::vector<std::string>{}) {
    auto digest = cs::parse_digest(name, "trash entry");
    struct stat st {};
    if (!digest || ::fstatat(trash_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      report_.unknown.push_back(shown + "/" + name);
      continue;
    }
    if (keep(*digest, st.st_mtim)) {
      ++report_.returned_chunks;
      if (report_.dry_run) continue;
      const std::string fanout = name.substr(0, 2);
      if (::mkdirat(store_.hash_fd(), fanout.c_str(), 0700) != 0 && errno != EEXIST) continue;
      const int dir_fd = ::openat(store_.hash_fd(), fanout.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (dir_fd < 0) continue;
      move_back(trash_fd, dir_fd, name);
      ::close(dir_fd);
    } else {
      // Left by a collection that was killed: garbage, removed by empty_trash.
      ++report_.garbage_chunks;
      report_.garbage_bytes += static_cast<std::uint64_t>(st.st_size);
      if (report_.garbage.size() < kMaxListed) report_.garbage.push_back({*digest, static_cast<std::uint64_t>(st.st_size)});
    }
  }
  ::close(trash_fd);
  return result;
}

Result<void> Collection::sweep_partials(int dir_fd, const std::string& shown) {
  GPUCKPT_TRY(const auto names, entries_of(dir_fd, shown));
  for (const std::string& name : names) {
    struct stat st {};
    if (!is_partial_name(name) || ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!before(st.st_mtim, cutoff_)) continue;   // a writer may still be writing it
    if (report_.dry_run || ::unlinkat(dir_fd, name.c_str(), 0) == 0) ++report_.partials_removed;
  }
  return {};
}

Result<void> Collection::sweep_fanout(int dir_fd, const std::string& fanout, int trash_fd,
                                      std::set<cs::Digest>& found) {
  const std::string shown = (store_.root() / cs::kHashName / fanout).string();
  GPUCKPT_TRY(const auto names, entries_of(dir_fd, shown));
  for (const std::string& name : names) {
    struct stat st {};
    if (is_partial_name(name)) continue;   // sweep_partials
    auto digest = cs::parse_digest(name, "chunk file name");
    if (!digest || name.compare(0, 2, fanout) != 0) {
      report_.unknown.push_back(shown + "/" + name);
      continue;
    }
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;   // gone since the listing
    if (!S_ISREG(st.st_mode)) {
      report_.unknown.push_back(shown + "/" + name);
      continue;
    }
    ++report_.chunks;
    report_.chunk_bytes += static_cast<std::uint64_t>(st.st_size);
    found.insert(*digest);
    if (keep(*digest, st.st_mtim)) {
      if (!refcounts_.contains(*digest)) {
        ++report_.young_chunks;
        if (options_.list_young) report_.young.push_back({*digest, static_cast<std::uint64_t>(st.st_size)});
      }
      continue;
    }
    if (!report_.dry_run) {
      // Two steps: into trash/ (where readers still find it), then its mtime again. A dump that touched it before
      // the rename shows here and it goes back; one that touches it after the rename misses it at its name and
      // moves it back itself.
      if (::renameat(dir_fd, name.c_str(), trash_fd, name.c_str()) != 0) continue;
      if (::fstatat(trash_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && keep(*digest, st.st_mtim)) {
        move_back(trash_fd, dir_fd, name);
        ++report_.returned_chunks;
        continue;
      }
    }
    ++report_.garbage_chunks;
    report_.garbage_bytes += static_cast<std::uint64_t>(st.st_size);
    if (report_.garbage.size() < kMaxListed) report_.garbage.push_back({*digest, static_cast<std::uint64_t>(st.st_size)});
  }
  return sweep_partials(dir_fd, shown);
}

Result<void> Collection::sweep() {
  if (!marked_) return make_error("internal: sweep before mark", EINVAL);
  GPUCKPT_TRY(const int trash_fd, store_.open_trash_dir());
  const std::string hash_shown = (store_.root() / cs::kHashName).string();
  std::set<cs::Digest> found;
  // Chunks in trash/ are found too: every reader moves them back when it needs them.
  if (auto in_trash = entries_of(trash_fd, (store_.root() / cs::kTrashDir).string()); in_trash)
    for (const std::string& name : *in_trash)
      if (auto d = cs::parse_digest(name, "trash entry"); d) found.insert(*d);
  auto fanouts = entries_of(store_.hash_fd(), hash_shown);
  Result<void> result;
  if (!fanouts) result = fanouts.error();
  for (const std::string& fanout : fanouts ? *fanouts : std::vector<std::string>{}) {
    const int dir_fd = is_fanout_name(fanout.c_str())
                           ? ::openat(store_.hash_fd(), fanout.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                           : -1;
    if (dir_fd < 0) {
      report_.unknown.push_back(hash_shown + "/" + fanout);
      continue;
    }
    result = sweep_fanout(dir_fd, fanout, trash_fd, found);
    ::close(dir_fd);
    if (!result) break;
  }
  ::close(trash_fd);
  if (!result) return result;
  if (auto refs_fd = store_.open_refs_dir(); refs_fd) {
    result = sweep_partials(*refs_fd, (store_.root() / cs::kRefsDir).string());
    ::close(*refs_fd);
    if (!result) return result;
  }
  for (const auto& [digest, count] : refcounts_) {
    if (found.contains(digest)) continue;
    ++report_.missing_chunks;
    if (report_.missing.size() < kMaxListed) report_.missing.push_back({digest, first_ref_.at(digest)});
  }
  return {};
}

Result<void> Collection::empty_trash() {
  if (report_.dry_run) return {};
  GPUCKPT_TRY(const int trash_fd, store_.open_trash_dir());
  auto names = entries_of(trash_fd, (store_.root() / cs::kTrashDir).string());
  Result<void> result;
  if (!names) result = names.error();
  for (const std::string& name : names ? *names : std::vector<std::string>{}) {
    struct stat st {};
    auto digest = cs::parse_digest(name, "trash entry");
    if (!digest || ::fstatat(trash_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (keep(*digest, st.st_mtim)) continue;   // touched since the sweep: the next collection returns it
    if (::unlinkat(trash_fd, name.c_str(), 0) != 0 && errno != ENOENT)
      result = make_error("removing " + (store_.root() / cs::kTrashDir / name).string() + ": " + errno_text(errno),
                          errno);
  }
  ::close(trash_fd);
  return result;
}

Result<Report> collect(cs::Store& store, Options options) {
  GPUCKPT_TRY(const auto collection, Collection::begin(store, options));
  for (auto phase : {&Collection::mark, &Collection::recover, &Collection::sweep, &Collection::empty_trash}) {
    GPUCKPT_TRY_VOID(((*collection).*phase)());
  }
  return collection->report();
}

std::string format_report(const Report& r, const std::string& store_root) {
  std::string out = "chunk store " + store_root + ": " + std::to_string(r.chunks) + " chunks, " + mib(r.chunk_bytes) +
                    "; " + std::to_string(r.refs) + " references holding " + std::to_string(r.live_chunks) +
                    " chunks\n";
  out += std::string(r.dry_run ? "would remove " : "removed ") + std::to_string(r.garbage_chunks) +
         " unreferenced chunks, " + mib(r.garbage_bytes) + (r.dry_run ? " (dry run: --delete removes them)" : "") +
         "\n";
  for (const Chunk& c : r.garbage) out += "  " + c.digest.hex() + "  " + std::to_string(c.bytes) + " bytes\n";
  if (r.garbage.size() < r.garbage_chunks)
    out += "  ... and " + std::to_string(r.garbage_chunks - r.garbage.size()) + " more\n";
  out += "kept " + std::to_string(r.young_chunks) + " unreferenced chunks younger than the grace period";
  if (r.returned_chunks > 0) out += ", " + std::to_string(r.returned_chunks) + " returned from trash";
  if (r.partials_removed > 0)
    out += std::string(r.dry_run ? "; would remove " : "; removed ") + std::to_string(r.partials_removed) +
           " temporary files of writers that died";
  out += "\n";
  if (r.missing_chunks > 0) {
    out += "MISSING: " + std::to_string(r.missing_chunks) + " chunks named by references are not in the store; "
           "those checkpoints cannot be restored from it:\n";
    for (const MissingChunk& m : r.missing) out += "  " + m.digest.hex() + "  (reference " + m.ref + ")\n";
  }
  for (const std::string& u : r.unknown) out += "left alone (not the store's): " + u + "\n";
  return out;
}

}  // namespace gpuckpt::chunk_gc
