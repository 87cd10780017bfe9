// gpuckpt-agent: thin main. Startup is an ordered list of steps; teardown always runs (stop the server, stop the
// jobs within limits.shutdown_grace_seconds and the background loops, exit).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "node/config.h"
#include "agent/http_api.h"
#include "agent/http_server.h"
#include "agent/kubelet_watch.h"
#include "agent/node_labels.h"
#include "agent/pod_events.h"
#include "agent/storage_maintenance.h"
#include "node/runtimes.h"
#include "node/service.h"
#include "base/caught.h"
#include "gpu/inventory.h"
#include "base/log.h"
#include "restore/restore_plan.h"

namespace {

using namespace gpuckpt;
namespace fs = std::filesystem;

int usage() {
  std::fprintf(stderr, "usage: gpuckpt-agent [--config FILE] [--log-format text|logfmt|json]\n"
                       "  --config      default /etc/gpuckpt/agent.yaml\n"
                       "  --log-format  from the first line on; default: the config's log_format (text)\n");
  return 2;
}

Result<std::string> read_token(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_error("cannot read the API token file " + path.string() + " (auth.token_file): " + std::strerror(errno));
  if (st.st_mode & 077)
    log::warn("token file " + path.string() + " is readable by group/others; chmod 600 it");
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.size() < 16)
    return make_error("the API token in " + path.string() + " is empty or shorter than 16 characters; "
                      "generate one with: head -c 32 /dev/urandom | base64 > " + path.string());
  return token;
}

// Sleeps until `seconds` pass or stop is requested.
class Stopper {
 public:
  bool wait(int seconds) {
    std::unique_lock lock(mutex_);
    return !cv_.wait_for(lock, std::chrono::seconds(seconds), [&] { return stopped_; });
  }
  void stop() {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

struct Args {
  fs::path config_path = "/etc/gpuckpt/agent.yaml";
  std::optional<log::Format> format;
};

// 0, or the exit code of a bad command line.
int parse_args(int argc, char** argv, Args& args) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) args.config_path = argv[++i];
    else if (arg == "--log-format" && i + 1 < argc) {
      args.format = log::format_from_string(argv[++i]);
      if (!args.format) {
        log::error(std::string("--log-format '") + log::escaped(argv[i], 32) + "' is not one of text, logfmt, json");
        return 2;
      }
      log::set_format(*args.format);
    } else return usage();
  }
  return 0;
}

// The configuration, logged as the agent takes it; the log's level and format set from it.
Result<node::AgentConfig> configure(const Args& args) {
  GPUCKPT_TRY(node::AgentConfig config, node::load_config(args.config_path));
  log::set_level(log::level_from_string(config.log_level, log::Level::Info));
  if (!args.format) log::set_format(log::format_from_string(config.log_format).value_or(log::Format::Text));
  node::log_config(config);
  // The runtime commands the agent runs inherit these; they reach CRIU's plugin only where a runtime passes its
  // environment on. The settings file the chart writes beside the plugin is what every runtime's CRIU reads.
  for (const auto& [name, value] : node::plugin_environment(config.gpu_memory)) ::setenv(name.c_str(), value.c_str(), 1);
  return config;
}

Result<void> make_directories(const node::AgentConfig& config) {
  for (const auto& dir : {config.state_dir, config.checkpoint_dir}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return make_error("cannot create " + dir.string() + ": " + ec.message());
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  return {};
}

node::JobServiceDeps job_deps(const node::AgentConfig& config, std::shared_ptr<ContainerRuntime> runtime,
                              const std::string& token) {
  node::JobServiceDeps deps;
  deps.runtime = std::move(runtime);
  const HostRoot host(config.host_root);
  deps.inventory = [host] { return read_inventory(host); };
  deps.device_numbers = stat_device_numbers(config.host_root);
  deps.peer_token = token;   // every agent of a release shares the token: it is also what a push presents
  return deps;
}

// The API's routes behind `token`, and the server's limits on connections.
void set_up_server(httplib::Server& server, node::JobService& service, const node::AgentConfig& config,
                   const std::string& token) {
  agent::install_routes(server, service, token);
  agent::HttpLimits http_limits;
  http_limits.max_connections = config.max_connections;
  http_limits.max_connections_per_client = config.max_connections_per_client;
  http_limits.request_deadline = std::chrono::seconds(config.request_deadline_seconds);
  agent::harden_server(server, http_limits);
}

// Binds listen.address:listen.port (port 0: any free port, written to <state_dir>/agent.port for tests and
// scripts); the port, or an error.
Result<int> listen_on(httplib::Server& server, const node::AgentConfig& config) {
  int port = config.listen_port;
  if (port == 0) port = server.bind_to_any_port(config.listen_address.c_str());
  else if (!server.bind_to_port(config.listen_address.c_str(), port)) port = -1;
  if (port <= 0)
    return make_error("cannot listen on " + config.listen_address + ":" + std::to_string(config.listen_port) +
                      " (in use? change listen.port)");
  if (auto written = write_file_atomically(config.state_dir / "agent.port", std::to_string(port) + "\n"); !written)
    log::warn(written.error().message);
  log::info("listening on " + config.listen_address + ":" + std::to_string(port));
  return port;
}

// What the background loops share; each loop runs until `stopper` stops.
struct LoopContext {
  const node::AgentConfig& config;
  node::JobService& service;
  const std::function<Result<NodeInventory>()>& inventory;
  agent::PodEventRecorder* pod_events;   // null: events are off
  std::string node_name;
  Stopper& stopper;
};

// Every loop's pass runs inside caught() or a try: whatever goes wrong in one pass, the agent stays up and the next
// tries again (an exception leaving a thread would end the agent).
void sweep_plans_loop(const LoopContext& l) {
  while (l.stopper.wait(node::JobService::kPlanSweepIntervalSeconds))
    if (auto swept = caught("restore plan sweep", [&] {
          l.service.sweep_restore_plans();
          l.service.sweep_restore_timings();
        });
        !swept)
      log::error(swept.error().message);
}

void kubelet_watch_loop(const LoopContext& l) {
  agent::KubeletArchiveWatcher watcher(l.config.kubelet_checkpoint_dir, l.config.state_dir, l.config.archive_limits,
                                       l.inventory, l.service.metrics());
  if (l.pod_events) watcher.report_events_to([&](agent::PodEvent event) { l.pod_events->record(std::move(event)); });
  do {
    // The watcher meets archives nobody vetted: whatever happens in one pass, the agent stays up.
    try {
      std::error_code ec;
      if (fs::is_directory(l.config.kubelet_checkpoint_dir, ec)) watcher.scan();
    } catch (const std::exception& e) {
      log::error(std::string("kubelet archive watcher: internal error: ") + e.what());
    } catch (...) {
      log::error("kubelet archive watcher: internal error");
    }
  } while (l.stopper.wait(l.config.watch_interval_seconds));
}

void storage_loop(const LoopContext& l) {
  if (auto counted = caught("chunk store count", [&] { agent::count_unreferenced_chunks(l.config); }); !counted)
    log::error(counted.error().message);
  while (l.stopper.wait(l.config.retention.interval_seconds)) {
    // Deleting files on the node: whatever goes wrong in one pass, the agent stays up and the next pass tries again.
    try {
      agent::maintain_storage(l.config);
    } catch (const std::exception& e) {
      log::error(std::string("storage upkeep: internal error: ") + e.what());
    } catch (...) {
      log::error("storage upkeep: internal error");
    }
  }
}

void node_labels_loop(const LoopContext& l) {
  const std::string& node = l.node_name;
  do {
    auto published = caught("node labels", [&] {
      auto inventory = l.inventory();
      return inventory ? agent::publish_node_labels(l.config.node_labels, l.config.kubernetes_api.endpoint, node,
                                                    agent::compute_node_labels(inventory.value()))
                       : Result<void>(inventory.error());
    });
    if (!published) log::warn(published.error().message);
    else if (l.config.node_labels.method == "nfd_feature_file")
      log::info("GPU labels for node " + node + " written to " + l.config.node_labels.feature_file +
                " (nfd-worker publishes them)");
    else log::info("published GPU labels on node " + node);
  } while (l.stopper.wait(l.config.node_labels.interval_seconds));
}

std::vector<std::thread> start_loops(const LoopContext& context) {
  std::vector<std::thread> loops;
  loops.emplace_back(sweep_plans_loop, std::cref(context));
  if (!context.config.kubelet_checkpoint_dir.empty()) loops.emplace_back(kubelet_watch_loop, std::cref(context));
  loops.emplace_back(storage_loop, std::cref(context));
  if (context.config.node_labels.enabled) loops.emplace_back(node_labels_loop, std::cref(context));
  return loops;
}

// Signals are taken by one thread (sigwait), never by the workers: blocked before any thread exists (the runtime's
// gRPC channel starts its own), since every thread inherits the mask. A thread that left SIGTERM unblocked would
// take it with the default action: the agent killed without its shutdown, or, as a container's PID 1 (where the
// kernel drops a default-action signal), not stopped at all until the grace period ends.
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// The jobs first, their grace running while the loops finish their pass.
void tear_down(Stopper& stopper, node::JobService& service, std::vector<std::thread>& loops,
               std::thread& signal_thread) {
  stopper.stop();
  service.shutdown();
  for (auto& t : loops) t.join();
  if (signal_thread.joinable()) {
    pthread_kill(signal_thread.native_handle(), SIGTERM);
    signal_thread.join();
  }
  service.wait_idle();
  log::info("stopped");
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t signals = block_stop_signals();
  log::set_component("gpuckpt-agent");
  log::set_timestamps(true);
  Args args;
  if (const int bad = parse_args(argc, argv, args)) return bad;

  // 1. configuration
  auto loaded = configure(args);
  if (!loaded) {
    log::error(loaded.error().message);
    return 2;
  }
  const node::AgentConfig config = loaded.value();

  // 2. token
  auto token = read_token(config.token_file);
  if (!token) {
    log::error(token.error().message);
    return 2;
  }

  // 3. directories
  if (auto made = make_directories(config); !made) {
    log::error(made.error().message);
    return 1;
  }

  // 4. runtime
  auto runtime = node::make_configured_runtime(config);
  node::JobServiceDeps deps = job_deps(config, std::move(runtime.runtime), token.value());

  // Declared before the service: it outlives the jobs that report to it (made once the service's metrics exist).
  std::unique_ptr<agent::PodEventRecorder> pod_events;
  if (config.events.enabled)
    deps.observer = [&pod_events](node::JobStage stage, const node::JobStatus& job, const node::PodRef& pod) {
      if (pod_events) pod_events->record_job(stage, job, pod);
    };
  node::JobService service(config, deps);
  service.metrics().set_runtime(config.runtime_kind, runtime.name, runtime.version);
  const std::string node_name = node::node_name(config);
  if (config.events.enabled)
    pod_events = std::make_unique<agent::PodEventRecorder>(config.kubernetes_api.endpoint, node_name, config.events,
                                                           service.metrics());
  httplib::Server server;
  set_up_server(server, service, config, token.value());

  // 5. listen
  if (auto bound = listen_on(server, config); !bound) {
    log::error(bound.error().message);
    return 1;
  }

  // 6. background loops
  Stopper stopper;
  const LoopContext loop_context{config, service, deps.inventory, pod_events.get(), node_name, stopper};
  std::vector<std::thread> loops = start_loops(loop_context);
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    log::info(std::string("signal ") + strsignal(sig) + ": shutting down");
    server.stop();
  });

  const bool served = server.listen_after_bind();

  tear_down(stopper, service, loops, signal_thread);
  return served ? 0 : 1;
}
