// gpuckpt-nri: thin main. Connects to the runtime's NRI socket (or uses the one a runtime that started it passed
// in NRI_PLUGIN_SOCKET), registers, records GPU containers; reconnects when the runtime restarts.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "gpu/inventory.h"
#include "base/log.h"
#include "nri-plugin/nri_plugin.h"
#include "nri-plugin/nri_session.h"
#include "podresources/cdi_devices.h"
#include "podresources/pod_resources.h"

using namespace gpuckpt;   // (gpuckpt::nri is spelled out: NRI's own protobuf package is ::nri)

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: gpuckpt-nri [--socket PATH] [--state-dir DIR] [--host-root DIR] [--idx NN] [--hook PATH] [--once]\n"
               "                   [--pod-resources-socket PATH] [--cdi-spec-dir DIR ...] [--log-level L]\n"
               "                   [--log-format text|logfmt|json]\n"
               "  defaults: /var/run/nri/nri.sock, /var/lib/gpuckpt, /, 50; the kubelet's PodResources socket is\n"
               "  HOST_ROOT/var/lib/kubelet/pod-resources/kubelet.sock ('' turns it off: only the devices the runtime\n"
               "  keeps from the request count, and a CRI-O restore, which keeps none, is refused); the CDI spec\n"
               "  directories that say which nodes a DRA driver's CDI devices stand for: HOST_ROOT/etc/cdi and\n"
               "  HOST_ROOT/var/run/cdi\n");
  return 2;
}

void exit_on_signal(int) { _exit(0); }

}  // namespace

int main(int argc, char** argv) {
  log::set_component("gpuckpt-nri");
  std::string socket = "/var/run/nri/nri.sock";
  gpuckpt::nri::NriPluginOptions options;
  gpuckpt::nri::SessionOptions session;
  bool once = false;
  std::optional<std::string> pod_resources_socket;
  CdiSpecDirs cdi_dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--socket" && has_value) socket = argv[++i];
    else if (arg == "--state-dir" && has_value) options.state_dir = argv[++i];
    else if (arg == "--host-root" && has_value) options.host_root = argv[++i];
    else if (arg == "--idx" && has_value) session.plugin_idx = argv[++i];
    else if (arg == "--hook" && has_value) options.hook_path = argv[++i];
    else if (arg == "--pod-resources-socket" && has_value) pod_resources_socket = argv[++i];
    else if (arg == "--cdi-spec-dir" && has_value) cdi_dirs.dirs.emplace_back(argv[++i]);
    else if (arg == "--log-level" && has_value) log::set_level(log::level_from_string(argv[++i], log::Level::Info));
    else if (arg == "--log-format" && has_value) {
      const auto format = log::format_from_string(argv[++i]);
      if (!format) return usage();
      log::set_format(*format);
    }
    else if (arg == "--once") once = true;
    else return usage();
  }
  if (const char* idx = std::getenv("NRI_PLUGIN_IDX")) session.plugin_idx = idx;
  log::param("socket", socket);
  log::param("state_dir", options.state_dir.string());
  log::param("host_root", options.host_root.string());
  log::param("plugin", session.plugin_idx + "-" + session.plugin_name);
  log::param("hook", options.hook_path);
  PodResourcesOptions pod_resources;
  pod_resources.socket = pod_resources_socket.value_or(
      (options.host_root / "var/lib/kubelet/pod-resources/kubelet.sock").lexically_normal().string());
  log::param("pod_resources_socket", pod_resources.socket);
  if (!pod_resources.socket.empty())
    options.allocation = [pod_resources](const ContainerIdentity& who) { return container_allocation(pod_resources, who); };
  // CDI's default spec directories, in its order of rising priority, as the host's runtime reads them
  if (cdi_dirs.dirs.empty()) cdi_dirs.dirs = {options.host_root / "etc/cdi", options.host_root / "var/run/cdi"};
  for (const auto& dir : cdi_dirs.dirs) log::param("cdi_spec_dir", dir.lexically_normal().string());
  options.cdi = [cdi_dirs, lookup = stat_device_numbers(options.host_root)](const std::string& name) {
    return cdi_device_nodes(cdi_dirs, name, lookup);
  };
  options.match_policy = MatchPolicy::from_env();
  options.match_policy.log_params();
  ::signal(SIGPIPE, SIG_IGN);
  // As a container's PID 1 the kernel drops SIGTERM and SIGINT while their action is the default: without a handler
  // the pod would stop only when its grace period ends. gpuckpt-nri holds nothing to flush: it exits at once.
  ::signal(SIGTERM, exit_on_signal);
  ::signal(SIGINT, exit_on_signal);
  const HostRoot host(options.host_root);
  gpuckpt::nri::NriPlugin plugin(options, [host] { return read_inventory(host); }, stat_device_numbers(options.host_root));
  // A runtime that starts its plugins itself hands over a connected socket.
  if (const char* passed = std::getenv("NRI_PLUGIN_SOCKET")) {
    auto served = gpuckpt::nri::serve(std::atoi(passed), plugin, session);
    if (!served) log::error(served.error().message);
    return served ? 0 : 1;
  }
  for (auto backoff = std::chrono::milliseconds(500);; backoff = std::min(backoff * 2, std::chrono::milliseconds(10000))) {
    auto fd = gpuckpt::nri::connect_nri_socket(socket);
    if (fd) {
      backoff = std::chrono::milliseconds(500);
      auto served = gpuckpt::nri::serve(fd.value(), plugin, session);
      ::close(fd.value());
      if (!served) log::error(served.error().message);
      else log::info("NRI: the runtime closed the connection");
      if (plugin.shutdown_requested()) return 0;
    } else {
      log::warn(fd.error().message);
    }
    if (once) return 1;
    std::this_thread::sleep_for(backoff);
  }
}
