// gpuckpt-agent's configuration: agent/config.example.yaml documents every key and its default.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "node/kube_client.h"
#include "node/registry_push.h"
#include "node/runtime_kinds.h"
#include "archive/checkpoint_archive.h"
#include "gpu/matcher.h"
#include "base/result.h"

namespace gpuckpt::node {

struct KubeletConfig {
  std::string url = "https://127.0.0.1:10250";
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
};

// How the agent reaches the API server (node labels by PATCH, pod events) and which node it runs on.
struct KubernetesApiConfig {
  KubeEndpoint endpoint;   // server, token_file, ca_file
  std::string node_name;   // empty: $NODE_NAME (the chart's downward API), else the hostname
};

struct NodeLabelsConfig {
  bool enabled = false;
  // "api": merge PATCH on the node (RBAC nodes get/patch, cluster-wide); "nfd_feature_file": a Node Feature
  // Discovery local feature file that nfd-worker turns into the labels (no Kubernetes API access at all).
  std::string method = "api";
  std::string feature_file = "/etc/kubernetes/node-feature-discovery/features.d/gpuckpt";
  int interval_seconds = 300;
};

// Kubernetes Events on the pod a job concerns (agent/pod_events.h): best effort, never in a job's way. At most
// queue_length wait to be posted; beyond, and when the API server does not answer within timeout_seconds, they
// are dropped and counted (gpuckpt_pod_events_dropped_total).
struct EventsConfig {
  bool enabled = false;
  int queue_length = 256;
  int timeout_seconds = 5;
};

// How the CRIU plugin moves GPU memory (docs/cuda.md "GPU memory images"), as GPUCKPT_CUDA_MEMORY_IMAGE,
// GPUCKPT_IMAGE_THREADS, GPUCKPT_IMAGE_COMPRESSION, GPUCKPT_IMAGE_SPARSE, GPUCKPT_GPU_STORE,
// GPUCKPT_STAGING_HUGE_PAGES, GPUCKPT_STAGING_MAP_CHUNKS, GPUCKPT_STORE_RECOGNISE_UNCHANGED and GPUCKPT_CPU_PAGES_STORE. What reaches the
// plugin is the settings file the chart's installer writes from these values beside it (gpumem/plugin_settings.h):
// runtimes do not hand CRIU their caller's environment (podman 4.3 gives runc's checkpoint only PATH and
// XDG_RUNTIME_DIR; kubelet's checkpoints come through containerd or CRI-O, not the agent). The agent also exports
// them to the commands it runs, which counts only where a runtime passes its environment on. Unset keys leave the
// plugin's defaults; store is always set.
struct GpuMemoryConfig {
  std::optional<bool> image;               // gpuckpt writes GPU memory itself (else CRIU's page dump)
  std::optional<int> threads;              // 0: from the CPU count
  std::optional<std::string> compression;  // off | auto | zstd | zstd:LEVEL
  std::optional<bool> sparse;              // all-zero chunks are not stored
  // inline | node | /absolute/path (a shared volume): GPUCKPT_GPU_STORE. node by default: migrate, export/import,
  // push and pull carry chunks, and the agent keeps the store (retention, garbage collection). Always passed on,
  // since the plugin's own default, for a node without an agent, is inline (a self-contained archive).
  std::string store = "node";
  std::optional<bool> huge_pages;          // a restore asks for huge pages on the staging memory before filling it
  std::optional<bool> map_chunks;          // a restore from the node's store maps its chunks (else copies them)
  std::optional<bool> recognise_unchanged;  // a checkpoint into a store keeps the SHA-256 of a chunk whose XXH3-64
                                            // and size match the process's previous one there (else hashes all)
  std::optional<bool> cpu_pages;           // a GPU checkpoint into a store puts CRIU's page images there too
};
// NAME=VALUE pairs for the plugin's environment, in a fixed order.
std::vector<std::pair<std::string, std::string>> plugin_environment(const GpuMemoryConfig& c);

// What the agent keeps, every interval_seconds: archive retention per container in
// checkpoints.dir (nothing is deleted while no limit is set), then a garbage collection of the chunk store
// (gpu_memory.store when a path, else the node's), which frees the chunks no kept checkpoint references.
struct RetentionConfig {
  std::optional<int> keep_count;                  // archives per container, newest first
  std::optional<std::int64_t> max_age_hours;
  std::optional<std::uint64_t> max_bytes;         // per container
  bool include_newest = false;                    // the newest archive of a container may go too
  int interval_seconds = 3600;
  int gc_grace_seconds = 3600;                    // chunk_gc.h: unreferenced chunks younger than this stay
};

// Chunks received from other agents (PUT /v1/chunks/<digest>) that no reference names yet: a transfer's chunks come
// before its commit, so they are unreferenced until then, and a sender that never commits leaves them as garbage
// until the collection's grace period ends. More than this is refused (507) until commits or a collection make room.
// The defaults hold every chunk of two whole-node checkpoints in flight at once (8 GPUs of 141 GiB are 1.1 TiB,
// 2 MiB chunks: about 540k chunks each); the count bounds the agent's memory for the accounting (about 100 bytes a
// chunk: 100 MiB at most).
struct UnreferencedChunkQuota {
  std::uint64_t bytes = 2ULL << 40;    // limits.unreferenced_chunk_bytes: chunk files' bytes
  std::uint64_t chunks = 1ULL << 20;   // limits.unreferenced_chunks
};

struct CriRuntimeConfig {
  std::string endpoint = "unix:///run/containerd/containerd.sock";   // CRI-O: unix:///run/crio/crio.sock
  int call_timeout_seconds = 30;                                    // every CRI call but CheckpointContainer
};

struct ContainerdRuntimeConfig {
  std::string address = "/run/containerd/containerd.sock";
  std::string namespace_name = "k8s.io";   // CRI's containers
  int call_timeout_seconds = 30;           // every call but task checkpoint/restore (runtime_timeout)
};

// Pushing archives to other agents (node/archive_transfer.h): the only networks a push may go to. Private
// ranges by default: pods and nodes of a cluster, never a host on the internet. A store-backed checkpoint's chunks
// go over chunk_streams connections at once (node/chunk_transfer.h; 1 to kMaxChunkUploads, what a target serves).
struct TransferConfig {
  std::vector<std::string> peer_networks = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"};
  int chunk_streams = 4;
};

struct AgentConfig {
  std::string listen_address = "127.0.0.1";
  int listen_port = 7469;
  std::filesystem::path token_file = "/etc/gpuckpt/token";
  std::filesystem::path state_dir = "/var/lib/gpuckpt";
  std::filesystem::path checkpoint_dir = "/var/lib/gpuckpt/checkpoints";
  std::filesystem::path kubelet_checkpoint_dir = "/var/lib/kubelet/checkpoints";
  int watch_interval_seconds = 5;
  ArchiveLimits archive_limits;
  std::chrono::seconds runtime_timeout{600};
  std::string runtime_kind = "podman";   // a name of kRuntimeKinds (node/runtime_kinds.h)
  std::string podman_path = "podman";
  CriRuntimeConfig cri;
  ContainerdRuntimeConfig containerd;
  KubeletConfig kubelet;
  std::filesystem::path host_root = "/";
  std::filesystem::path hooks_dir = "/usr/share/containers/oci/hooks.d";
  std::filesystem::path criu_plugin_dir = "/usr/lib/criu";
  // The node-local chunk store (gpumem/chunk_store.h kNodeStoreDir), where the plugin leaves a restore's own
  // steps for the agent (memory_lineage.h). Not a setting: the plugin's is fixed; tests point it elsewhere.
  std::filesystem::path node_store_dir = "/var/lib/gpuckpt/chunks";
  std::string log_level = "info";
  std::string log_format = "text";   // text | logfmt | json (base/log.h)
  MatchPolicy match_policy;
  KubernetesApiConfig kubernetes_api;
  NodeLabelsConfig node_labels;
  EventsConfig events;
  std::size_t max_request_bytes = 65536;
  int max_concurrent_jobs = 4;
  int max_queued_jobs = 64;                      // unfinished (queued or running) jobs; more are refused (429)
  std::size_t max_queued_jobs_per_client = 16;   // of those, one API client's
  std::size_t max_connections = 256;             // served at once; more wait (agent/http_server.h)
  std::size_t max_connections_per_client = 32;   // open connections one remote address may hold
  int request_deadline_seconds = 30;             // a connection open longer is closed
  // An accepted job's whole time, queue included: then whatever it runs is cut short (node/service.h).
  std::chrono::seconds job_timeout{7200};
  // At SIGTERM, how long running jobs get to finish before the agent cuts them short (JobService::shutdown). Kept
  // below the chart's terminationGracePeriodSeconds less checkpoints.runtime_timeout_seconds: a runtime call in
  // flight is let finish.
  std::chrono::seconds shutdown_grace{30};
  GpuMemoryConfig gpu_memory;
  RetentionConfig retention;
  RegistryOptions image_registry;   // checkpoint images are also pushed there when repository is set
  TransferConfig transfer;
  UnreferencedChunkQuota unreferenced_chunk_quota;
};

// `source` names the input in errors ("/etc/gpuckpt/agent.yaml"). Unknown keys and wrong types are errors.
Result<AgentConfig> parse_config(const std::string& yaml_text, const std::string& source);
Result<AgentConfig> load_config(const std::filesystem::path& path);

// This node's name in the cluster: kubernetes_api.node_name, else $NODE_NAME, else the hostname.
std::string node_name(const AgentConfig& config);

// Logs every setting once as "param: NAME:VALUE".
void log_config(const AgentConfig& config);

}  // namespace gpuckpt::node
