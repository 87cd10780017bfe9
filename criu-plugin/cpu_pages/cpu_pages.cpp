#include "criu-plugin/cpu_pages/cpu_pages.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "base/byte_io.h"
#include "base/caught.h"
#include "base/errno_text.h"
#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "criu-plugin/cpu_pages/page_chunks.h"
#include "criu-plugin/cpu_pages/pagemap_image.h"

namespace gpuckpt::cpu_pages {
namespace {

namespace cs = chunk_store;
namespace gi = gpu_image;
using Clock = std::chrono::steady_clock;

// The names in `dir_fd` that `keep` accepts, sorted.
template <class Keep>
std::vector<std::string> names_in(int dir_fd, Keep&& keep) {
  std::vector<std::string> names;
  const int fd = ::dup(dir_fd);
  if (fd < 0) return names;
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return names;
  }
  ::rewinddir(dir);
  while (const dirent* e = ::readdir(dir))
    if (keep(std::string_view(e->d_name))) names.emplace_back(e->d_name);
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// A regular file of `dir_fd`, at most `max_bytes`, whole.
Result<std::vector<std::byte>> read_small_file(int dir_fd, const std::string& name, std::size_t max_bytes) {
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open " + name + ": " + errno_text(errno), errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return make_error(name + " is not a regular file of at most " + std::to_string(max_bytes) + " bytes", EINVAL);
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return make_error("reading " + name + ": " + errno_text(err), err);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return bytes;
}

Result<void> pwrite_all(int fd, std::span<const std::byte> in, std::uint64_t offset, const std::string& name) {
  std::size_t done = 0;
  while (done < in.size()) {
    const ssize_t n = ::pwrite(fd, in.data() + done, in.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("writing " + name + ": " + errno_text(n < 0 ? errno : EIO), n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  return {};
}

// What one thread of in_parallel keeps between chunks: its codec and one window's buffers, made at its first chunk.
struct WindowWorker {
  std::unique_ptr<gi::ChunkCodec> codec;
  gi::CompressionHistory history;
  std::vector<std::byte> window;   // one chunk's raw bytes
  std::vector<std::byte> record;   // a chunk file as read from the store
  std::uint64_t new_chunks = 0, new_bytes = 0;
  WindowWorker& ready() {
    if (!codec) {
      codec = std::make_unique<gi::ChunkCodec>(static_cast<std::uint32_t>(kWindowBytes));
      window.resize(kWindowBytes);
    }
    return *this;
  }
};

// Runs body(thread, item) for items 0..count-1 on `threads` threads, each item once; the first error stops the rest
// and is the answer. A throw inside a body is an error too (caught.h), never std::terminate in CRIU's process.
template <class Body>
Result<void> in_parallel(unsigned threads, std::size_t count, const char* what, Body&& body) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  Result<void> first;
  const auto work = [&](unsigned thread) {
    auto ok = caught(what, [&]() -> Result<void> {
      for (std::size_t i = next++; i < count && !failed; i = next++) GPUCKPT_TRY_VOID(body(thread, i));
      return {};
    });
    if (!ok) {
      std::lock_guard lock(mutex);
      if (!failed.exchange(true)) first = std::move(ok);
    }
  };
  threads = static_cast<unsigned>(std::clamp<std::size_t>(count, 1, std::max(1u, threads)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work, t);
    } catch (...) {
      break;   // fewer threads than asked for: the ones that started do the work
    }
  }
  work(0);
  for (auto& t : pool) t.join();
  return first;
}

unsigned thread_count(const gi::Settings& settings) {
  if (settings.threads != 0) return settings.threads;
  return gi::default_threads(static_cast<unsigned>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))));
}

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// ---- dump ---------------------------------------------------------------------------------------------------

// A page image on its way into the store: open for reading, with the writer of its chunks and manifest.
struct ImageToStore {
  std::string name;
  int fd = -1;
  std::uint64_t bytes = 0;
  std::unique_ptr<gi::StoreWriter> writer;
};

// The page image `pagemap` names, checked against it and opened with its writer. None when it stays in the
// archive (why added to `left`) or is empty; an error when the writer or the file cannot be opened.
Result<std::optional<ImageToStore>> open_image_to_store(int dir_fd, const std::string& pagemap,
                                                        const std::shared_ptr<cs::Store>& store,
                                                        const std::string& checkpoint, std::vector<std::string>& left) {
  auto bytes = read_small_file(dir_fd, pagemap, kMaxPagemapBytes);
  if (!bytes) {
    left.push_back(pagemap + ": " + bytes.error().message);
    return std::optional<ImageToStore>();
  }
  auto parsed = parse_pagemap_image(*bytes, pagemap);
  if (!parsed) {
    left.push_back(parsed.error().message);
    return std::optional<ImageToStore>();
  }
  const std::string name = pages_file_name(parsed->pages_id);
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
    left.push_back(name + " (of " + pagemap + "): not a regular file in the image directory");
    return std::optional<ImageToStore>();
  }
  if (st.st_size == 0) return std::optional<ImageToStore>();   // nothing in it: nothing to move
  if (parsed->any_in_parent()) {
    left.push_back(name + ": some of its pages are in a parent image directory (pre-dump)");
    return std::optional<ImageToStore>();
  }
  if (parsed->file_bytes() != static_cast<std::uint64_t>(st.st_size)) {
    left.push_back(name + ": " + std::to_string(st.st_size) + " bytes, its pagemap " + pagemap + " accounts for " +
                   std::to_string(parsed->file_bytes()));
    return std::optional<ImageToStore>();
  }
  auto regions = cut_by_window(*parsed);
  if (regions.size() > gi::kMaxManifestChunks) {
    left.push_back(name + ": more than " + std::to_string(gi::kMaxManifestChunks) + " windows of 2 MiB");
    return std::optional<ImageToStore>();
  }
  gi::ImageHeader header;
  header.chunk_size = static_cast<std::uint32_t>(kWindowBytes);
  header.vpid = static_cast<std::int32_t>(parsed->pages_id);
  GPUCKPT_TRY(auto writer, gi::StoreWriter::create(store, header, std::move(regions), checkpoint, nullptr,
                                                   gi::MemoryKind::CpuPages));
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open " + name + ": " + errno_text(errno), errno);
  return std::optional<ImageToStore>(ImageToStore{name, fd, static_cast<std::uint64_t>(st.st_size), std::move(writer)});
}

// Every window of every image into the store, one work item each, in parallel.
Result<void> store_windows(std::vector<ImageToStore>& images, const gi::Settings& settings, Report& report) {
  struct Item {
    std::size_t image;
    std::uint32_t region;
  };
  std::vector<Item> items;
  for (std::size_t i = 0; i < images.size(); ++i)
    for (std::uint32_t r = 0; r < images[i].writer->manifest().regions.size(); ++r) items.push_back({i, r});
  std::vector<WindowWorker> workers(report.threads);
  const auto store_window = [&](unsigned t, std::size_t i) -> Result<void> {
    WindowWorker& w = workers[t].ready();
    ImageToStore& image = images[items[i].image];
    const gi::Region& region = image.writer->manifest().regions[items[i].region];
    std::span<std::byte> raw(w.window.data(), region.length);
    GPUCKPT_TRY_VOID(byte_io::read_all(image.fd, raw.data(), raw.size(), region.start, image.name));
    GPUCKPT_TRY(const gi::StoredChunk chunk, image.writer->add(items[i].region, 0, raw, *w.codec, settings, w.history),
                image.name);
    if (!chunk.zero && !chunk.reused) {
      ++w.new_chunks;
      w.new_bytes += chunk.written_bytes;
    }
    return {};
  };
  GPUCKPT_TRY_VOID(in_parallel(report.threads, items.size(), "storing CPU pages", store_window));
  for (const WindowWorker& w : workers) {
    report.new_chunks += w.new_chunks;
    report.new_bytes += w.new_bytes;
  }
  return {};
}

// Reference and manifest of each image durable, then the image emptied: never the other way round. Every image is
// tried; the first failure is the answer, with how many were moved.
Result<void> finish_and_empty(int dir_fd, std::vector<ImageToStore>& images, Report& report) {
  Result<void> first_error;
  for (ImageToStore& image : images) {
    if (auto ok = image.writer->finish(dir_fd); !ok) {
      if (first_error) first_error = make_error(image.name + ": " + ok.error().message, ok.error().errno_value);
      continue;
    }
    const int wfd = ::openat(dir_fd, image.name.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (wfd < 0 || ::ftruncate(wfd, 0) != 0) {
      if (first_error)
        first_error = make_error("emptying " + image.name + " after its chunks were stored: " + errno_text(errno) +
                                 " (it stays whole in the archive)", errno);
      if (wfd >= 0) ::close(wfd);
      continue;
    }
    ::close(wfd);
    ++report.images;
    report.bytes += image.bytes;
    report.chunks += image.writer->manifest().entries.size();
  }
  if (!first_error)
    return make_error(first_error.error().message + "; " + std::to_string(report.images) + " of " +
                      std::to_string(images.size()) + " page images moved, the others stay whole in the archive",
                      first_error.error().errno_value);
  return {};
}

// ---- restore ------------------------------------------------------------------------------------------------

// A page image rebuilt from its manifest: written as `temp` beside it, renamed over it when whole.
struct ImageToRebuild {
  std::string name;   // pages-<id>.img
  std::string temp;
  std::unique_ptr<gi::StoreReader> reader;
  int fd = -1;
};

// Every manifest sound and every chunk present before any page image is written.
Result<std::vector<ImageToRebuild>> read_page_manifests(int dir_fd, const std::vector<std::string>& names,
                                                        const std::shared_ptr<const cs::Store>& store,
                                                        gi::ChunkCheck check) {
  std::vector<ImageToRebuild> images;
  for (const std::string& name : names) {
    GPUCKPT_TRY(auto manifest, gi::read_manifest(dir_fd, name));
    if (manifest.kind != gi::MemoryKind::CpuPages || gi::manifest_name(manifest) != name)
      return make_error(name + " is not the manifest of CRIU's page image its name says (its kind or pages_id "
                        "differ): refusing the restore", EINVAL);
    // The buffers below are one window each: a manifest that asks for larger chunks is not one this plugin wrote.
    if (manifest.header.chunk_size != kWindowBytes)
      return make_error(name + ": chunk_size " + std::to_string(manifest.header.chunk_size) + " is not the " +
                        std::to_string(kWindowBytes) + " bytes page images are cut in: refusing the restore", EINVAL);
    GPUCKPT_TRY_VOID(gi::check_chunks(manifest, *store, name));
    const std::string image = pages_file_name(static_cast<std::uint32_t>(manifest.header.vpid));
    images.push_back({image, "." + image + ".partial",
                      std::make_unique<gi::StoreReader>(std::move(manifest), store, name, check), -1});
  }
  return images;
}

// Each image's temporary file, created empty at its full size (the zero chunks are its holes).
Result<void> create_partials(int dir_fd, std::vector<ImageToRebuild>& images, Report& report) {
  for (ImageToRebuild& image : images) {
    std::uint64_t size = 0;
    for (const gi::Region& r : image.reader->manifest().regions) size += r.length;
    (void)::unlinkat(dir_fd, image.temp.c_str(), 0);   // a leftover of a restore that died
    image.fd = ::openat(dir_fd, image.temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (image.fd < 0 || ::ftruncate(image.fd, static_cast<off_t>(size)) != 0) {
      const int err = errno;
      return make_error("cannot write " + image.temp + " (" + std::to_string(size) + " bytes) in the image "
                        "directory: " + errno_text(err), err);
    }
    report.bytes += size;
  }
  return {};
}

// Every chunk that is not zero read, verified and written into its image's temporary file, in parallel.
Result<void> fill_partials(const std::vector<ImageToRebuild>& images, Report& report) {
  struct Item {
    std::size_t image;
    std::size_t entry;
  };
  std::vector<Item> items;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const auto& entries = images[i].reader->manifest().entries;
    for (std::size_t e = 0; e < entries.size(); ++e)
      if (entries[e].encoding != gi::Encoding::Zero) items.push_back({i, e});   // zeros: the file's holes
    report.chunks += entries.size();
  }
  std::vector<WindowWorker> workers(report.threads);
  const auto fill_chunk = [&](unsigned t, std::size_t i) -> Result<void> {
    WindowWorker& w = workers[t].ready();
    const ImageToRebuild& image = images[items[i].image];
    const gi::Manifest& m = image.reader->manifest();
    const gi::ChunkEntry& e = m.entries[items[i].entry];
    std::span<std::byte> raw(w.window.data(), e.raw_size);
    GPUCKPT_TRY_VOID(image.reader->read_chunk(items[i].entry, *w.codec, w.record, raw));
    return pwrite_all(image.fd, raw, m.regions[e.region].start + e.chunk * m.header.chunk_size, image.temp);
  };
  return in_parallel(report.threads, items.size(), "rebuilding CPU pages", fill_chunk);
}

Result<void> rename_partials(int dir_fd, std::vector<ImageToRebuild>& images, Report& report) {
  for (ImageToRebuild& image : images) {
    ::close(image.fd);
    image.fd = -1;
    if (::renameat(dir_fd, image.temp.c_str(), dir_fd, image.name.c_str()) != 0) {
      const int err = errno;
      return make_error("renaming " + image.temp + " to " + image.name + ": " + errno_text(err), err);
    }
    ++report.images;
  }
  return {};
}

}  // namespace


bool has_pages_manifests(int dir_fd) {
  return !names_in(dir_fd, [](std::string_view n) { return gi::pages_id_from_manifest_name(n) > 0; }).empty();
}

std::string checkpoint_id_of_dump(int dir_fd) {
  for (const auto& name : names_in(dir_fd, [](std::string_view n) { return gi::vpid_from_manifest_name(n) > 0; }))
    if (auto manifest = gi::read_manifest(dir_fd, name); manifest) return manifest->checkpoint;
  return gi::new_checkpoint_id();
}

Result<Report> move_into_store(int dir_fd, const gi::Settings& settings, const std::string& checkpoint) {
  const auto start = Clock::now();
  Report report;
  report.threads = thread_count(settings);
  if (settings.store.empty()) return make_error("internal: no chunk store to move CPU pages into", EINVAL);
  GPUCKPT_TRY(auto opened, cs::Store::open(settings.store, true));
  std::shared_ptr<cs::Store> store(std::move(opened));

  // One page image per pagemap; each checked against its pagemap before anything is written.
  std::vector<ImageToStore> images;
  const auto close_all = [&] {
    for (auto& image : images) ::close(image.fd);
  };
  for (const std::string& pagemap : names_in(dir_fd, is_pagemap_name)) {
    auto image = open_image_to_store(dir_fd, pagemap, store, checkpoint, report.left);
    if (!image) {
      close_all();
      return image.error();
    }
    if (*image) images.push_back(std::move(**image));
  }
  if (auto stored = store_windows(images, settings, report); !stored) {
    close_all();
    return stored.error();
  }
  auto moved = finish_and_empty(dir_fd, images, report);
  close_all();
  GPUCKPT_TRY_VOID(moved);
  report.seconds = since(start);
  return report;
}

Result<Report> bring_back(int dir_fd, const gi::Settings& settings) {
  const auto start = Clock::now();
  Report report;
  report.threads = thread_count(settings);
  const auto names = names_in(dir_fd, [](std::string_view n) { return gi::pages_id_from_manifest_name(n) > 0; });
  if (names.empty()) return report;
  const std::string store_dir = gi::restore_store_dir(settings);
  auto opened = cs::Store::open(store_dir, false);
  if (!opened)
    return make_error("the checkpoint keeps its CPU pages in a chunk store (" + names.front() + "), but " +
                      opened.error().message, opened.error().errno_value);
  std::shared_ptr<const cs::Store> store(std::move(*opened));
  const gi::ChunkCheck check = gi::ingest_verified_store(*store, settings.node_store.empty() ? cs::kNodeStoreDir
                                                                                             : settings.node_store)
                                   ? gi::ChunkCheck::Checksum
                                   : gi::ChunkCheck::Digest;
  GPUCKPT_TRY(std::vector<ImageToRebuild> images, read_page_manifests(dir_fd, names, store, check));
  // A failure in any step leaves no temporary file and every page image as it was.
  auto rebuilt = create_partials(dir_fd, images, report);
  if (rebuilt) rebuilt = fill_partials(images, report);
  if (rebuilt) rebuilt = rename_partials(dir_fd, images, report);
  if (!rebuilt) {
    for (auto& image : images) {
      if (image.fd >= 0) ::close(image.fd);
      (void)::unlinkat(dir_fd, image.temp.c_str(), 0);
    }
    return rebuilt.error();
  }
  report.seconds = since(start);
  return report;
}

}  // namespace gpuckpt::cpu_pages
