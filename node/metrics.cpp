#include "node/metrics.h"

#include <sstream>

namespace gpuckpt::node {

void Metrics::checkpoint_done(bool ok, double seconds, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  (ok ? checkpoints_ok_ : checkpoints_failed_)++;
  if (ok) {
    checkpoint_seconds_ += seconds;
    checkpoint_bytes_ += bytes;
  }
}

void Metrics::restore_done(bool ok, double seconds) {
  std::lock_guard lock(mutex_);
  (ok ? restores_ok_ : restores_failed_)++;
  if (ok) restore_seconds_ += seconds;
}

void Metrics::request_rejected(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (reason == "auth") ++rejected_auth_;
  else if (reason == "not_found") ++rejected_not_found_;
  else if (reason == "conflict") ++rejected_conflict_;
  else ++rejected_validation_;
}

void Metrics::kubelet_archive_annotated() {
  std::lock_guard lock(mutex_);
  ++kubelet_annotated_;
}

void Metrics::kubelet_archive_quarantined() {
  std::lock_guard lock(mutex_);
  ++kubelet_quarantined_;
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

namespace {

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

}  // namespace

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  std::ostringstream o;
  if (!runtime_kind_.empty())
    o << "# HELP gpuckpt_runtime_info The container runtime the agent talks to, as it introduced itself.\n"
      << "# TYPE gpuckpt_runtime_info gauge\n"
      << "gpuckpt_runtime_info{kind=\"" << label_value(runtime_kind_) << "\",name=\"" << label_value(runtime_name_)
      << "\",version=\"" << label_value(runtime_version_) << "\"} 1\n";
  o << "# HELP gpuckpt_checkpoints_total Checkpoint jobs finished, by result.\n"
    << "# TYPE gpuckpt_checkpoints_total counter\n"
    << "gpuckpt_checkpoints_total{result=\"success\"} " << checkpoints_ok_ << "\n"
    << "gpuckpt_checkpoints_total{result=\"failure\"} " << checkpoints_failed_ << "\n"
    << "# HELP gpuckpt_restores_total Restore jobs finished, by result.\n"
    << "# TYPE gpuckpt_restores_total counter\n"
    << "gpuckpt_restores_total{result=\"success\"} " << restores_ok_ << "\n"
    << "gpuckpt_restores_total{result=\"failure\"} " << restores_failed_ << "\n"
    << "# HELP gpuckpt_checkpoint_duration_seconds Time of successful checkpoint jobs.\n"
    << "# TYPE gpuckpt_checkpoint_duration_seconds summary\n"
    << "gpuckpt_checkpoint_duration_seconds_sum " << checkpoint_seconds_ << "\n"
    << "gpuckpt_checkpoint_duration_seconds_count " << checkpoints_ok_ << "\n"
    << "# HELP gpuckpt_restore_duration_seconds Time of successful restore jobs.\n"
    << "# TYPE gpuckpt_restore_duration_seconds summary\n"
    << "gpuckpt_restore_duration_seconds_sum " << restore_seconds_ << "\n"
    << "gpuckpt_restore_duration_seconds_count " << restores_ok_ << "\n"
    << "# HELP gpuckpt_checkpoint_bytes_total Bytes of checkpoint archives written.\n"
    << "# TYPE gpuckpt_checkpoint_bytes_total counter\n"
    << "gpuckpt_checkpoint_bytes_total " << checkpoint_bytes_ << "\n"
    << "# HELP gpuckpt_kubelet_archives_annotated_total kubelet-written archives the agent annotated.\n"
    << "# TYPE gpuckpt_kubelet_archives_annotated_total counter\n"
    << "gpuckpt_kubelet_archives_annotated_total " << kubelet_annotated_ << "\n"
    << "# HELP gpuckpt_kubelet_archives_quarantined_total kubelet-written archives the agent could not use.\n"
    << "# TYPE gpuckpt_kubelet_archives_quarantined_total counter\n"
    << "gpuckpt_kubelet_archives_quarantined_total " << kubelet_quarantined_ << "\n"
    << "# HELP gpuckpt_api_rejected_total API requests refused, by reason.\n"
    << "# TYPE gpuckpt_api_rejected_total counter\n"
    << "gpuckpt_api_rejected_total{reason=\"auth\"} " << rejected_auth_ << "\n"
    << "gpuckpt_api_rejected_total{reason=\"validation\"} " << rejected_validation_ << "\n"
    << "gpuckpt_api_rejected_total{reason=\"not_found\"} " << rejected_not_found_ << "\n"
    << "gpuckpt_api_rejected_total{reason=\"conflict\"} " << rejected_conflict_ << "\n";
  return o.str();
}

}  // namespace gpuckpt::node
