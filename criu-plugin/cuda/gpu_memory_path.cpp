#include "criu-plugin/cuda/gpu_memory_path.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "base/log.h"
#include "gpumem/memory_lineage.h"
#include "criu-plugin/criu_host.h"
#include "criu-plugin/cuda/chunk_mapping.h"

namespace gpuckpt::cuda {
namespace {

using Clock = std::chrono::steady_clock;

std::string fixed(double value, int digits = 3) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

std::string rate(std::uint64_t bytes, double seconds) {
  return seconds > 0 ? fixed(static_cast<double>(bytes) / 1e9 / seconds, 2) + " GB/s" : "-";
}

std::string pid_text(int pid) { return "pid " + std::to_string(pid); }

// Where a dump's write went: the pool's threads' time summed, by step, and the wall time of finishing.
std::string write_breakdown(const std::vector<Result<CopyStats>>& written, std::size_t first_ok) {
  gpu_image::StoreWriter::Times store;
  for (const auto& w : written) {
    if (!w) continue;
    store.digest += w->store_times.digest;
    store.lookup += w->store_times.lookup;
    store.encode += w->store_times.encode;
    store.put += w->store_times.put;
  }
  const CopyStats& batch = *written[first_ok];
  std::string text = " (threads' time: reading " + fixed(batch.reading_seconds) + " s, the rest " +
                     fixed(batch.storing_seconds) + " s";
  if (batch.checksum_seconds + store.digest + store.lookup + store.encode + store.put > 0)
    text += ": XXH3-64 " + fixed(batch.checksum_seconds) + " s, SHA-256 " + fixed(store.digest) + " s, store lookups " +
            fixed(store.lookup) + " s, compressing " + fixed(store.encode) + " s, new chunk files " + fixed(store.put) +
            " s";
  return text + "; finishing " + fixed(batch.finishing_seconds) + " s)";
}

}  // namespace

void GpuMemoryPath::configure(int dir_fd, const MemoryPathStandIns& stand_ins) {
  dir_fd_ = dir_fd;
  const auto read_switch = [](const char* name, bool& on, bool when_unset = true) {
    if (auto value = switch_from_env_or(name, when_unset); value) on = *value;
    else on = when_unset, log::error("cuda: " + value.error().message + "; using " + (when_unset ? "1" : "0"));
    log::param(name, on ? "1" : "0");
  };
  read_switch("GPUCKPT_CUDA_MEMORY_IMAGE", enabled_);
  read_switch("GPUCKPT_STAGING_HUGE_PAGES", huge_pages_);
  read_switch("GPUCKPT_STAGING_MAP_CHUNKS", map_chunks_, false);
  read_switch("GPUCKPT_STORE_RECOGNISE_UNCHANGED", recognise_unchanged_);
  if (auto settings = gpu_image::settings_from_env(); settings) {
    settings_ = *settings;
  } else {
    log::error("cuda: " + settings.error().message + "; using the defaults for the GPU memory image settings");
    settings_ = gpu_image::Settings{};
    settings_.threads = gpu_image::default_threads(static_cast<unsigned>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))));
  }
  gpu_image::log_settings(settings_);
  if (stand_ins.node_store) settings_.node_store = *stand_ins.node_store;
  stand_in_vma_ = stand_ins.staging_vma;
  if (dir_fd >= 0) image_vpids_ = image_vpids(dir_fd);
}

bool GpuMemoryPath::is_stand_in(int pid) const {
  if (!stand_in_vma_) return false;
  auto maps = read_maps(pid);
  return maps && !find_named_region(*maps, *stand_in_vma_).empty();
}

void GpuMemoryPath::before_checkpoint(int pid) {
  if (!enabled_ || stand_in_vma_) return;
  auto maps = read_maps(pid);
  if (maps) maps_before_[pid] = std::move(*maps);
  else log::warn("cuda: " + pid_text(pid) + ": " + maps.error().message + "; CRIU will dump its GPU memory");
}

void GpuMemoryPath::stage(const std::vector<int>& pids, const std::function<void(int pid, int vpid)>& on_durable) {
  std::vector<ProcessMemory> jobs;
  for (int pid : pids) {
    PathFacts facts;
    facts.enabled = enabled_;
    facts.image_dir_known = dir_fd_ >= 0;
    facts.image_dir_is_stream = dir_fd_ >= 0 && image_dir_is_stream(dir_fd_);
    facts.can_drop_in_task = criu::can_inject_syscalls();
    std::vector<gpu_image::Region> regions;
    if (auto after = read_maps(pid); after) {
      if (stand_in_vma_) regions = find_named_region(*after, *stand_in_vma_);
      else if (auto before = maps_before_.find(pid); before != maps_before_.end())
        regions = find_staging_regions(before->second, *after);
    }
    facts.staging_regions = regions.size();
    const PathDecision decision = decide_memory_path(facts);
    if (!decision.own) {
      log::info("cuda: " + pid_text(pid) + ": " + decision.why);
      continue;
    }
    std::uint64_t bytes = 0;
    for (const auto& r : regions) bytes += r.length;
    log::info("cuda: " + pid_text(pid) + ": " + std::to_string(regions.size()) + " staging region(s), " +
              fixed(static_cast<double>(bytes) / (1 << 20), 0) + " MiB");
    jobs.push_back({pid, namespace_pid(pid), std::move(regions), known_chunks(pid)});
  }
  if (jobs.empty()) return;

  const auto start = Clock::now();
  auto written = write_memory_images(jobs, dir_fd_, settings_);
  const double write_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::uint64_t memory = 0, stored = 0, written_bytes = 0;
  std::size_t ok_count = 0, first_ok = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (!written[i]) {
      // Nothing was dropped: CRIU dumps the memory, or the dump fails on its own (a full disk fails it anyway).
      log::error("cuda: " + pid_text(jobs[i].pid) + ": writing its GPU memory image failed: " +
                 written[i].error().message + "; CRIU dumps its GPU memory instead");
      continue;
    }
    if (ok_count++ == 0) first_ok = i;
    memory += written[i]->memory_bytes;
    stored += written[i]->stored_bytes;
    written_bytes += written[i]->written_bytes;
    if (written[i]->manifest) remember(jobs[i].pid, *written[i]->manifest);
    log::info("cuda: " + pid_text(jobs[i].pid) + ": wrote " +
              (settings_.store.empty() ? gpu_image::file_name(jobs[i].vpid)
                                       : gpu_image::manifest_name(jobs[i].vpid) + " (chunks in " + settings_.store + ")") +
              ": " + describe(*written[i]));
  }
  log::info("cuda: wrote the staging memory of " + std::to_string(ok_count) + " process(es) with " +
            std::to_string(settings_.threads) + " thread(s), durable");
  log::info("timing: gpu memory image write: " + fixed(write_s) + " s, " + rate(memory, write_s) + " of memory, " +
            fixed(static_cast<double>(stored) / (1 << 20), 0) + " MiB stored, " +
            fixed(static_cast<double>(written_bytes) / (1 << 20), 0) + " MiB written" +
            (ok_count > 0 ? write_breakdown(written, first_ok) : std::string()));

  const auto drop_start = Clock::now();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (!written[i]) continue;
    const int pid = jobs[i].pid;
    // From here on the memory may be gone from the task: whoever cleans up must know where it is.
    staged_[pid] = jobs[i].vpid;
    on_durable(pid, jobs[i].vpid);
    std::vector<criu::MemoryRange> ranges;
    for (const auto& r : jobs[i].regions) ranges.push_back({r.start, r.length});
    if (auto dropped = criu::madvise_in_task(pid, ranges, MADV_DONTNEED, "MADV_DONTNEED"); !dropped) {
      // The pages stay and CRIU dumps them too; the image is still right, so restore uses it. Slower, correct.
      log::warn("cuda: " + pid_text(pid) + ": " + dropped.error().message + "; CRIU dumps the GPU memory as well");
      continue;
    }
    log::info("cuda: " + pid_text(pid) + ": dropped " + std::to_string(ranges.size()) + " staging region(s) inside "
              "the task; CRIU records them as empty");
  }
  log::info("timing: gpu memory drop: " + fixed(std::chrono::duration<double>(Clock::now() - drop_start).count()) +
            " s");
}

std::set<int> GpuMemoryPath::refill(const std::string& why) {
  std::set<int> failed;
  if (staged_.empty()) return failed;
  std::vector<ProcessMemory> jobs;
  for (const auto& [pid, vpid] : staged_) jobs.push_back({pid, vpid, {}, nullptr});
  auto filled = fill_from_images(jobs, dir_fd_, settings_);
  std::size_t ok_count = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (filled[i]) {
      ++ok_count;
      continue;
    }
    failed.insert(jobs[i].pid);
    log::error("cuda: " + why + ": " + pid_text(jobs[i].pid) + ": its GPU memory could not be put back: " +
               filled[i].error().message);
  }
  log::info("cuda: " + why + ": filled the staging memory of " + std::to_string(ok_count) + " process(es) from " +
            "their images before the driver's restore");
  return failed;
}

Result<void> GpuMemoryPath::check_store() const {
  const std::string store_dir = gpu_image::restore_store_dir(settings_);
  std::shared_ptr<const chunk_store::Store> store;
  for (int vpid : image_vpids_) {
    const std::string name = gpu_image::manifest_name(vpid);
    struct stat st {};
    if (::fstatat(dir_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;   // an inline image
    GPUCKPT_TRY(const auto manifest, gpu_image::read_manifest(dir_fd_, name));
    if (!store) {
      GPUCKPT_TRY(store, chunk_store::Store::open(store_dir, false),
                  "checkpoint " + manifest.checkpoint + " (" + name + ") keeps its GPU memory in a chunk store "
                  "(written to " + manifest.store + "), and this node's cannot be used");
    }
    const auto start = Clock::now();
    GPUCKPT_TRY_VOID(gpu_image::check_chunks(manifest, *store, name));
    log::info("cuda: checkpoint " + manifest.checkpoint + ": " + name + ": all " +
              std::to_string(manifest.entries.size()) + " chunks present in " + store_dir + " (" +
              fixed(std::chrono::duration<double>(Clock::now() - start).count()) + " s)");
  }
  return {};
}

void GpuMemoryPath::ask_for_huge_pages(const std::vector<ProcessMemory>& jobs) const {
  // The restored staging memory is fresh private anonymous memory, faulted in first by the fill's copy. With
  // MADV_HUGEPAGE each fault gets a 2 MiB page (where the kernel has one: otherwise 4 KiB pages, as without), so
  // the fill faults 512 times less and the driver's restore reads memory with fewer pages to pin. The node's THP
  // mode must allow it: "madvise" (the common default) or "always". Anything failing here only costs speed.
  const auto start = Clock::now();
  std::uint64_t bytes = 0;
  std::size_t done = 0;
  for (const ProcessMemory& job : jobs) {
    auto regions = image_regions(dir_fd_, job.vpid, settings_);
    if (!regions) continue;   // the fill names the problem
    std::vector<criu::MemoryRange> ranges;
    for (const auto& r : *regions)
      if (r.length >= kHugePageBytes) ranges.push_back({r.start, r.length});
    if (ranges.empty()) continue;
    if (auto advised = criu::madvise_in_task(job.pid, ranges, MADV_HUGEPAGE, "MADV_HUGEPAGE"); !advised) {
      log::warn("cuda: " + pid_text(job.pid) + ": " + advised.error().message + "; its staging memory is filled "
                "in small pages");
      continue;
    }
    ++done;
    for (const auto& r : ranges) bytes += r.length;
  }
  log::info("cuda: asked for huge pages on the staging memory of " + std::to_string(done) + " process(es), " +
            fixed(static_cast<double>(bytes) / (1 << 20), 0) + " MiB (" +
            fixed(std::chrono::duration<double>(Clock::now() - start).count(), 3) + " s)");
}

std::vector<std::vector<bool>> GpuMemoryPath::map_chunks(const std::vector<ProcessMemory>& jobs) const {
  const std::string store_dir = gpu_image::restore_store_dir(settings_);
  std::vector<std::vector<bool>> in_place(jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const ProcessMemory& job = jobs[j];
    auto source = gpu_image::open_memory_source(dir_fd_, job.vpid, store_dir, settings_.node_store);
    if (!source) continue;   // the fill names the problem
    const auto* reader = dynamic_cast<const gpu_image::StoreReader*>(source->get());
    // Only the node store's chunks, checked by XXH3-64 through the descriptor the task maps (chunk_mapping.h).
    if (reader == nullptr || reader->check() != gpu_image::ChunkCheck::Checksum) continue;
    const auto start = Clock::now();
    auto mapped = map_store_chunks(job.pid, *reader, settings_.threads);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!mapped) {
      log::warn("cuda: " + pid_text(job.pid) + ": mapping its chunks from " + store_dir + " failed: " +
                mapped.error().message + "; every chunk is copied instead");
      continue;
    }
    log::info("cuda: " + pid_text(job.pid) + ": mapped " + std::to_string(mapped->chunks) + " chunk(s), " +
              fixed(static_cast<double>(mapped->bytes) / (1 << 20), 0) + " MiB, from " + store_dir +
              " into its staging memory, each checked by XXH3-64 (" + std::to_string(mapped->unmappable) +
              " stored compressed or in the old layout are copied)");
    log::info("timing: gpu memory chunk mapping: " + fixed(seconds) + " s (checking " + fixed(mapped->check_seconds) +
              " s, inside the task " + fixed(mapped->task_seconds) + " s)");
    in_place[j] = std::move(mapped->in_place);
  }
  return in_place;
}

std::map<int, int> GpuMemoryPath::fill(const std::vector<int>& candidates) {
  std::map<int, int> results;
  if (image_vpids_.empty()) return results;
  std::vector<ProcessMemory> jobs;
  for (int pid : candidates) {
    const int vpid = namespace_pid(pid);
    if (std::binary_search(image_vpids_.begin(), image_vpids_.end(), vpid)) jobs.push_back({pid, vpid, {}, nullptr});
  }
  if (jobs.size() < image_vpids_.size()) {
    // An image no process takes is GPU memory some process would restore without: fail them all rather than let
    // one run with wrong data.
    std::string unmatched, seen;
    for (int vpid : image_vpids_)
      if (std::none_of(jobs.begin(), jobs.end(), [&](const ProcessMemory& j) { return j.vpid == vpid; }))
        unmatched += (unmatched.empty() ? "" : ", ") + gpu_image::file_name(vpid);
    for (int pid : candidates) seen += (seen.empty() ? "" : ", ") + std::to_string(pid) + "/" + std::to_string(namespace_pid(pid));
    log::error("cuda: " + unmatched + " match(es) no restored process (pid/namespace pid: " + seen + "); the restore "
               "fails rather than restore GPU state without its memory");
    for (int pid : candidates) results[pid] = -ENOENT;
    return results;
  }
  // The fill's time is all of it: huge pages asked for, chunks mapped, the rest copied.
  const auto start = Clock::now();
  if (huge_pages_) ask_for_huge_pages(jobs);
  const auto mapped = map_chunks_ ? map_chunks(jobs) : std::vector<std::vector<bool>>{};
  auto filled = fill_from_images(jobs, dir_fd_, settings_, true, mapped);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::uint64_t memory = 0;
  std::size_t ok_count = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (!filled[i]) {
      log::error("cuda: " + pid_text(jobs[i].pid) + ": " + filled[i].error().message);
      results[jobs[i].pid] = -(filled[i].error().errno_value > 0 ? filled[i].error().errno_value : EIO);
      continue;
    }
    results[jobs[i].pid] = 0;
    ++ok_count;
    if (i < mapped.size() && std::find(mapped[i].begin(), mapped[i].end(), true) != mapped[i].end())
      mapped_pids_.insert(jobs[i].pid);
    memory += filled[i]->memory_bytes;
    // Every stored chunk now in the process was checked against the manifest's XXH3-64 (mapped or copied from the
    // node store): what its next dump may recognise unchanged chunks by. After a SHA-256-checked read the XXH3-64
    // values are the archive's word only, so nothing is kept.
    if (filled[i]->manifest && std::string_view(filled[i]->chunk_check) == "XXH3-64")
      remember(jobs[i].pid, *filled[i]->manifest);
    log::info("cuda: " + pid_text(jobs[i].pid) + ": filled (namespace pid " + std::to_string(jobs[i].vpid) + "): " +
              describe(*filled[i]));
  }
  log::info("cuda: filled the staging memory of " + std::to_string(ok_count) + " process(es) with " +
            std::to_string(settings_.threads) + " thread(s)");
  log::info("timing: gpu memory image fill: " + fixed(seconds) + " s, " + rate(memory, seconds));
  return results;
}

void GpuMemoryPath::release_mapped(int pid) {
  if (mapped_pids_.erase(pid) == 0) return;
  const std::string store_dir = gpu_image::restore_store_dir(settings_);
  const auto start = Clock::now();
  auto released = release_store_chunks(pid, store_dir);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!released) {
    log::warn("cuda: " + pid_text(pid) + ": its staging memory still maps chunk files of " + store_dir + " (" +
              released.error().message + "): it runs on, but its next checkpoint fails in CRIU");
    return;
  }
  log::info("cuda: " + pid_text(pid) + ": released " + fixed(static_cast<double>(*released) / (1 << 20), 0) +
            " MiB of chunks mapped from " + store_dir + " after the driver's restore (" + fixed(seconds) + " s)");
}

std::shared_ptr<const gpu_image::KnownChunks> GpuMemoryPath::known_chunks(int pid) const {
  if (!recognise_unchanged_ || settings_.store.empty()) return nullptr;
  auto process = memory_lineage::identify_process(pid);
  if (!process) {
    log::warn("cuda: " + pid_text(pid) + ": " + process.error().message + "; every chunk is hashed");
    return nullptr;
  }
  auto previous = memory_lineage::recall(settings_.node_store, *process);
  if (!previous) {
    if (previous.error().errno_value != ENOENT)
      log::warn("cuda: " + pid_text(pid) + ": its last GPU memory manifest cannot be used (" + previous.error().message +
                "); every chunk is hashed");
    return nullptr;
  }
  auto known = std::make_shared<const gpu_image::KnownChunks>(*previous);
  log::info("cuda: " + pid_text(pid) + ": " + std::to_string(known->size()) + " stored chunk(s) of its last image "
            "(checkpoint " + known->checkpoint() + ") are recognised by XXH3-64 if unchanged");
  return known;
}

void GpuMemoryPath::remember(int pid, const gpu_image::Manifest& manifest) const {
  if (!recognise_unchanged_) return;
  auto process = memory_lineage::identify_process(pid);
  auto kept = process ? memory_lineage::remember(settings_.node_store, *process, manifest) : Result<void>(process.error());
  if (!kept)
    log::warn("cuda: " + pid_text(pid) + ": its GPU memory manifest is not kept for its next checkpoint (" +
              kept.error().message + "); that one hashes every chunk");
}

}  // namespace gpuckpt::cuda
