// Prometheus text exposition of what the agent did (GET /metrics).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace gpuckpt::node {

struct RuntimeInfo {
  std::string kind, name, version;
};

class Metrics {
 public:
  void checkpoint_done(bool ok, double seconds, std::uint64_t bytes);
  void restore_done(bool ok, double seconds);
  void request_rejected(const std::string& reason);   // "auth", "validation", "not_found", "conflict"
  void kubelet_archive_annotated();
  void kubelet_archive_quarantined();
  // The runtime the agent talks to, as it introduced itself (gpuckpt_runtime_info); empty version: unknown.
  void set_runtime(const std::string& kind, const std::string& name, const std::string& version);
  RuntimeInfo runtime() const;
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::uint64_t checkpoints_ok_ = 0, checkpoints_failed_ = 0, restores_ok_ = 0, restores_failed_ = 0;
  double checkpoint_seconds_ = 0, restore_seconds_ = 0;
  std::uint64_t checkpoint_bytes_ = 0, kubelet_annotated_ = 0, kubelet_quarantined_ = 0;
  std::string runtime_kind_, runtime_name_, runtime_version_;
  std::uint64_t rejected_auth_ = 0, rejected_validation_ = 0, rejected_not_found_ = 0, rejected_conflict_ = 0;
};

}  // namespace gpuckpt::node
