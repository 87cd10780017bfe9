#include "node/metrics.h"

#include <sys/statvfs.h>

#include <sstream>

namespace gpuckpt::node {

namespace fs = std::filesystem;

namespace {

// The kinds every scrape shows, observed or not: a rate over a series that appears only after the first job
// misses that job.
constexpr JobKind kShownKinds[] = {JobKind::checkpoint, JobKind::restore, JobKind::image};

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// `labels` without braces ("kind=\"restore\""), so that "le" can join them.
void render_histogram(std::ostream& o, const std::string& name, const std::string& labels,
                      const DurationHistogram& h) {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < DurationHistogram::kBounds.size(); ++i) {
    cumulative += h.buckets[i];
    o << name << "_bucket{" << labels << ",le=\"" << DurationHistogram::kBounds[i] << "\"} " << cumulative << "\n";
  }
  o << name << "_bucket{" << labels << ",le=\"+Inf\"} " << h.count << "\n"
    << name << "_sum{" << labels << "} " << h.sum << "\n"
    << name << "_count{" << labels << "} " << h.count << "\n";
}

}  // namespace

void DurationHistogram::observe(double seconds) {
  ++count;
  sum += seconds;
  for (std::size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) {
      ++buckets[i];
      return;
    }
}

std::optional<ArchiveDirUsage> archive_dir_usage(const fs::path& dir) {
  struct statvfs fs_stat {};
  if (::statvfs(dir.c_str(), &fs_stat) != 0) return std::nullopt;
  ArchiveDirUsage usage;
  usage.free_bytes = static_cast<std::uint64_t>(fs_stat.f_bavail) * fs_stat.f_frsize;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  if (ec) return std::nullopt;
  // Files vanish while jobs finish and retention runs: what cannot be read any more is simply not counted.
  for (const fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
    if (ec) break;
    if (it->symlink_status(ec).type() != fs::file_type::regular) continue;
    const auto size = it->file_size(ec);
    if (!ec) usage.bytes += size;
  }
  return usage;
}

void Metrics::job_accepted(JobKind kind) {
  std::lock_guard lock(mutex_);
  ++kinds_[kind].in_flight;
}

void Metrics::job_finished(JobKind kind, bool ok, double seconds,
                           const std::map<std::string, double>& phase_seconds,
                           const std::map<std::string, double>& runtime_phase_seconds) {
  std::lock_guard lock(mutex_);
  auto& k = kinds_[kind];
  if (k.in_flight > 0) --k.in_flight;
  (ok ? k.succeeded : k.failed)++;
  (ok ? k.success_seconds : k.failure_seconds).observe(seconds);
  for (const auto& [phase, s] : phase_seconds)
    if (phase != "total") k.phase_seconds[phase].observe(s);
  for (const auto& [phase, s] : runtime_phase_seconds) k.runtime_phase_seconds[phase].observe(s);
}

void Metrics::checkpoint_written(std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  checkpoint_bytes_ += bytes;
}

void Metrics::request_rejected(RejectReason reason) {
  std::lock_guard lock(mutex_);
  ++rejected_[reason];
}

void Metrics::kubelet_archive_annotated() {
  std::lock_guard lock(mutex_);
  ++kubelet_annotated_;
}

void Metrics::kubelet_archive_quarantined() {
  std::lock_guard lock(mutex_);
  ++kubelet_quarantined_;
}

void Metrics::pod_event_posted() {
  std::lock_guard lock(mutex_);
  ++events_posted_;
}

void Metrics::pod_event_dropped(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (reason == "queue_full") ++events_dropped_queue_full_;
  else if (reason == "shutdown") ++events_dropped_shutdown_;
  else ++events_dropped_api_error_;
}

void Metrics::chunks_sent(std::uint64_t uploaded, std::uint64_t bytes, std::uint64_t skipped, unsigned streams) {
  std::lock_guard lock(mutex_);
  chunks_sent_ += uploaded;
  chunk_bytes_sent_ += bytes;
  chunks_skipped_ += skipped;
  chunk_streams_ = streams;
}

void Metrics::chunk_received(const std::string& result) {
  std::lock_guard lock(mutex_);
  if (result == "added") ++chunks_added_;
  else if (result == "present") ++chunks_present_;
  else ++chunks_refused_;
}

void Metrics::set_runtime(const std::string& kind, const std::string& name, const std::string& version) {
  std::lock_guard lock(mutex_);
  runtime_kind_ = kind;
  runtime_name_ = name;
  runtime_version_ = version;
}

RuntimeInfo Metrics::runtime() const {
  std::lock_guard lock(mutex_);
  return {runtime_kind_, runtime_name_, runtime_version_};
}

std::string Metrics::render(const std::optional<ArchiveDirUsage>& archive_dir) const {
  std::lock_guard lock(mutex_);
  std::ostringstream o;
  if (!runtime_kind_.empty())
    o << "# HELP gpuckpt_runtime_info The container runtime the agent talks to, as it introduced itself.\n"
      << "# TYPE gpuckpt_runtime_info gauge\n"
      << "gpuckpt_runtime_info{kind=\"" << label_value(runtime_kind_) << "\",name=\"" << label_value(runtime_name_)
      << "\",version=\"" << label_value(runtime_version_) << "\"} 1\n";
  render_jobs(o);
  render_node(o, archive_dir);
  render_chunks(o);
  return o.str();
}

void Metrics::render_jobs(std::ostream& o) const {
  static const KindCounts none;
  auto kind = [&](JobKind name) -> const KindCounts& {
    auto it = kinds_.find(name);
    return it == kinds_.end() ? none : it->second;
  };
  struct JobCounter {
    JobKind kind;
    const char *name, *help;
  };
  for (const auto& [k, name, help] : {JobCounter{JobKind::checkpoint, "gpuckpt_checkpoints_total", "Checkpoint jobs"},
                                      JobCounter{JobKind::restore, "gpuckpt_restores_total", "Restore jobs"},
                                      JobCounter{JobKind::image, "gpuckpt_images_total", "Checkpoint image jobs"}})
    o << "# HELP " << name << " " << help << " finished, by result.\n"
      << "# TYPE " << name << " counter\n"
      << name << "{result=\"success\"} " << kind(k).succeeded << "\n"
      << name << "{result=\"failure\"} " << kind(k).failed << "\n";
  o << "# HELP gpuckpt_jobs_in_flight Jobs accepted and not finished (queued for a slot or running), by kind.\n"
    << "# TYPE gpuckpt_jobs_in_flight gauge\n";
  for (JobKind k : kShownKinds)
    o << "gpuckpt_jobs_in_flight{kind=\"" << to_string(k) << "\"} " << kind(k).in_flight << "\n";
  o << "# HELP gpuckpt_job_duration_seconds Time of finished jobs from acceptance to end, by kind and result.\n"
    << "# TYPE gpuckpt_job_duration_seconds histogram\n";
  for (JobKind k : kShownKinds) {
    const std::string label = "kind=\"" + std::string(to_string(k)) + "\"";
    render_histogram(o, "gpuckpt_job_duration_seconds", label + ",result=\"success\"", kind(k).success_seconds);
    render_histogram(o, "gpuckpt_job_duration_seconds", label + ",result=\"failure\"", kind(k).failure_seconds);
  }
  const auto by_phase = [&](const char* family, const char* help,
                            std::map<std::string, DurationHistogram> KindCounts::*series) {
    o << "# HELP " << family << " " << help << "\n# TYPE " << family << " histogram\n";
    for (JobKind k : kShownKinds)
      for (const auto& [phase, h] : kind(k).*series)
        render_histogram(o, family, "kind=\"" + std::string(to_string(k)) + "\",phase=\"" + label_value(phase) + "\"",
                         h);
  };
  by_phase("gpuckpt_job_phase_duration_seconds",
           "Time of each step of a job (GET /v1/<kind>s/ID phase_seconds), by kind and phase.",
           &KindCounts::phase_seconds);
  by_phase("gpuckpt_job_runtime_phase_duration_seconds",
           "The parts of a job's runtime call (GET /v1/<kind>s/ID runtime_phase_seconds, from CRIU's statistics), by "
           "kind and phase.",
           &KindCounts::runtime_phase_seconds);
  o << "# HELP gpuckpt_runtime_restore_step_duration_seconds The plugin's steps of restores no agent job ran "
       "(kubelet's, through CRI), by step.\n"
    << "# TYPE gpuckpt_runtime_restore_step_duration_seconds histogram\n";
  for (const auto& [step, h] : runtime_restore_steps_)
    render_histogram(o, "gpuckpt_runtime_restore_step_duration_seconds", "step=\"" + label_value(step) + "\"", h);
}

void Metrics::runtime_restore_observed(const std::map<std::string, double>& step_seconds) {
  std::lock_guard lock(mutex_);
  for (const auto& [step, seconds] : step_seconds) runtime_restore_steps_[step].observe(seconds);
}

void Metrics::render_node(std::ostream& o, const std::optional<ArchiveDirUsage>& archive_dir) const {
  o << "# HELP gpuckpt_checkpoint_bytes_total Bytes of checkpoint archives written.\n"
    << "# TYPE gpuckpt_checkpoint_bytes_total counter\n"
    << "gpuckpt_checkpoint_bytes_total " << checkpoint_bytes_ << "\n";
  if (archive_dir)
    o << "# HELP gpuckpt_archive_dir_bytes Bytes of the files in the archive directory (checkpoints.dir).\n"
      << "# TYPE gpuckpt_archive_dir_bytes gauge\n"
      << "gpuckpt_archive_dir_bytes " << archive_dir->bytes << "\n"
      << "# HELP gpuckpt_archive_dir_free_bytes Bytes the archive directory's filesystem has free for the agent.\n"
      << "# TYPE gpuckpt_archive_dir_free_bytes gauge\n"
      << "gpuckpt_archive_dir_free_bytes " << archive_dir->free_bytes << "\n";
  o << "# HELP gpuckpt_kubelet_archives_annotated_total kubelet-written archives the agent annotated.\n"
    << "# TYPE gpuckpt_kubelet_archives_annotated_total counter\n"
    << "gpuckpt_kubelet_archives_annotated_total " << kubelet_annotated_ << "\n"
    << "# HELP gpuckpt_kubelet_archives_quarantined_total kubelet-written archives the agent could not use.\n"
    << "# TYPE gpuckpt_kubelet_archives_quarantined_total counter\n"
    << "gpuckpt_kubelet_archives_quarantined_total " << kubelet_quarantined_ << "\n"
    << "# HELP gpuckpt_pod_events_posted_total Kubernetes Events on pods the API server took.\n"
    << "# TYPE gpuckpt_pod_events_posted_total counter\n"
    << "gpuckpt_pod_events_posted_total " << events_posted_ << "\n"
    << "# HELP gpuckpt_pod_events_dropped_total Kubernetes Events on pods not posted, by reason.\n"
    << "# TYPE gpuckpt_pod_events_dropped_total counter\n"
    << "gpuckpt_pod_events_dropped_total{reason=\"queue_full\"} " << events_dropped_queue_full_ << "\n"
    << "gpuckpt_pod_events_dropped_total{reason=\"api_error\"} " << events_dropped_api_error_ << "\n"
    << "gpuckpt_pod_events_dropped_total{reason=\"shutdown\"} " << events_dropped_shutdown_ << "\n"
    << "# HELP gpuckpt_api_rejected_total API requests refused, by reason.\n"
    << "# TYPE gpuckpt_api_rejected_total counter\n";
  for (RejectReason reason : kRejectReasons) {
    const auto it = rejected_.find(reason);
    o << "gpuckpt_api_rejected_total{reason=\"" << to_string(reason) << "\"} " << (it == rejected_.end() ? 0 : it->second)
      << "\n";
  }
}

void Metrics::render_chunks(std::ostream& o) const {
  o << "# HELP gpuckpt_transfer_chunks_sent_total Chunks of store-backed checkpoints uploaded to other agents.\n"
    << "# TYPE gpuckpt_transfer_chunks_sent_total counter\n"
    << "gpuckpt_transfer_chunks_sent_total " << chunks_sent_ << "\n"
    << "# HELP gpuckpt_transfer_chunk_bytes_sent_total Bytes of the chunk files uploaded to other agents.\n"
    << "# TYPE gpuckpt_transfer_chunk_bytes_sent_total counter\n"
    << "gpuckpt_transfer_chunk_bytes_sent_total " << chunk_bytes_sent_ << "\n"
    << "# HELP gpuckpt_transfer_chunks_skipped_total Chunks not uploaded because the target agent had them.\n"
    << "# TYPE gpuckpt_transfer_chunks_skipped_total counter\n"
    << "gpuckpt_transfer_chunks_skipped_total " << chunks_skipped_ << "\n"
    << "# HELP gpuckpt_transfer_chunk_streams Parallel uploads the last transfer with chunks to send used.\n"
    << "# TYPE gpuckpt_transfer_chunk_streams gauge\n"
    << "gpuckpt_transfer_chunk_streams " << chunk_streams_ << "\n"
    << "# HELP gpuckpt_chunks_received_total Chunks other agents uploaded here, by result.\n"
    << "# TYPE gpuckpt_chunks_received_total counter\n"
    << "gpuckpt_chunks_received_total{result=\"added\"} " << chunks_added_ << "\n"
    << "gpuckpt_chunks_received_total{result=\"present\"} " << chunks_present_ << "\n"
    << "gpuckpt_chunks_received_total{result=\"refused\"} " << chunks_refused_ << "\n";
}

}  // namespace gpuckpt::node
