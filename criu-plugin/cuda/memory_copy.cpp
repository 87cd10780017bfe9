#include "criu-plugin/cuda/memory_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "criu-plugin/cuda/staging_memory.h"

namespace gpuckpt::cuda {
namespace {

namespace gi = gpu_image;
using Clock = std::chrono::steady_clock;

// Runs work(worker) on `threads` threads and joins them all; falls back to fewer (at least the calling thread)
// when the system cannot start more.
template <class Work>
void run_pool(unsigned threads, Work&& work) {
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back([&work, t] { work(t); });
    } catch (const std::system_error&) {
      break;
    }
  }
  work(0u);
  for (auto& th : pool) th.join();
}


// Writes a zero byte into every page of [remote, remote + size), which the caller knows to be zero: the pages get
// allocated here, by the pool, instead of one by one when the driver's single-threaded restore first touches them
// (a zero-heavy 16 GiB restore measured the driver's restore 2.1 s slower with 12 GB of untouched pages).
Result<void> touch_remote(int pid, std::uint64_t remote, std::size_t size) {
  static const std::byte zero{0};
  constexpr std::size_t kPage = 4096, kBatch = 1024;   // IOV_MAX
  iovec local[kBatch], pages[kBatch];
  std::uint64_t at = remote;
  const std::uint64_t end = remote + size;
  while (at < end) {
    std::size_t n = 0;
    for (; n < kBatch && at + n * kPage < end; ++n) {
      local[n] = {const_cast<std::byte*>(&zero), 1};
      pages[n] = {reinterpret_cast<void*>(at + n * kPage), 1};
    }
    ssize_t done = ::process_vm_writev(pid, local, n, pages, n, 0);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0)
      return make_error("touching pid " + std::to_string(pid) + "'s memory at " + hex_address(at) + ": " +
                        std::strerror(done < 0 ? errno : EFAULT), done < 0 ? errno : EFAULT);
    at += static_cast<std::uint64_t>(done) * kPage;   // one byte per page
  }
  return {};
}

// What the workers share about one process: its first error stops the rest of its chunks.
struct ProcessSlot {
  std::mutex mutex;
  std::optional<Error> error;
  std::atomic<bool> failed{false};
  std::atomic<std::uint64_t> stored{0}, zero{0}, chunks{0}, reused{0}, recognised{0}, written{0};
  std::shared_ptr<const gi::Manifest> manifest;   // dump into a store, once finished
  void fail(Error e) {
    std::lock_guard lock(mutex);
    if (!error) error = std::move(e);
    failed = true;
  }
};

struct Item {
  std::size_t process;
  std::uint32_t region;
  std::uint64_t chunk;   // dump: chunk in region; fill: index entry
  bool touch_only = false;   // fill: a zero chunk over memory that is zero already
};

unsigned pool_size(const gi::Settings& settings, std::size_t items) {
  return static_cast<unsigned>(std::clamp<std::size_t>(items, 1, std::max(1u, settings.threads)));
}

std::uint64_t total_bytes(const std::vector<gi::Region>& regions) {
  std::uint64_t sum = 0;
  for (const auto& r : regions) sum += r.length;
  return sum;
}

std::vector<Result<CopyStats>> collect(const std::vector<ProcessMemory>& processes,
                                       std::vector<std::unique_ptr<ProcessSlot>>& slots, double seconds) {
  std::vector<Result<CopyStats>> out;
  for (std::size_t p = 0; p < processes.size(); ++p) {
    if (slots[p]->error) {
      out.emplace_back(*slots[p]->error);
      continue;
    }
    CopyStats s;
    s.memory_bytes = total_bytes(processes[p].regions);
    s.stored_bytes = slots[p]->stored;
    s.zero_chunks = slots[p]->zero;
    s.chunks = slots[p]->chunks;
    s.reused_chunks = slots[p]->reused;
    s.recognised_chunks = slots[p]->recognised;
    s.written_bytes = slots[p]->written;
    s.manifest = slots[p]->manifest;
    s.seconds = seconds;
    out.emplace_back(s);
  }
  return out;
}

// The fill's unit of work: the chunks of one data file in file order, so that each file is read front to back
// by one thread (the kernel's readahead follows it), or a run of zero chunks (no file to read).
struct Stream {
  std::size_t process = 0;
  std::vector<Item> items;
  std::uint64_t bytes = 0;   // to read (stored) or to touch
};

constexpr std::size_t kCachedPiece = 256u << 10;   // dump: what one thread reads and checksums at a time
constexpr std::size_t kReadAhead = 8;          // chunks: the file range asked for ahead of the reader (16 MiB)
constexpr std::size_t kZeroRun = 64;           // zero chunks per stream (128 MiB of pages to touch)

std::vector<Stream> read_streams(std::size_t process, const gi::MemorySource& reader, bool zero_is_touch,
                                 const std::vector<bool>& in_place) {
  const auto& entries = reader.entries();
  std::vector<Stream> by_file(reader.header().shards == 0 ? 1 : reader.header().shards);
  std::vector<Stream> zero_runs;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i < in_place.size() && in_place[i]) continue;
    const Item item{process, entries[i].region, i, zero_is_touch && entries[i].encoding == gi::Encoding::Zero};
    if (entries[i].encoding == gi::Encoding::Zero) {
      if (zero_runs.empty() || zero_runs.back().items.size() == kZeroRun) zero_runs.push_back({process, {}, 0});
      zero_runs.back().items.push_back(item);
      zero_runs.back().bytes += entries[i].raw_size;
      continue;
    }
    Stream& file = by_file[std::min<std::size_t>(entries[i].shard, by_file.size() - 1)];
    file.process = process;
    file.items.push_back(item);
    file.bytes += entries[i].stored_size;
  }
  std::vector<Stream> streams;
  for (auto& file : by_file) {
    if (file.items.empty()) continue;
    std::sort(file.items.begin(), file.items.end(),
              [&entries](const Item& a, const Item& b) { return entries[a.chunk].offset < entries[b.chunk].offset; });
    streams.push_back(std::move(file));
  }
  for (auto& run : zero_runs) streams.push_back(std::move(run));
  return streams;
}

// Asks the kernel to start reading the next kReadAhead chunks of a stream from `from` on, so the disk stays busy
// while this thread checks, decompresses and copies the current ones.
void prefetch(const gi::MemorySource& reader, const std::vector<Item>& items, std::size_t from) {
  if (from >= items.size()) return;
  reader.prefetch(items[from].chunk, items[std::min(items.size(), from + kReadAhead) - 1].chunk);
}

}  // namespace

Result<void> copy_remote(bool write, int pid, std::uint64_t remote, std::byte* local, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    iovec l{local + done, size - done};
    iovec r{reinterpret_cast<void*>(remote + done), size - done};
    ssize_t n = write ? ::process_vm_writev(pid, &l, 1, &r, 1, 0) : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EFAULT;
      return make_error(std::string(write ? "writing" : "reading") + " " + std::to_string(size - done) +
                        " bytes of pid " + std::to_string(pid) + "'s memory at " + hex_address(remote + done) + ": " +
                        std::strerror(err), err);
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

std::vector<Result<CopyStats>> write_memory_images(const std::vector<ProcessMemory>& processes, int dir_fd,
                                                   const gi::Settings& settings) {
  const auto start = Clock::now();
  std::vector<std::unique_ptr<ProcessSlot>> slots;
  std::vector<std::unique_ptr<gi::ImageWriter>> writers(processes.size());
  std::vector<std::unique_ptr<gi::StoreWriter>> store_writers(processes.size());
  std::shared_ptr<chunk_store::Store> store;
  std::optional<Error> store_error;
  if (!settings.store.empty()) {
    auto opened = chunk_store::Store::open(settings.store, true);
    if (opened) store = std::move(*opened);
    else store_error = opened.error();
  }
  const std::string checkpoint = gi::new_checkpoint_id();
  std::vector<Item> items;
  for (std::size_t p = 0; p < processes.size(); ++p) {
    slots.push_back(std::make_unique<ProcessSlot>());
    gi::ImageHeader header;
    header.vpid = processes[p].vpid;
    header.dump_pid = processes[p].pid;
    std::uint64_t chunks = 0;
    for (const auto& r : processes[p].regions) chunks += (r.length + header.chunk_size - 1) / header.chunk_size;
    if (store_error) {
      slots[p]->fail(*store_error);
      continue;
    }
    if (store) {
      auto writer = gi::StoreWriter::create(store, header, processes[p].regions, checkpoint, processes[p].known);
      if (!writer) {
        slots[p]->fail(writer.error());
        continue;
      }
      store_writers[p] = std::move(*writer);
    } else {
      // A data file per worker: the kernel serialises writes to one file.
      header.shards = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(chunks, 1, std::max(1u, settings.threads)));
      auto writer = gi::ImageWriter::create(dir_fd, header, processes[p].regions);
      if (!writer) {
        slots[p]->fail(writer.error());
        continue;
      }
      writers[p] = std::move(*writer);
    }
    for (std::uint32_t r = 0; r < processes[p].regions.size(); ++r)
      for (std::uint64_t c = 0; c < gi::chunks_in(processes[p].regions[r], header.chunk_size); ++c)
        items.push_back({p, r, c});
  }
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> reading_ns{0}, storing_ns{0}, checksum_ns{0};
  // Into a chunk store, each new chunk file is fsync'ed before it gets its name, and a thread waiting there for the
  // disk leaves its CPU idle (16 GiB bf16 on an H100 node: 2/3 of the threads' time spent in those waits). Twice
  // the threads keep the CPUs busy meanwhile. Image files are fsync'ed once, at the end: their pool stays as set
  // (a worker's index is its data file).
  const unsigned workers =
      store ? static_cast<unsigned>(std::clamp<std::size_t>(items.size(), 1, 2 * std::max(1u, settings.threads)))
            : pool_size(settings, items.size());
  run_pool(workers, [&](unsigned worker) {
    gi::ChunkCodec codec(gi::kDefaultChunkSize);
    gi::CompressionHistory history;
    std::vector<std::byte> buffer(gi::kDefaultChunkSize), piece(kCachedPiece);
    gi::ChecksumStream stream;
    Clock::duration reading{}, storing{}, checksumming{};
    const auto count_stored = [](ProcessSlot& slot, const gi::StoredChunk& stored) {
      slot.stored += stored.stored_bytes;
      slot.written += stored.written_bytes;
      slot.zero += stored.zero ? 1 : 0;
      slot.reused += stored.reused ? 1 : 0;
      slot.recognised += stored.recognised ? 1 : 0;
      ++slot.chunks;
    };
    for (std::size_t i = next++; i < items.size(); i = next++) {
      const Item& item = items[i];
      ProcessSlot& slot = *slots[item.process];
      if (slot.failed) continue;
      const ProcessMemory& proc = processes[item.process];
      const gi::Region& region = proc.regions[item.region];
      const std::uint64_t offset = item.chunk * gi::kDefaultChunkSize;
      const std::size_t size = std::min<std::uint64_t>(gi::kDefaultChunkSize, region.length - offset);
      gi::StoreWriter* store_writer = store_writers[item.process].get();
      if (store_writer != nullptr && store_writer->knows_chunks()) {
        // Most chunks of a second checkpoint did not change: checksum the chunk in pieces that stay in the CPU's
        // cache (the whole chunk copied and read back is three times the memory traffic, and 16 threads reading
        // share the machine's memory bandwidth); read it whole only when it is not recognised.
        stream.reset();
        std::optional<Error> failed;
        for (std::size_t at = 0; at < size && !failed; at += piece.size()) {
          const std::size_t n = std::min(piece.size(), size - at);
          const auto read_start = Clock::now();
          if (auto ok = copy_remote(false, proc.pid, region.start + offset + at, piece.data(), n); !ok) failed = ok.error();
          const auto sum_start = Clock::now();
          reading += sum_start - read_start;
          if (!failed) stream.update({piece.data(), n});
          checksumming += Clock::now() - sum_start;
        }
        if (failed) {
          slot.fail(*failed);
          continue;
        }
        const auto store_start = Clock::now();
        auto unchanged = store_writer->add_unchanged(item.region, item.chunk, stream.value(), static_cast<std::uint32_t>(size));
        storing += Clock::now() - store_start;
        if (!unchanged) {
          slot.fail(unchanged.error());
          continue;
        }
        if (*unchanged) {
          count_stored(slot, **unchanged);
          continue;
        }
      }
      const auto read_start = Clock::now();
      if (auto ok = copy_remote(false, proc.pid, region.start + offset, buffer.data(), size); !ok) {
        slot.fail(ok.error());
        continue;
      }
      const auto store_start = Clock::now();
      reading += store_start - read_start;
      if (store_writers[item.process]) {
        auto stored = store_writers[item.process]->add(item.region, item.chunk, {buffer.data(), size}, codec,
                                                       settings, history);
        storing += Clock::now() - store_start;
        if (!stored) {
          slot.fail(stored.error());
          continue;
        }
        count_stored(slot, *stored);
        continue;
      }
      gi::ChunkEntry entry;
      entry.region = item.region;
      entry.chunk = item.chunk;
      codec.encode({buffer.data(), size}, settings, history, entry);
      auto appended = writers[item.process]->append(codec, entry, worker);
      storing += Clock::now() - store_start;
      if (!appended) {
        slot.fail(appended.error());
        continue;
      }
      slot.stored += entry.stored_size;
      slot.written += entry.encoding == gi::Encoding::Zero ? 0 : gi::kRecordHeaderSize + entry.stored_size;
      slot.zero += entry.encoding == gi::Encoding::Zero ? 1 : 0;
      ++slot.chunks;
    }
    checksum_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(checksumming).count();
    reading_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(reading).count();
    storing_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(storing).count();
  });
  // Index, footer, fsync and rename, one file per thread: the fsyncs of several files overlap.
  const auto finish_start = Clock::now();
  std::atomic<std::size_t> next_file{0};
  run_pool(pool_size(settings, processes.size()), [&](unsigned) {
    for (std::size_t p = next_file++; p < processes.size(); p = next_file++) {
      if (slots[p]->failed) continue;
      if (store_writers[p]) {
        if (auto ok = store_writers[p]->finish(dir_fd); !ok) slots[p]->fail(ok.error());
        else slots[p]->manifest = std::make_shared<const gi::Manifest>(store_writers[p]->manifest());
      } else if (writers[p]) {
        if (auto ok = writers[p]->finish(); !ok) slots[p]->fail(ok.error());
      }
    }
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  auto results = collect(processes, slots, seconds);
  const double finishing = std::chrono::duration<double>(Clock::now() - finish_start).count();
  for (std::size_t p = 0; p < results.size(); ++p) {
    if (!results[p]) continue;
    results[p]->reading_seconds = static_cast<double>(reading_ns) / 1e9;
    results[p]->storing_seconds = static_cast<double>(storing_ns + checksum_ns) / 1e9;
    results[p]->checksum_seconds = static_cast<double>(checksum_ns) / 1e9;
    results[p]->finishing_seconds = finishing;
    if (store_writers[p]) results[p]->store_times = store_writers[p]->times();
  }
  return results;
}

std::vector<Result<CopyStats>> fill_from_images(const std::vector<ProcessMemory>& processes, int dir_fd,
                                                const gi::Settings& settings, bool memory_is_zero_or_intact,
                                                const std::vector<std::vector<bool>>& in_place) {
  static const std::vector<bool> none;
  auto placed = [&](std::size_t p) -> const std::vector<bool>& { return p < in_place.size() ? in_place[p] : none; };
  const auto start = Clock::now();
  std::vector<std::unique_ptr<ProcessSlot>> slots;
  std::vector<std::unique_ptr<gi::MemorySource>> readers(processes.size());
  std::vector<Stream> streams;
  const std::string store_dir = gi::restore_store_dir(settings);
  for (std::size_t p = 0; p < processes.size(); ++p) {
    slots.push_back(std::make_unique<ProcessSlot>());
    auto reader = gi::open_memory_source(dir_fd, processes[p].vpid, store_dir, settings.node_store);
    if (!reader) {
      slots[p]->fail(reader.error());
      continue;
    }
    auto maps = read_maps(processes[p].pid);
    if (!maps) {
      slots[p]->fail(maps.error());
      continue;
    }
    if (auto mapped = regions_are_mapped((*reader)->regions(), *maps); !mapped) {
      slots[p]->fail(make_error("pid " + std::to_string(processes[p].pid) + " (" + (*reader)->name() + "): " +
                                mapped.error().message, EFAULT));
      continue;
    }
    readers[p] = std::move(*reader);
    if (!placed(p).empty() && placed(p).size() != readers[p]->entries().size()) {
      slots[p]->fail(make_error("internal: " + readers[p]->name() + ": the mapped chunks do not match its chunks", EINVAL));
      continue;
    }
    for (auto& stream : read_streams(p, *readers[p], memory_is_zero_or_intact, placed(p)))
      streams.push_back(std::move(stream));
  }
  // Largest streams first, so the last ones to finish are short.
  std::stable_sort(streams.begin(), streams.end(), [](const Stream& a, const Stream& b) { return a.bytes > b.bytes; });
  std::atomic<std::size_t> next{0};
  run_pool(pool_size(settings, streams.size()), [&](unsigned) {
    gi::ChunkCodec codec(gi::kMaxChunkSize);
    std::vector<std::byte> record, buffer;
    for (std::size_t s = next++; s < streams.size(); s = next++) {
      const Stream& stream = streams[s];
      ProcessSlot& slot = *slots[stream.process];
      const gi::MemorySource& reader = *readers[stream.process];
      for (std::size_t k = 0; k < stream.items.size() && !slot.failed; ++k) {
        const Item& item = stream.items[k];
        if (k % kReadAhead == 0) prefetch(reader, stream.items, k + kReadAhead);
        const gi::ChunkEntry& entry = reader.entries()[item.chunk];
        const std::uint64_t remote = reader.regions()[entry.region].start + entry.chunk * reader.header().chunk_size;
        if (item.touch_only) {
          if (auto ok = touch_remote(processes[item.process].pid, remote, entry.raw_size); !ok) {
            slot.fail(ok.error());
            continue;
          }
          ++slot.zero;
          ++slot.chunks;
          continue;
        }
        buffer.resize(entry.raw_size);
        if (auto ok = reader.read_chunk(item.chunk, codec, record, buffer); !ok) {
          slot.fail(ok.error());
          continue;
        }
        if (auto ok = copy_remote(true, processes[item.process].pid, remote, buffer.data(), buffer.size()); !ok) {
          slot.fail(ok.error());
          continue;
        }
        slot.stored += entry.stored_size;
        slot.zero += entry.encoding == gi::Encoding::Zero ? 1 : 0;
        ++slot.chunks;
      }
    }
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<ProcessMemory> with_regions = processes;
  for (std::size_t p = 0; p < processes.size(); ++p)
    if (readers[p]) with_regions[p].regions = readers[p]->regions();
  auto results = collect(with_regions, slots, seconds);
  for (std::size_t p = 0; p < processes.size(); ++p) {
    if (!readers[p] || !results[p]) continue;
    results[p]->chunk_check = readers[p]->chunk_check();
    if (const auto* store_reader = dynamic_cast<const gi::StoreReader*>(readers[p].get()); store_reader != nullptr)
      results[p]->manifest = std::make_shared<const gi::Manifest>(store_reader->manifest());
    results[p]->mapped_chunks = static_cast<std::uint64_t>(std::count(placed(p).begin(), placed(p).end(), true));
    results[p]->chunks += results[p]->mapped_chunks;
  }
  return results;
}

std::vector<int> image_vpids(int dir_fd) {
  std::vector<int> vpids;
  int fd = ::dup(dir_fd);
  if (fd < 0) return vpids;
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return vpids;
  }
  ::rewinddir(dir);
  while (dirent* e = ::readdir(dir)) {
    int vpid = gi::vpid_from_file_name(e->d_name);
    if (vpid <= 0) vpid = gi::vpid_from_manifest_name(e->d_name);
    if (vpid > 0) vpids.push_back(vpid);
  }
  ::closedir(dir);
  std::sort(vpids.begin(), vpids.end());
  vpids.erase(std::unique(vpids.begin(), vpids.end()), vpids.end());
  return vpids;
}

Result<std::vector<gi::Region>> image_regions(int dir_fd, int vpid, const gi::Settings& settings) {
  auto reader = gi::open_memory_source(dir_fd, vpid, gi::restore_store_dir(settings), settings.node_store);
  if (!reader) return reader.error();
  return (*reader)->regions();
}

std::string describe(const CopyStats& s) {
  char buf[256];
  const double gib = static_cast<double>(s.memory_bytes) / (1ull << 30);
  std::snprintf(buf, sizeof buf, "%.2f GiB in %llu chunks (%llu zero, %llu already stored), %.2f GiB stored, "
                "%.2f GiB written", gib, static_cast<unsigned long long>(s.chunks),
                static_cast<unsigned long long>(s.zero_chunks), static_cast<unsigned long long>(s.reused_chunks),
                static_cast<double>(s.stored_bytes) / (1ull << 30), static_cast<double>(s.written_bytes) / (1ull << 30));
  std::string text = buf;
  if (s.recognised_chunks > 0)
    text += ", " + std::to_string(s.recognised_chunks) + " chunks recognised unchanged by XXH3-64 (not hashed with SHA-256)";
  if (s.mapped_chunks > 0) text += ", " + std::to_string(s.mapped_chunks) + " chunks mapped from the store";
  return *s.chunk_check == '\0' ? text : text + ", each chunk checked by " + s.chunk_check;
}

}  // namespace gpuckpt::cuda
