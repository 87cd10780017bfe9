#include "agent/kubelet_watch.h"

#include <cctype>

#include "base/json_reader.h"
#include "base/log.h"
#include "restore/restore_plan.h"
#include "archive/checkpoint_images.h"
#include "state/container_store.h"

namespace gpuckpt::agent {

using namespace gpuckpt::node;

namespace fs = std::filesystem;

KubeletArchiveWatcher::KubeletArchiveWatcher(fs::path dir, fs::path state_dir, ArchiveLimits limits,
                                             std::function<Result<NodeInventory>()> inventory, Metrics& metrics,
                                             std::chrono::milliseconds base_budget)
    : dir_(std::move(dir)), state_dir_(std::move(state_dir)), limits_(limits), inventory_(std::move(inventory)),
      metrics_(metrics), base_budget_(base_budget) {}

std::chrono::milliseconds KubeletArchiveWatcher::budget_for(std::uintmax_t archive_bytes) const {
  // At least 16 MiB/s of the archive file: a genuine archive of any size fits, while a small file that declares
  // far more work (a zstd stream expanding a thousandfold) gets little more than the base.
  return base_budget_ + std::chrono::milliseconds(archive_bytes / ((16u << 20) / 1000));
}

int KubeletArchiveWatcher::scan() {
  int annotated = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind("checkpoint-", 0) != 0 || name.find(".tar") == std::string::npos) continue;
    if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) continue;
    const Seen now{entry.file_size(ec), entry.last_write_time(ec)};
    if (ec) continue;
    const auto key = entry.path().string();
    if (auto it = done_.find(key); it != done_.end() && it->second == now) continue;
    if (is_quarantined(entry.path(), now)) {
      done_[key] = now;
      continue;
    }
    if (auto it = pending_.find(key); it == pending_.end() || !(it->second == now)) {
      pending_[key] = now;   // still being written, or new: look again next pass
      continue;
    }
    pending_.erase(key);
    Result<bool> result = false;
    PodRef pod;
    try {
      result = annotate(entry.path(), pod);
    } catch (const std::exception& e) {
      result = make_error(std::string("internal error: ") + e.what());
    }
    if (!result) {
      log::warn("kubelet archive " + log::escaped(key) + " not annotated: " + result.error().message);
      quarantine(entry.path(), now, result.error().message);
      if (record_event_ && !pod.empty())
        record_event_({pod, true, "CheckpointQuarantined", "Checkpoint",
                       "kubelet's checkpoint " + name + " cannot be used by gpuckpt (quarantined): " +
                           result.error().message});
    } else if (result.value()) {
      ++annotated;
      metrics_.kubelet_archive_annotated();
      if (record_event_ && !pod.empty())
        record_event_({pod, false, "CheckpointAnnotated", "Checkpoint",
                       "kubelet's checkpoint " + name + " got its GPU record from gpuckpt: restores of it match GPUs"});
    }
    done_[key] = Seen{fs::file_size(entry.path(), ec), fs::last_write_time(entry.path(), ec)};
  }
  return annotated;
}

// <state_dir>/quarantine/<archive name>.json: an archive the watcher could not use, and why. It is not tried
// again (in this run or after a restart) until its size or mtime change; the archive itself stays where kubelet
// put it.
fs::path KubeletArchiveWatcher::quarantine_path(const fs::path& archive) const {
  std::string name = archive.filename().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '-';
  return state_dir_ / "quarantine" / (name.substr(0, 200) + ".json");
}

static std::int64_t mtime_ticks(const fs::file_time_type& t) {
  return static_cast<std::int64_t>(t.time_since_epoch().count());
}

bool KubeletArchiveWatcher::is_quarantined(const fs::path& archive, const Seen& now) const {
  auto json = read_json_file(quarantine_path(archive));
  if (!json || !json.value() || !json.value()->is_object()) return false;
  const auto& q = *json.value();
  return json_integer(q.value("size", nlohmann::json()), 0, INT64_MAX) == static_cast<std::int64_t>(now.size) &&
         json_integer(q.value("mtime", nlohmann::json()), INT64_MIN, INT64_MAX) == mtime_ticks(now.mtime) &&
         q.value("archive", nlohmann::json()) == archive.string();
}

void KubeletArchiveWatcher::quarantine(const fs::path& archive, const Seen& now, const std::string& reason) {
  const nlohmann::json record = {{"archive", archive.string()}, {"size", now.size}, {"mtime", mtime_ticks(now.mtime)},
                                 {"reason", reason}, {"quarantined_at", utc_now_rfc3339()}};
  if (auto written = write_file_atomically(quarantine_path(archive), record.dump(2)); !written)
    log::warn("cannot quarantine " + log::escaped(archive.string()) + ": " + written.error().message);
  else
    log::warn("kubelet archive " + log::escaped(archive.string()) + " quarantined (" +
              quarantine_path(archive).string() + "); it is not tried again until it changes");
  metrics_.kubelet_archive_quarantined();
}

Result<bool> KubeletArchiveWatcher::annotate(const fs::path& archive, PodRef& pod) {
  // One budget for everything this file costs (inspect and rewrite), so that one file cannot hold the watcher
  // and the good archives behind it.
  std::error_code ec;
  ArchiveLimits limits = limits_;
  limits.deadline = std::chrono::steady_clock::now() + budget_for(fs::file_size(archive, ec));
  GPUCKPT_TRY(auto info, inspect_checkpoint_archive(archive, limits));
  pod = pod_of_checkpoint_spec(info.spec);
  if (info.gpus) return false;   // annotated already (by us, or it came from another node)
  if (!info.has_criu_images)
    return make_error("it holds no CRIU images (checkpoint/inventory.img): not a container checkpoint to annotate");
  CheckpointGpuRecord record;
  std::string stem = archive.filename().string();
  stem = stem.substr(0, stem.find(".tar"));
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '-';
  record.checkpoint_id = ("kubelet-" + stem).substr(0, 128);
  std::optional<ContainerGpuState> state;
  if (is_safe_id(info.container_id)) {
    auto read = read_container_state(state_dir_, info.container_id);
    if (read && read.value()) state = *read.value();
  }
  if (state) {
    record.record = state->gpus.record;
    record.devices = state->gpus.devices;
    record.gpu_env = state->gpus.gpu_env;
  } else {
    GPUCKPT_TRY(auto inventory, inventory_(), "reading this node's GPUs");
    record.record.node = std::move(inventory);
  }
  GPUCKPT_TRY_VOID(annotate_checkpoint_archive(archive, archive, record, limits));
  // gpuckpt-nri acts on a restore from this archive only through this entry, bound to the file as it is now.
  if (auto registered = register_kubelet_archive(state_dir_, archive, record); !registered)
    return make_error("annotated, but not registered for gpuckpt-nri: " + registered.error().message);
  log::info("annotated kubelet archive " + log::escaped(archive.string()) + " (container " +
            log::escaped(info.container_name) + ", " +
            std::to_string(record.record.used_gpu_ids.size()) + " GPU(s))");
  return true;
}

}  // namespace gpuckpt::agent
