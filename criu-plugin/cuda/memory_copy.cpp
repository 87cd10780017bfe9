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

// ---- dump ---------------------------------------------------------------------------------------------------

// A dump's writers, one per process (into the chunk store, or an image file where there is none), the slots its
// workers share and every chunk to copy.
struct DumpJob {
  std::vector<std::unique_ptr<ProcessSlot>> slots;
  std::vector<std::unique_ptr<gi::ImageWriter>> writers;
  std::vector<std::unique_ptr<gi::StoreWriter>> store_writers;
  std::shared_ptr<chunk_store::Store> store;
  std::vector<Item> items;
};

Result<void> open_writer(DumpJob& job, std::size_t p, const ProcessMemory& proc, gi::ImageHeader header,
                         std::uint64_t chunks, int dir_fd, const std::string& checkpoint,
                         const gi::Settings& settings) {
  if (job.store) {
    GPUCKPT_TRY(job.store_writers[p], gi::StoreWriter::create(job.store, header, proc.regions, checkpoint, proc.known));
    return {};
  }
  // A data file per worker: the kernel serialises writes to one file.
  header.shards = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(chunks, 1, std::max(1u, settings.threads)));
  GPUCKPT_TRY(job.writers[p], gi::ImageWriter::create(dir_fd, header, proc.regions));
  return {};
}

// The store opened and a writer made per process; a process whose writer cannot be made has its error in its
// slot and no chunks to copy.
DumpJob prepare_dump(const std::vector<ProcessMemory>& processes, int dir_fd, const gi::Settings& settings) {
  DumpJob job;
  job.writers.resize(processes.size());
  job.store_writers.resize(processes.size());
  std::optional<Error> store_error;
  if (!settings.store.empty()) {
    auto opened = chunk_store::Store::open(settings.store, true);
    if (opened) job.store = std::move(*opened);
    else store_error = opened.error();
  }
  const std::string checkpoint = gi::new_checkpoint_id();
  for (std::size_t p = 0; p < processes.size(); ++p) {
    job.slots.push_back(std::make_unique<ProcessSlot>());
    gi::ImageHeader header;
    header.vpid = processes[p].vpid;
    header.dump_pid = processes[p].pid;
    std::uint64_t chunks = 0;
    for (const auto& r : processes[p].regions) chunks += (r.length + header.chunk_size - 1) / header.chunk_size;
    if (store_error) {
      job.slots[p]->fail(*store_error);
      continue;
    }
    if (auto opened = open_writer(job, p, processes[p], header, chunks, dir_fd, checkpoint, settings); !opened) {
      job.slots[p]->fail(opened.error());
      continue;
    }
    for (std::uint32_t r = 0; r < processes[p].regions.size(); ++r)
      for (std::uint64_t c = 0; c < gi::chunks_in(processes[p].regions[r], header.chunk_size); ++c)
        job.items.push_back({p, r, c});
  }
  return job;
}

// What one dump worker keeps from chunk to chunk: its codec and buffers, and where its time went.
struct DumpWorker {
  gi::ChunkCodec codec{gi::kDefaultChunkSize};
  gi::CompressionHistory history;
  std::vector<std::byte> buffer = std::vector<std::byte>(gi::kDefaultChunkSize);
  std::vector<std::byte> piece = std::vector<std::byte>(kCachedPiece);
  gi::ChecksumStream stream;
  Clock::duration reading{}, storing{}, checksumming{};
};

void count_stored(ProcessSlot& slot, const gi::StoredChunk& stored) {
  slot.stored += stored.stored_bytes;
  slot.written += stored.written_bytes;
  slot.zero += stored.zero ? 1 : 0;
  slot.reused += stored.reused ? 1 : 0;
  slot.recognised += stored.recognised ? 1 : 0;
  ++slot.chunks;
}

// Most chunks of a second checkpoint did not change: checksum the chunk in pieces that stay in the CPU's cache
// (the whole chunk copied and read back is three times the memory traffic, and 16 threads reading share the
// machine's memory bandwidth); it is read whole only when the store does not recognise it. True: stored so.
Result<bool> store_if_unchanged(DumpWorker& w, gi::StoreWriter& store_writer, int pid, std::uint64_t remote,
                                std::size_t size, const Item& item, ProcessSlot& slot) {
  w.stream.reset();
  std::optional<Error> failed;
  for (std::size_t at = 0; at < size && !failed; at += w.piece.size()) {
    const std::size_t n = std::min(w.piece.size(), size - at);
    const auto read_start = Clock::now();
    if (auto ok = copy_remote(false, pid, remote + at, w.piece.data(), n); !ok) failed = ok.error();
    const auto sum_start = Clock::now();
    w.reading += sum_start - read_start;
    if (!failed) w.stream.update({w.piece.data(), n});
    w.checksumming += Clock::now() - sum_start;
  }
  if (failed) return *failed;
  const auto store_start = Clock::now();
  auto unchanged =
      store_writer.add_unchanged(item.region, item.chunk, w.stream.value(), static_cast<std::uint32_t>(size));
  w.storing += Clock::now() - store_start;
  GPUCKPT_TRY_VOID(unchanged);
  if (!*unchanged) return false;
  count_stored(slot, **unchanged);
  return true;
}

// One chunk of a process's memory into the store or its image file.
Result<void> dump_chunk(DumpWorker& w, DumpJob& job, const ProcessMemory& proc, const Item& item, unsigned worker,
                        const gi::Settings& settings) {
  ProcessSlot& slot = *job.slots[item.process];
  const gi::Region& region = proc.regions[item.region];
  const std::uint64_t offset = item.chunk * gi::kDefaultChunkSize;
  const std::size_t size = std::min<std::uint64_t>(gi::kDefaultChunkSize, region.length - offset);
  gi::StoreWriter* store_writer = job.store_writers[item.process].get();
  if (store_writer != nullptr && store_writer->knows_chunks()) {
    GPUCKPT_TRY(const bool stored,
                store_if_unchanged(w, *store_writer, proc.pid, region.start + offset, size, item, slot));
    if (stored) return {};
  }
  const auto read_start = Clock::now();
  GPUCKPT_TRY_VOID(copy_remote(false, proc.pid, region.start + offset, w.buffer.data(), size));
  const auto store_start = Clock::now();
  w.reading += store_start - read_start;
  if (store_writer != nullptr) {
    auto stored = store_writer->add(item.region, item.chunk, {w.buffer.data(), size}, w.codec, settings, w.history);
    w.storing += Clock::now() - store_start;
    GPUCKPT_TRY_VOID(stored);
    count_stored(slot, *stored);
    return {};
  }
  gi::ChunkEntry entry;
  entry.region = item.region;
  entry.chunk = item.chunk;
  w.codec.encode({w.buffer.data(), size}, settings, w.history, entry);
  auto appended = job.writers[item.process]->append(w.codec, entry, worker);
  w.storing += Clock::now() - store_start;
  GPUCKPT_TRY_VOID(appended);
  slot.stored += entry.stored_size;
  slot.written += entry.encoding == gi::Encoding::Zero ? 0 : gi::kRecordHeaderSize + entry.stored_size;
  slot.zero += entry.encoding == gi::Encoding::Zero ? 1 : 0;
  ++slot.chunks;
  return {};
}

// The workers' time, summed over them.
struct DumpTimes {
  std::atomic<std::uint64_t> reading_ns{0}, storing_ns{0}, checksum_ns{0};
};

void copy_chunks(DumpJob& job, const std::vector<ProcessMemory>& processes, const gi::Settings& settings,
                 DumpTimes& times) {
  std::atomic<std::size_t> next{0};
  // Into a chunk store, each new chunk file is fsync'ed before it gets its name, and a thread waiting there for the
  // disk leaves its CPU idle (16 GiB bf16 on an H100 node: 2/3 of the threads' time spent in those waits). Twice
  // the threads keep the CPUs busy meanwhile. Image files are fsync'ed once, at the end: their pool stays as set
  // (a worker's index is its data file).
  const unsigned workers =
      job.store
          ? static_cast<unsigned>(std::clamp<std::size_t>(job.items.size(), 1, 2 * std::max(1u, settings.threads)))
          : pool_size(settings, job.items.size());
  run_pool(workers, [&](unsigned worker) {
    DumpWorker w;
    for (std::size_t i = next++; i < job.items.size(); i = next++) {
      const Item& item = job.items[i];
      ProcessSlot& slot = *job.slots[item.process];
      if (slot.failed) continue;
      if (auto ok = dump_chunk(w, job, processes[item.process], item, worker, settings); !ok) slot.fail(ok.error());
    }
    times.checksum_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(w.checksumming).count();
    times.reading_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(w.reading).count();
    times.storing_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(w.storing).count();
  });
}

// Index, footer, fsync and rename, one file per thread: the fsyncs of several files overlap.
void finish_files(DumpJob& job, std::size_t processes, int dir_fd, const gi::Settings& settings) {
  std::atomic<std::size_t> next_file{0};
  run_pool(pool_size(settings, processes), [&](unsigned) {
    for (std::size_t p = next_file++; p < processes; p = next_file++) {
      if (job.slots[p]->failed) continue;
      if (job.store_writers[p]) {
        if (auto ok = job.store_writers[p]->finish(dir_fd); !ok) job.slots[p]->fail(ok.error());
        else job.slots[p]->manifest = std::make_shared<const gi::Manifest>(job.store_writers[p]->manifest());
      } else if (job.writers[p]) {
        if (auto ok = job.writers[p]->finish(); !ok) job.slots[p]->fail(ok.error());
      }
    }
  });
}

// ---- fill ---------------------------------------------------------------------------------------------------

// A process's image or manifest, opened for the fill, once its regions are known to be mapped in the process.
Result<std::unique_ptr<gi::MemorySource>> open_for_fill(const ProcessMemory& proc, int dir_fd,
                                                         const std::string& store_dir, const gi::Settings& settings) {
  GPUCKPT_TRY(auto reader, gi::open_memory_source(dir_fd, proc.vpid, store_dir, settings.node_store));
  GPUCKPT_TRY(const auto maps, read_maps(proc.pid));
  if (auto mapped = regions_are_mapped(reader->regions(), maps); !mapped) {
    return make_error("pid " + std::to_string(proc.pid) + " (" + reader->name() + "): " + mapped.error().message,
                      EFAULT);
  }
  return reader;
}

// What one fill worker keeps from chunk to chunk.
struct FillWorker {
  gi::ChunkCodec codec{gi::kMaxChunkSize};
  std::vector<std::byte> record, buffer;
};

// One chunk put back into the process's memory: read (and checked) from its image and copied in, or, a zero chunk
// over memory that is zero already, its pages touched.
Result<void> fill_chunk(FillWorker& w, const gi::MemorySource& reader, int pid, const Item& item, ProcessSlot& slot) {
  const gi::ChunkEntry& entry = reader.entries()[item.chunk];
  const std::uint64_t remote = reader.regions()[entry.region].start + entry.chunk * reader.header().chunk_size;
  if (item.touch_only) {
    GPUCKPT_TRY_VOID(touch_remote(pid, remote, entry.raw_size));
    ++slot.zero;
    ++slot.chunks;
    return {};
  }
  w.buffer.resize(entry.raw_size);
  GPUCKPT_TRY_VOID(reader.read_chunk(item.chunk, w.codec, w.record, w.buffer));
  GPUCKPT_TRY_VOID(copy_remote(true, pid, remote, w.buffer.data(), w.buffer.size()));
  slot.stored += entry.stored_size;
  slot.zero += entry.encoding == gi::Encoding::Zero ? 1 : 0;
  ++slot.chunks;
  return {};
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
  DumpJob job = prepare_dump(processes, dir_fd, settings);
  DumpTimes times;
  copy_chunks(job, processes, settings, times);
  const auto finish_start = Clock::now();
  finish_files(job, processes.size(), dir_fd, settings);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  auto results = collect(processes, job.slots, seconds);
  const double finishing = std::chrono::duration<double>(Clock::now() - finish_start).count();
  for (std::size_t p = 0; p < results.size(); ++p) {
    if (!results[p]) continue;
    results[p]->reading_seconds = static_cast<double>(times.reading_ns) / 1e9;
    results[p]->storing_seconds = static_cast<double>(times.storing_ns + times.checksum_ns) / 1e9;
    results[p]->checksum_seconds = static_cast<double>(times.checksum_ns) / 1e9;
    results[p]->finishing_seconds = finishing;
    if (job.store_writers[p]) results[p]->store_times = job.store_writers[p]->times();
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
    auto reader = open_for_fill(processes[p], dir_fd, store_dir, settings);
    if (!reader) {
      slots[p]->fail(reader.error());
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
    FillWorker w;
    for (std::size_t s = next++; s < streams.size(); s = next++) {
      const Stream& stream = streams[s];
      ProcessSlot& slot = *slots[stream.process];
      const gi::MemorySource& reader = *readers[stream.process];
      for (std::size_t k = 0; k < stream.items.size() && !slot.failed; ++k) {
        if (k % kReadAhead == 0) prefetch(reader, stream.items, k + kReadAhead);
        const Item& item = stream.items[k];
        if (auto ok = fill_chunk(w, reader, processes[item.process].pid, item, slot); !ok) slot.fail(ok.error());
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
  GPUCKPT_TRY(const auto reader,
              gi::open_memory_source(dir_fd, vpid, gi::restore_store_dir(settings), settings.node_store));
  return reader->regions();
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
