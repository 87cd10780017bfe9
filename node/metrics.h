// Prometheus text exposition of what the agent did (GET /metrics).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>

#include "node/job_state.h"

namespace gpuckpt::node {

struct RuntimeInfo {
  std::string kind, name, version;
};

// The archive directory at scrape time: what its files take and what its filesystem has left for more.
struct ArchiveDirUsage {
  std::uint64_t bytes = 0;        // regular files under the directory, subdirectories (image layouts) included
  std::uint64_t free_bytes = 0;   // statvfs f_bavail * f_frsize: what an unprivileged writer may still use
};
// Walks `dir` without following symlinks; nullopt when it cannot be read (the gauges are left out then).
std::optional<ArchiveDirUsage> archive_dir_usage(const std::filesystem::path& dir);

// Counts and sum of observations in fixed upper bounds (seconds), as Prometheus histograms expose them.
struct DurationHistogram {
  // Jobs take from under a second (a small restore) to tens of minutes (a large GPU checkpoint pushed to a
  // registry, bounded by limits.job_timeout_seconds); phases start at a tenth of a second.
  static constexpr std::array<double, 14> kBounds = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800};
  std::array<std::uint64_t, kBounds.size()> buckets{};   // not cumulative; render() sums them
  std::uint64_t count = 0;
  double sum = 0;
  void observe(double seconds);
};

class Metrics {
 public:
  // A job of `kind` was accepted: it is in flight until job_finished.
  void job_accepted(JobKind kind);
  // It ended: `seconds` from acceptance (the wait for a slot included), `phase_seconds` its steps ("total" is
  // left out: that is `seconds`), `runtime_phase_seconds` the parts of its runtime call (JobStatus).
  void job_finished(JobKind kind, bool ok, double seconds,
                    const std::map<std::string, double>& phase_seconds,
                    const std::map<std::string, double>& runtime_phase_seconds = {});
  void checkpoint_written(std::uint64_t bytes);
  void request_rejected(RejectReason reason);
  void kubelet_archive_annotated();
  void kubelet_archive_quarantined();
  // Kubernetes Events on pods (agent/pod_events.h): one the API server took, or one dropped because the queue
  // was full ("queue_full"), the API server did not take it ("api_error") or the agent stopped first ("shutdown").
  void pod_event_posted();
  void pod_event_dropped(const std::string& reason);
  // A store-backed checkpoint's chunks sent to another agent (node/chunk_transfer.h): `uploaded` chunks of `bytes`
  // (their files), `skipped` the target had already, over `streams` connections at once.
  void chunks_sent(std::uint64_t uploaded, std::uint64_t bytes, std::uint64_t skipped, unsigned streams);
  // A chunk another agent uploaded here: "added" to the store, already "present", or "refused".
  void chunk_received(const std::string& result);
  // The plugin's steps of a restore no job of the agent ran (kubelet's, through CRI), as the plugin left them in the
  // node store: seconds by step ("cpu-pages", "gpu-memory", "gpu-restore").
  void runtime_restore_observed(const std::map<std::string, double>& step_seconds);
  // The runtime the agent talks to, as it introduced itself (gpuckpt_runtime_info); empty version: unknown.
  void set_runtime(const std::string& kind, const std::string& name, const std::string& version);
  RuntimeInfo runtime() const;
  // `archive_dir`: the archive directory's gauges, left out when nullopt.
  std::string render(const std::optional<ArchiveDirUsage>& archive_dir = std::nullopt) const;

 private:
  struct KindCounts {
    std::uint64_t in_flight = 0, succeeded = 0, failed = 0;
    DurationHistogram success_seconds, failure_seconds;
    std::map<std::string, DurationHistogram> phase_seconds;
    std::map<std::string, DurationHistogram> runtime_phase_seconds;
  };
  // render's parts, with mutex_ held: the jobs; the runtime's archives, the kubelet's, Events and the API; chunks.
  void render_jobs(std::ostream& o) const;
  void render_node(std::ostream& o, const std::optional<ArchiveDirUsage>& archive_dir) const;
  void render_chunks(std::ostream& o) const;

  mutable std::mutex mutex_;
  std::map<std::string, DurationHistogram> runtime_restore_steps_;   // runtime_restore_observed
  std::map<JobKind, KindCounts> kinds_;
  std::uint64_t checkpoint_bytes_ = 0, kubelet_annotated_ = 0, kubelet_quarantined_ = 0;
  std::string runtime_kind_, runtime_name_, runtime_version_;
  std::uint64_t events_posted_ = 0, events_dropped_queue_full_ = 0, events_dropped_api_error_ = 0,
                events_dropped_shutdown_ = 0;
  std::uint64_t chunks_sent_ = 0, chunk_bytes_sent_ = 0, chunks_skipped_ = 0, chunk_streams_ = 0;
  std::uint64_t chunks_added_ = 0, chunks_present_ = 0, chunks_refused_ = 0;
  std::map<RejectReason, std::uint64_t> rejected_;
};

}  // namespace gpuckpt::node
