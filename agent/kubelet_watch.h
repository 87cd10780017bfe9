// Archives kubelet writes itself (ContainerCheckpoint API -> checkpoint-<pod>_<ns>-<container>-<time>.tar in
// its checkpoint directory) get the same GPU annotations as the agent's own, in place (temp + rename).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "agent/pod_events.h"
#include "node/metrics.h"
#include "archive/checkpoint_archive.h"
#include "base/result.h"

namespace gpuckpt::agent {

class KubeletArchiveWatcher {
 public:
  // Each file gets a time budget of `base_budget` plus what reading it at 16 MiB/s takes (budget_for): past it,
  // the file is quarantined like any other unusable archive.
  KubeletArchiveWatcher(std::filesystem::path dir, std::filesystem::path state_dir, ArchiveLimits limits,
                        std::function<Result<NodeInventory>()> inventory, node::Metrics& metrics,
                        std::chrono::milliseconds base_budget = std::chrono::seconds(30));

  // One pass; an archive is annotated once its size and mtime were the same on two passes (kubelet finished
  // writing it). One that cannot be annotated is quarantined (see quarantine_path). Returns how many archives
  // it annotated.
  int scan();

  // Where an archive's pod is known (its spec names it), an annotated archive makes a CheckpointAnnotated event on
  // that pod and a quarantined one a CheckpointQuarantined warning with the reason.
  void report_events_to(std::function<void(PodEvent)> record) { record_event_ = std::move(record); }

 private:
  struct Seen {
    std::uintmax_t size = 0;
    std::filesystem::file_time_type mtime;
    bool operator==(const Seen&) const = default;
  };
  std::chrono::milliseconds budget_for(std::uintmax_t archive_bytes) const;
  // `pod`: the pod the archive's spec names, once it was read.
  Result<bool> annotate(const std::filesystem::path& archive, node::PodRef& pod);
  std::filesystem::path quarantine_path(const std::filesystem::path& archive) const;
  bool is_quarantined(const std::filesystem::path& archive, const Seen& now) const;
  void quarantine(const std::filesystem::path& archive, const Seen& now, const std::string& reason);

  std::filesystem::path dir_;
  std::filesystem::path state_dir_;
  ArchiveLimits limits_;
  std::function<Result<NodeInventory>()> inventory_;
  node::Metrics& metrics_;
  std::chrono::milliseconds base_budget_;
  std::map<std::string, Seen> pending_;
  std::map<std::string, Seen> done_;
  std::function<void(PodEvent)> record_event_;
};

}  // namespace gpuckpt::agent
