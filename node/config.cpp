#include "node/config.h"

#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "gpumem/chunk_receive.h"
#include "gpumem/gpu_image.h"
#include "node/archive_transfer.h"
#include "node/chunk_transfer.h"
#include "node/registry_chunks.h"
#include "base/log.h"

namespace gpuckpt::node {

namespace {

// Walks a mapping, refusing keys it does not know; conversions report the full key path.
class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::string source)
      : node_(node), path_(std::move(path)), source_(std::move(source)) {}

  template <class T>
  void get(const char* key, T& out) {
    known_.insert(key);
    const YAML::Node value = node_[key];
    if (!value || value.IsNull()) return;   // null keeps the default (the chart's values default to null)
    try {
      out = value.as<T>();
    } catch (const YAML::Exception&) {
      fail(std::string("'") + full(key) + "' has the wrong type");
    }
  }

  template <class T>
  void get(const char* key, std::optional<T>& out) {   // stays unset when absent or null
    const YAML::Node value = node_[key];
    T parsed{};
    get(key, parsed);
    if (value && !value.IsNull() && error_.empty()) out = parsed;
  }

  Section child(const char* key) {
    known_.insert(key);
    const YAML::Node value = node_[key];
    if (value && !value.IsNull() && !value.IsMap()) fail(std::string("'") + full(key) + "' must be a mapping");
    return Section(value && value.IsMap() ? value : YAML::Node(YAML::NodeType::Map), full(key), source_);
  }

  void finish() {
    if (!node_.IsMap()) return;
    for (const auto& item : node_) {
      const auto key = item.first.as<std::string>();
      if (!known_.count(key)) fail("unknown key '" + full(key.c_str()) + "' (see agent/config.example.yaml)");
    }
  }

  const std::string& error() const { return error_; }

 private:
  std::string full(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  void fail(const std::string& message) {
    if (error_.empty()) error_ = source_ + ": " + message;
  }

  YAML::Node node_;
  std::string path_;
  std::string source_;
  std::set<std::string> known_;
  std::string error_;
};

// The sections' first error, in the order they are read; the top level's last (its unknown keys among them).
class ConfigReader {
 public:
  ConfigReader(const YAML::Node& root, const std::string& source) : top_(root, "", source) {}
  Section& top() { return top_; }
  void keep(Section& s) {
    s.finish();
    if (error_.empty()) error_ = s.error();
  }
  const std::string& finish() {
    keep(top_);
    return error_;
  }

 private:
  Section top_;
  std::string error_;
};

// listen, auth.
void read_server(ConfigReader& r, AgentConfig& c) {
  {
    Section s = r.top().child("listen");
    s.get("address", c.listen_address);
    s.get("port", c.listen_port);
    r.keep(s);
  }
  {
    Section s = r.top().child("auth");
    std::string token_file = c.token_file;
    s.get("token_file", token_file);
    c.token_file = token_file;
    r.keep(s);
  }
}

// checkpoints: the archive directories, their limits, the runtime's time.
void read_checkpoints(ConfigReader& r, AgentConfig& c) {
  Section s = r.top().child("checkpoints");
  std::string dir = c.checkpoint_dir, kubelet_dir = c.kubelet_checkpoint_dir;
  long timeout = c.runtime_timeout.count();
  s.get("dir", dir);
  s.get("kubelet_dir", kubelet_dir);
  s.get("watch_interval_seconds", c.watch_interval_seconds);
  s.get("max_archive_bytes", c.archive_limits.max_archive_bytes);
  s.get("max_entry_bytes", c.archive_limits.max_entry_bytes);
  s.get("runtime_timeout_seconds", timeout);
  c.checkpoint_dir = dir;
  c.kubelet_checkpoint_dir = kubelet_dir;
  c.runtime_timeout = std::chrono::seconds(timeout);
  r.keep(s);
}

// runtime, with its cri, containerd and kubelet sections.
void read_runtime(ConfigReader& r, AgentConfig& c) {
  Section s = r.top().child("runtime");
  s.get("kind", c.runtime_kind);
  s.get("podman_path", c.podman_path);
  Section cri = s.child("cri");
  cri.get("endpoint", c.cri.endpoint);
  cri.get("call_timeout_seconds", c.cri.call_timeout_seconds);
  r.keep(cri);
  Section ctrd = s.child("containerd");
  ctrd.get("address", c.containerd.address);
  ctrd.get("namespace", c.containerd.namespace_name);
  ctrd.get("call_timeout_seconds", c.containerd.call_timeout_seconds);
  r.keep(ctrd);
  Section k = s.child("kubelet");
  k.get("url", c.kubelet.url);
  k.get("token_file", c.kubelet.token_file);
  k.get("ca_file", c.kubelet.ca_file);
  r.keep(k);
  r.keep(s);
}

// match_policy, kubernetes_api, node_labels, events.
void read_node(ConfigReader& r, AgentConfig& c) {
  {
    Section s = r.top().child("match_policy");
    s.get("check_model", c.match_policy.check_model);
    s.get("check_memory", c.match_policy.check_memory);
    s.get("check_firmware", c.match_policy.check_firmware);
    s.get("check_links", c.match_policy.check_links);
    s.get("check_numa", c.match_policy.check_numa);
    r.keep(s);
  }
  {
    Section s = r.top().child("kubernetes_api");
    s.get("server", c.kubernetes_api.endpoint.url);
    s.get("token_file", c.kubernetes_api.endpoint.token_file);
    s.get("ca_file", c.kubernetes_api.endpoint.ca_file);
    s.get("node_name", c.kubernetes_api.node_name);
    r.keep(s);
  }
  {
    Section s = r.top().child("node_labels");
    s.get("enabled", c.node_labels.enabled);
    s.get("method", c.node_labels.method);
    s.get("feature_file", c.node_labels.feature_file);
    s.get("interval_seconds", c.node_labels.interval_seconds);
    r.keep(s);
  }
  {
    Section s = r.top().child("events");
    s.get("enabled", c.events.enabled);
    s.get("queue_length", c.events.queue_length);
    s.get("timeout_seconds", c.events.timeout_seconds);
    r.keep(s);
  }
}

// gpu_memory, retention, image_registry.
void read_storage(ConfigReader& r, AgentConfig& c) {
  {
    Section s = r.top().child("gpu_memory");
    s.get("image", c.gpu_memory.image);
    s.get("threads", c.gpu_memory.threads);
    s.get("compression", c.gpu_memory.compression);
    s.get("sparse", c.gpu_memory.sparse);
    s.get("store", c.gpu_memory.store);
    s.get("huge_pages", c.gpu_memory.huge_pages);
    s.get("map_chunks", c.gpu_memory.map_chunks);
    s.get("recognise_unchanged", c.gpu_memory.recognise_unchanged);
    s.get("cpu_pages", c.gpu_memory.cpu_pages);
    r.keep(s);
  }
  {
    Section s = r.top().child("retention");
    s.get("keep_count", c.retention.keep_count);
    s.get("max_age_hours", c.retention.max_age_hours);
    s.get("max_bytes", c.retention.max_bytes);
    s.get("include_newest", c.retention.include_newest);
    s.get("interval_seconds", c.retention.interval_seconds);
    s.get("gc_grace_seconds", c.retention.gc_grace_seconds);
    r.keep(s);
  }
  {
    Section s = r.top().child("image_registry");
    long timeout = c.image_registry.timeout.count();
    long push_timeout = c.image_registry.push_timeout.count();
    s.get("repository", c.image_registry.repository);
    s.get("credentials_file", c.image_registry.credentials_file);
    s.get("plain_http", c.image_registry.plain_http);
    s.get("timeout_seconds", timeout);
    s.get("push_timeout_seconds", push_timeout);
    s.get("token_realm_host", c.image_registry.token_realm_host);
    s.get("chunk_streams", c.image_registry.chunk_streams);
    c.image_registry.timeout = std::chrono::seconds(timeout);
    c.image_registry.push_timeout = std::chrono::seconds(push_timeout);
    r.keep(s);
  }
}

// limits, transfer.
void read_limits(ConfigReader& r, AgentConfig& c) {
  {
    Section s = r.top().child("limits");
    s.get("max_request_bytes", c.max_request_bytes);
    s.get("max_concurrent_jobs", c.max_concurrent_jobs);
    s.get("max_queued_jobs", c.max_queued_jobs);
    s.get("max_queued_jobs_per_client", c.max_queued_jobs_per_client);
    s.get("max_connections", c.max_connections);
    s.get("max_connections_per_client", c.max_connections_per_client);
    s.get("request_deadline_seconds", c.request_deadline_seconds);
    long job_timeout = c.job_timeout.count();
    s.get("job_timeout_seconds", job_timeout);
    c.job_timeout = std::chrono::seconds(job_timeout);
    long shutdown_grace = c.shutdown_grace.count();
    s.get("shutdown_grace_seconds", shutdown_grace);
    c.shutdown_grace = std::chrono::seconds(shutdown_grace);
    s.get("unreferenced_chunk_bytes", c.unreferenced_chunk_quota.bytes);
    s.get("unreferenced_chunks", c.unreferenced_chunk_quota.chunks);
    r.keep(s);
  }
  {
    Section s = r.top().child("transfer");
    s.get("peer_networks", c.transfer.peer_networks);
    s.get("chunk_streams", c.transfer.chunk_streams);
    r.keep(s);
  }
}

// The values read, checked (each error names `source` and the key); check_limits also raises the two limits that
// have a floor rather than an error.
Result<void> check_services(const AgentConfig& c, const std::string& source) {
  if (c.listen_port < 0 || c.listen_port > 65535)
    return make_error(source + ": listen.port " + std::to_string(c.listen_port) + " is not a port (0-65535; 0 = any)");
  if (!c.image_registry.repository.empty())
    if (auto repo = check_repository(c.image_registry.repository); !repo) return make_error(source + ": " + repo.error().message);
  for (const auto& network : c.transfer.peer_networks)
    if (auto checked = check_network(network); !checked) return make_error(source + ": " + checked.error().message);
  if (c.transfer.chunk_streams < 1 || c.transfer.chunk_streams > static_cast<int>(kMaxChunkUploads))
    return make_error(source + ": transfer.chunk_streams is " + std::to_string(c.transfer.chunk_streams) +
                      "; it must be 1 to " + std::to_string(kMaxChunkUploads) + " (the chunk uploads an agent serves at once)");
  if (c.image_registry.timeout.count() <= 0)
    return make_error(source + ": image_registry.timeout_seconds must be positive");
  if (c.image_registry.push_timeout.count() <= 0)
    return make_error(source + ": image_registry.push_timeout_seconds must be positive");
  if (c.image_registry.chunk_streams < 1 || c.image_registry.chunk_streams > kMaxChunkStreams)
    return make_error(source + ": image_registry.chunk_streams must be 1 to " + std::to_string(kMaxChunkStreams) +
                      ", got " + std::to_string(c.image_registry.chunk_streams));
  if (c.runtime_kind == "crictl")
    return make_error(source + ": runtime.kind 'crictl' is gone: the agent speaks CRI itself now; set runtime.kind: cri "
                      "and runtime.cri.endpoint (or runtime.kind: containerd on containerd 1.7)");
  if (find_runtime_kind(c.runtime_kind) == nullptr) {
    std::string known;
    for (const auto& kind : kRuntimeKinds) known += (known.empty() ? "" : ", ") + std::string(kind.name);
    return make_error(source + ": runtime.kind '" + c.runtime_kind + "' is not one of " + known);
  }
  if (c.node_labels.method != "api" && c.node_labels.method != "nfd_feature_file")
    return make_error(source + ": node_labels.method '" + c.node_labels.method + "' is not one of api, nfd_feature_file");
  if (c.node_labels.method == "nfd_feature_file" && !std::filesystem::path(c.node_labels.feature_file).is_absolute())
    return make_error(source + ": node_labels.feature_file '" + c.node_labels.feature_file + "' must be an absolute path");
  if (c.node_labels.interval_seconds < 1)
    return make_error(source + ": node_labels.interval_seconds must be >= 1");
  if (c.events.queue_length < 1 || c.events.queue_length > 65536 || c.events.timeout_seconds < 1 ||
      c.events.timeout_seconds > 300)
    return make_error(source + ": events.queue_length must be 1 to 65536 and events.timeout_seconds 1 to 300");
  if (c.cri.call_timeout_seconds < 1 || c.containerd.call_timeout_seconds < 1)
    return make_error(source + ": runtime.cri.call_timeout_seconds and runtime.containerd.call_timeout_seconds must be >= 1");
  return {};
}

Result<void> check_limits(AgentConfig& c, const std::string& source) {
  for (const auto* dir : {&c.state_dir, &c.checkpoint_dir})
    if (!dir->is_absolute()) return make_error(source + ": " + dir->string() + " must be an absolute path");
  if (c.watch_interval_seconds < 1) c.watch_interval_seconds = 1;
  if (c.max_concurrent_jobs < 1) c.max_concurrent_jobs = 1;
  if (c.max_queued_jobs < 1 || c.max_queued_jobs_per_client < 1)
    return make_error(source + ": limits.max_queued_jobs and limits.max_queued_jobs_per_client must be >= 1");
  if (c.max_connections < 2 || c.max_connections_per_client < 1 || c.request_deadline_seconds < 1)
    return make_error(source + ": limits.max_connections must be >= 2, max_connections_per_client and "
                      "request_deadline_seconds >= 1");
  if (c.runtime_timeout.count() < 1) return make_error(source + ": checkpoints.runtime_timeout_seconds must be >= 1");
  if (c.job_timeout.count() < 1) return make_error(source + ": limits.job_timeout_seconds must be >= 1");
  if (c.shutdown_grace.count() < 0)
    return make_error(source + ": limits.shutdown_grace_seconds must be >= 0 (0: running jobs are cut short at once "
                      "when the agent stops)");
  if (c.unreferenced_chunk_quota.bytes < chunk_receive::kMaxChunkFileBytes || c.unreferenced_chunk_quota.chunks < 1)
    return make_error(source + ": limits.unreferenced_chunk_bytes must be >= " +
                      std::to_string(chunk_receive::kMaxChunkFileBytes) + " (one chunk file of the largest size) and "
                      "limits.unreferenced_chunks >= 1: a smaller quota refuses every transfer");
  return {};
}

Result<void> check_storage_and_logs(const AgentConfig& c, const std::string& source) {
  if (c.gpu_memory.threads && (*c.gpu_memory.threads < 0 || *c.gpu_memory.threads > 256))
    return make_error(source + ": gpu_memory.threads " + std::to_string(*c.gpu_memory.threads) +
                      " is not 0 (from the CPU count) to 256");
  if (c.gpu_memory.compression) {
    if (auto parsed = gpu_image::parse_compression(*c.gpu_memory.compression, "gpu_memory.compression"); !parsed)
      return make_error(source + ": " + parsed.error().message);
  }
  if (auto parsed = gpu_image::parse_store(c.gpu_memory.store, "gpu_memory.store"); !parsed)
    return make_error(source + ": " + parsed.error().message);
  if (c.gpu_memory.store.size() > 64)   // the plugin's settings file holds values of at most 64 characters
    return make_error(source + ": gpu_memory.store is longer than 64 characters; mount the store at a shorter path");
  if ((c.retention.keep_count && *c.retention.keep_count < 0) ||
      (c.retention.max_age_hours && *c.retention.max_age_hours < 1) || c.retention.interval_seconds < 60 ||
      c.retention.gc_grace_seconds < 60)
    return make_error(source + ": retention: keep_count must be >= 0, max_age_hours >= 1, interval_seconds and "
                      "gc_grace_seconds >= 60 (a shorter grace period may remove chunks of a dump still running)");
  const auto level = log::level_from_string(c.log_level, static_cast<log::Level>(0));
  if (static_cast<int>(level) == 0)
    return make_error(source + ": log_level '" + c.log_level + "' is not one of error, warn, info, debug");
  if (!log::format_from_string(c.log_format))
    return make_error(source + ": log_format '" + c.log_format + "' is not one of text, logfmt, json");
  return {};
}

}  // namespace

Result<AgentConfig> parse_config(const std::string& yaml_text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return make_error(source + ": not valid YAML: " + e.what());
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) return make_error(source + ": the configuration must be a YAML mapping");
  AgentConfig c;
  ConfigReader r(root, source);
  int version = 1;
  r.top().get("version", version);
  if (version != 1) return make_error(source + ": version " + std::to_string(version) + " is not supported (use 1)");
  read_server(r, c);
  std::string state_dir = c.state_dir, host_root = c.host_root, hooks_dir = c.hooks_dir,
              plugin_dir = c.criu_plugin_dir;
  r.top().get("state_dir", state_dir);
  read_checkpoints(r, c);
  read_runtime(r, c);
  r.top().get("host_root", host_root);
  r.top().get("hooks_dir", hooks_dir);
  r.top().get("criu_plugin_dir", plugin_dir);
  r.top().get("log_level", c.log_level);
  r.top().get("log_format", c.log_format);
  read_node(r, c);
  read_storage(r, c);
  read_limits(r, c);
  if (const std::string& error = r.finish(); !error.empty()) return make_error(error);
  c.state_dir = state_dir;
  c.host_root = host_root;
  c.hooks_dir = hooks_dir;
  c.criu_plugin_dir = plugin_dir;
  GPUCKPT_TRY_VOID(check_services(c, source));
  GPUCKPT_TRY_VOID(check_limits(c, source));
  GPUCKPT_TRY_VOID(check_storage_and_logs(c, source));
  return c;
}

Result<AgentConfig> load_config(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return make_error("cannot read the agent configuration " + path.string() +
                             " (pass --config FILE; agent/config.example.yaml shows the keys)", ENOENT);
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path.string());
}

void log_config(const AgentConfig& c) {
  log::param("listen", c.listen_address + ":" + std::to_string(c.listen_port));
  log::param("token_file", c.token_file.string());
  log::param("state_dir", c.state_dir.string());
  log::param("checkpoints.dir", c.checkpoint_dir.string());
  log::param("checkpoints.kubelet_dir", c.kubelet_checkpoint_dir.string());
  log::param("checkpoints.max_archive_bytes", std::to_string(c.archive_limits.max_archive_bytes));
  log::param("checkpoints.runtime_timeout_seconds", std::to_string(c.runtime_timeout.count()));
  log::param("runtime.kind", c.runtime_kind);
  if (c.runtime_kind == "cri") {
    log::param("runtime.cri.endpoint", c.cri.endpoint);
    log::param("runtime.cri.call_timeout_seconds", std::to_string(c.cri.call_timeout_seconds));
  }
  if (c.runtime_kind == "containerd") {
    log::param("runtime.containerd.address", c.containerd.address);
    log::param("runtime.containerd.namespace", c.containerd.namespace_name);
    log::param("runtime.containerd.call_timeout_seconds", std::to_string(c.containerd.call_timeout_seconds));
  }
  log::param("log_format", c.log_format);
  log::param("host_root", c.host_root.string());
  log::param("hooks_dir", c.hooks_dir.string());
  log::param("criu_plugin_dir", c.criu_plugin_dir.string());
  const auto& m = c.match_policy;
  log::param("match_policy", std::string("model=") + (m.check_model ? "1" : "0") + " memory=" + (m.check_memory ? "1" : "0") +
                                 " firmware=" + (m.check_firmware ? "1" : "0") + " links=" + (m.check_links ? "1" : "0") +
                                 " numa=" + (m.check_numa ? "1" : "0"));
  log::param("kubernetes_api.server", c.kubernetes_api.endpoint.url);
  log::param("kubernetes_api.node_name", node_name(c));
  log::param("node_labels.enabled", c.node_labels.enabled ? "1" : "0");
  if (c.node_labels.enabled) {
    log::param("node_labels.method", c.node_labels.method);
    if (c.node_labels.method == "nfd_feature_file") log::param("node_labels.feature_file", c.node_labels.feature_file);
  }
  log::param("events.enabled", c.events.enabled ? "1" : "0");
  if (c.events.enabled) {
    log::param("events.queue_length", std::to_string(c.events.queue_length));
    log::param("events.timeout_seconds", std::to_string(c.events.timeout_seconds));
  }
  log::param("limits.max_request_bytes", std::to_string(c.max_request_bytes));
  log::param("limits.max_concurrent_jobs", std::to_string(c.max_concurrent_jobs));
  log::param("limits.max_queued_jobs", std::to_string(c.max_queued_jobs));
  log::param("limits.max_queued_jobs_per_client", std::to_string(c.max_queued_jobs_per_client));
  log::param("limits.max_connections", std::to_string(c.max_connections));
  log::param("limits.max_connections_per_client", std::to_string(c.max_connections_per_client));
  log::param("limits.request_deadline_seconds", std::to_string(c.request_deadline_seconds));
  log::param("limits.job_timeout_seconds", std::to_string(c.job_timeout.count()));
  log::param("limits.shutdown_grace_seconds", std::to_string(c.shutdown_grace.count()));
  log::param("limits.unreferenced_chunk_bytes", std::to_string(c.unreferenced_chunk_quota.bytes));
  log::param("limits.unreferenced_chunks", std::to_string(c.unreferenced_chunk_quota.chunks));
  std::string networks;
  for (const auto& network : c.transfer.peer_networks) networks += (networks.empty() ? "" : ",") + network;
  log::param("transfer.peer_networks", networks.empty() ? "(none: pushes refused)" : networks);
  log::param("transfer.chunk_streams", std::to_string(c.transfer.chunk_streams));
  for (const auto& [name, value] : plugin_environment(c.gpu_memory)) log::param("gpu_memory: " + name, value);
  auto optional_text = [](const auto& v) { return v ? std::to_string(*v) : std::string("unset"); };
  log::param("retention.keep_count", optional_text(c.retention.keep_count));
  log::param("retention.max_age_hours", optional_text(c.retention.max_age_hours));
  log::param("retention.max_bytes", optional_text(c.retention.max_bytes));
  log::param("retention.include_newest", c.retention.include_newest ? "1" : "0");
  log::param("retention.interval_seconds", std::to_string(c.retention.interval_seconds));
  log::param("retention.gc_grace_seconds", std::to_string(c.retention.gc_grace_seconds));
  if (!c.image_registry.repository.empty()) {
    log::param("image_registry.repository", c.image_registry.repository);
    log::param("image_registry.plain_http", c.image_registry.plain_http ? "1" : "0");
    log::param("image_registry.credentials_file", c.image_registry.credentials_file);
    log::param("image_registry.timeout_seconds", std::to_string(c.image_registry.timeout.count()));
    log::param("image_registry.push_timeout_seconds", std::to_string(c.image_registry.push_timeout.count()));
    log::param("image_registry.token_realm_host", c.image_registry.token_realm_host);
    log::param("image_registry.chunk_streams", std::to_string(c.image_registry.chunk_streams));
  }
}

std::string node_name(const AgentConfig& config) {
  if (!config.kubernetes_api.node_name.empty()) return config.kubernetes_api.node_name;
  if (const char* env = std::getenv("NODE_NAME"); env && *env) return env;
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

std::vector<std::pair<std::string, std::string>> plugin_environment(const GpuMemoryConfig& c) {
  std::vector<std::pair<std::string, std::string>> env;
  if (c.image) env.emplace_back("GPUCKPT_CUDA_MEMORY_IMAGE", *c.image ? "1" : "0");
  if (c.threads) env.emplace_back("GPUCKPT_IMAGE_THREADS", std::to_string(*c.threads));
  if (c.compression) env.emplace_back("GPUCKPT_IMAGE_COMPRESSION", *c.compression);
  if (c.sparse) env.emplace_back("GPUCKPT_IMAGE_SPARSE", *c.sparse ? "1" : "0");
  env.emplace_back("GPUCKPT_GPU_STORE", c.store);
  if (c.huge_pages) env.emplace_back("GPUCKPT_STAGING_HUGE_PAGES", *c.huge_pages ? "1" : "0");
  if (c.map_chunks) env.emplace_back("GPUCKPT_STAGING_MAP_CHUNKS", *c.map_chunks ? "1" : "0");
  if (c.recognise_unchanged)
    env.emplace_back("GPUCKPT_STORE_RECOGNISE_UNCHANGED", *c.recognise_unchanged ? "1" : "0");
  if (c.cpu_pages) env.emplace_back("GPUCKPT_CPU_PAGES_STORE", *c.cpu_pages ? "1" : "0");
  return env;
}

}  // namespace gpuckpt::node
