#include "node/runtimes.h"

#include "node/containerd_runtime.h"
#include "node/cri_runtime.h"
#include "node/kubelet_runtime.h"
#include "base/log.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

ConfiguredRuntime make_configured_runtime(const AgentConfig& config) {
  if (config.runtime_kind == "podman") {
    PodmanOptions podman;
    podman.podman = config.podman_path;
    podman.timeout = config.runtime_timeout;
    std::error_code ec;
    if (fs::is_directory(config.hooks_dir, ec)) podman.hooks_dir = config.hooks_dir.string();
    return {make_podman_runtime(podman), "podman", ""};
  }
  if (config.runtime_kind == "cri") {
    CriOptions cri;
    cri.endpoint = config.cri.endpoint;
    cri.call_timeout = std::chrono::seconds(config.cri.call_timeout_seconds);
    cri.checkpoint_timeout = config.runtime_timeout;
    CriClient probe(cri);
    ConfiguredRuntime out{make_cri_runtime(cri), "cri", ""};
    if (auto version = probe.version()) {
      log::info("runtime: " + version->describe() + " (CRI " + version->api_version + ") at " + cri.endpoint);
      out.name = version->runtime_name;
      out.version = version->runtime_version;
    } else {
      log::warn("runtime: " + version.error().message);
    }
    return out;
  }
  if (config.runtime_kind == "containerd") {
    ContainerdRuntimeOptions options;
    options.containerd.address = config.containerd.address;
    options.containerd.namespace_name = config.containerd.namespace_name;
    options.containerd.call_timeout = std::chrono::seconds(config.containerd.call_timeout_seconds);
    options.containerd.checkpoint_timeout = config.runtime_timeout;
    options.state_dir = config.state_dir;
    options.limits = config.archive_limits;
    ContainerdClient probe(options.containerd);
    ConfiguredRuntime out{nullptr, "containerd", ""};
    if (auto version = probe.version()) {
      log::info("runtime: containerd " + version.value() + " at " + options.containerd.address + " (namespace " +
                options.containerd.namespace_name + ")");
      out.version = version.value();
    } else {
      log::warn("runtime: " + version.error().message);
    }
    out.runtime = make_containerd_runtime(options);
    return out;
  }
  KubeletRuntimeOptions kubelet;
  kubelet.kubelet = config.kubelet;
  kubelet.checkpoint_dir = config.kubelet_checkpoint_dir;
  kubelet.timeout = config.runtime_timeout;
  return {make_kubelet_runtime(kubelet), "kubelet", ""};
}

}  // namespace gpuckpt::node
