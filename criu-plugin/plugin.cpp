// Hook entry points only: CRIU calls these C functions through CR_PLUGIN_DESC; each one offers the call to
// every backend (CUDA, AMD) in turn. What the host CRIU can take is decided when CRIU dlopen()s us.
#include "criu-plugin/plugin.h"

#include <syslog.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>

#include "criu/criu_stats.h"
#include "gpumem/gpu_manifest.h"
#include "gpumem/memory_lineage.h"
#include "base/log.h"
#include "gpumem/plugin_settings.h"
#include "criu-plugin/backend.h"
#include "criu-plugin/cpu_pages/cpu_pages.h"
#include "criu-plugin/dispatch.h"
#include "criu-plugin/restored_dev.h"

namespace gpuckpt::plugin {
namespace {

Dispatcher& dispatcher() {
  static Dispatcher d;
  return d;
}

bool g_disabled = true;   // until init() found a CRIU we can work with
// A restore whose /dev has not had its GPU nodes put right yet (restored_dev.h): every restore, active backend or
// not (a container whose processes hold no GPU state has none).
bool g_restored_dev_pending = false;
// This restore's own steps so far, and its first task (the container's init) as the host sees it.
PluginRestoreTimings g_restore_timings;
int g_restored_root_pid = 0;

const char* stage_name(int stage) {
  switch (stage) {
    case criu::kStageDump: return "dump";
    case criu::kStagePreDump: return "pre-dump";
    case criu::kStageRestore: return "restore";
  }
  return "unknown";
}

// An error also goes to the node's syslog (journald: `journalctl -t gpuckpt-plugin`): containerd keeps CRIU's
// restore.log in the task's bundle and deletes it with a failed restore, so kubelet shows only "criu failed" and
// CRIU's log would have been the one place our reason was written. The socket is closed again after each line:
// no descriptor of ours stays open in CRIU's process, whose descriptors it restores and closes by number.
void copy_error_to_syslog(std::string_view line) {
  ::openlog("gpuckpt-plugin", LOG_PID, LOG_DAEMON);
  ::syslog(LOG_ERR, "%.*s", static_cast<int>(std::min<std::size_t>(line.size(), 4096)), line.data());
  ::closelog();
}

void route_log_to_criu() {
  log::set_component("gpuckpt");
  log::set_level(log::Level::Debug);   // CRIU filters by its own -v level
  log::set_sink([](log::Level level, std::string_view line) {
    if (!criu::log_to_criu(static_cast<unsigned>(level), std::string(line))) {
      std::fprintf(stderr, "gpuckpt: %.*s\n", static_cast<int>(line.size()), line.data());
    }
    if (level == log::Level::Error) copy_error_to_syslog(line);
  });
}

std::string fixed(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", value);
  return buf;
}

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// GPUCKPT_CPU_PAGES_STORE (0 or 1, default 1) and the memory settings, or why the CPU pages stay where CRIU put them.
Result<gpu_image::Settings> cpu_pages_settings() {
  const std::string on = plugin_settings().get("GPUCKPT_CPU_PAGES_STORE");
  log::param("GPUCKPT_CPU_PAGES_STORE", on.empty() ? "1" : on);
  if (!on.empty() && on != "1" && on != "0")
    return make_error("GPUCKPT_CPU_PAGES_STORE='" + on + "' is not 0 or 1; CPU pages stay in the archive");
  if (on == "0") return make_error("GPUCKPT_CPU_PAGES_STORE=0: CPU pages stay in the archive");
  auto settings = gpu_image::settings_from_env();
  if (!settings) return make_error(settings.error().message + "; CPU pages stay in the archive");
  return settings;
}

// The end of a dump that wrote gpuckpt's state: CRIU's page images into the chunk store (cpu_pages.h).
void move_cpu_pages(PluginDumpTimings& timings) {
  auto settings = cpu_pages_settings();
  if (!settings) {
    log::info("cpu pages: " + settings.error().message);
    return;
  }
  if (settings->store.empty()) {
    log::info("cpu pages: GPU memory is inline (GPUCKPT_GPU_STORE), so are the CPU pages: they stay in the archive");
    return;
  }
  const int dir_fd = criu::image_dir_fd();
  if (dir_fd < 0) {
    log::warn("cpu pages: CRIU named no image directory; the CPU pages stay in the archive");
    return;
  }
  auto moved = cpu_pages::move_into_store(dir_fd, *settings, cpu_pages::checkpoint_id_of_dump(dir_fd));
  if (!moved) {
    log::error("cpu pages: " + moved.error().message);
    return;
  }
  timings.cpu_pages_seconds = moved->seconds;
  for (const auto& why : moved->left) log::warn("cpu pages: left in the archive: " + why);
  log::info("timing: cpu pages into the chunk store " + settings->store + ": " + std::to_string(moved->images) +
            " page image(s), " + mib(moved->bytes) + " in " + std::to_string(moved->chunks) + " chunks, " +
            std::to_string(moved->new_chunks) + " new (" + mib(moved->new_bytes) + " written), " +
            std::to_string(moved->threads) + " threads, " + fixed(moved->seconds) + " s");
}

// The plugin's steps of this dump, beside CRIU's stats-dump in the image directory (criu_stats.h), so that the
// runtime's archive carries them to whoever splits the checkpoint's time. Not having them only costs that split.
void write_dump_timings(const PluginDumpTimings& timings) {
  const int dir_fd = criu::image_dir_fd();
  if (dir_fd < 0) return;
  if (auto written = gpu_image::write_file_atomically(dir_fd, kPluginDumpTimingsFile, serialize_plugin_dump_timings(timings),
                                           false, "CRIU's image directory");
      !written)
    log::warn("timing: " + written.error().message);
}

// The start of a restore: the page images a dump moved into the store, back before CRIU reads them.
int bring_back_cpu_pages() {
  const int dir_fd = criu::image_dir_fd();
  if (dir_fd < 0 || !cpu_pages::has_pages_manifests(dir_fd)) return 0;
  auto settings = gpu_image::settings_from_env();
  if (!settings) {
    log::error("cpu pages: " + settings.error().message + "; fix the setting to restore this checkpoint");
    return -EINVAL;
  }
  auto back = cpu_pages::bring_back(dir_fd, *settings);
  if (!back) {
    log::error("cpu pages: " + back.error().message);
    return -(back.error().errno_value > 0 ? back.error().errno_value : EIO);
  }
  g_restore_timings.cpu_pages_seconds = back->seconds;
  log::info("timing: cpu pages from the chunk store: " + std::to_string(back->images) + " page image(s), " +
            mib(back->bytes) + " in " + std::to_string(back->chunks) + " chunks, " + std::to_string(back->threads) +
            " threads, " + fixed(back->seconds) + " s");
  return 0;
}

// The plugin's steps of a restore that succeeded: in CRIU's log, and in the node store for the agent that ran it (by
// now CRIU has closed its image directory, which the runtime removes anyway). Not having them only costs the split.
void write_restore_timings(const std::vector<std::unique_ptr<Backend>>& backends) {
  PluginRestoreTimings timings = g_restore_timings;
  std::optional<std::string> node_store;
  for (const auto& backend : backends) {
    backend->add_restore_timings(timings);
    if (!node_store) node_store = backend->restore_node_store();
  }
  const std::string text = serialize_plugin_restore_timings(timings);
  log::info("timing: restore steps of pid " + std::to_string(g_restored_root_pid) + ": " +
            text.substr(0, text.size() - 1));
  if (!node_store || g_restored_root_pid <= 0) return;
  if (auto spooled = memory_lineage::spool_restore_timings(*node_store, g_restored_root_pid, text); !spooled)
    log::info("timing: the restore's steps are not left for the agent: " + spooled.error().message);
}

// The first RESUME_DEVICES_LATE of a restore: every task is restored and none runs. The plan the OCI hook placed
// in CRIU's images directory says which GPU nodes the restored container has; its /dev (pid's root: the
// container's init, the first task CRIU names) gets them. CRIU ignores this hook's result, so a failure is only
// logged (and copied to syslog): the processes then see the source's nodes, as the runtime's device cgroup allows.
void give_restored_dev_its_gpu_nodes(int pid) {
  g_restored_dev_pending = false;
  auto plan = read_placed_plan(criu::image_dir_fd());
  if (!plan) {
    log::error("restored /dev: " + plan.error().message);
    return;
  }
  if (!plan.value()) return;
  auto nodes = planned_nodes(*plan.value(), stat_device_numbers("/"));
  if (!nodes) {
    log::error("restored /dev: " + nodes.error().message);
    return;
  }
  const std::string root = "/proc/" + std::to_string(pid) + "/root";
  auto changed = reconcile_restored_dev(root, "/dev", *nodes);
  if (!changed) {
    log::error("restored /dev: " + changed.error().message + "; its processes see the GPU nodes of the "
               "checkpoint's node, not those of restore plan " + plan.value()->id);
    return;
  }
  if (changed->empty()) {
    log::info("restored /dev of pid " + std::to_string(pid) + " holds the GPU nodes of restore plan " +
              plan.value()->id + " already");
    return;
  }
  std::string what;
  for (const auto& made : changed->make)
    what += (what.empty() ? "" : ", ") + ("/dev/" + made.name) + " " + std::to_string(made.major) + ":" +
            std::to_string(made.minor);
  for (const auto& removed : changed->remove) what += (what.empty() ? "" : ", ") + ("removed /dev/" + removed);
  log::info("restored /dev of pid " + std::to_string(pid) + " given the GPU nodes of restore plan " +
            plan.value()->id + ": " + what);
}

int plugin_init(int stage) noexcept {
  return Dispatcher::guarded("init", "plugin", [&]() -> int {
    route_log_to_criu();
    const criu::HostAbi& abi = criu::host_abi();
    g_disabled = true;
    // The version check comes before anything says "loaded": the installer and the tests take "plugin loaded for"
    // as proof that this CRIU can use gpuckpt, and a too-old CRIU must never pass for one.
    if (!abi.supported()) {
      log::error("this CRIU is too old for GPU checkpointing: it has " + std::to_string(abi.hook_count) +
                 " plugin hooks (" + abi.evidence + "), gpuckpt needs " + std::to_string(criu::kMinimumHostHooks) +
                 " (PAUSE_DEVICES and CHECKPOINT_DEVICES, CRIU >= 4.0). gpuckpt stays inactive; upgrade CRIU "
                 "to checkpoint GPU workloads");
      return 0;
    }
    log::info(std::string("plugin loaded for ") + stage_name(stage) + "; host CRIU has " +
              std::to_string(abi.hook_count) + " plugin hooks (" + abi.evidence + "), announcing " +
              std::to_string(abi.max_hooks()) + "; CRIU's fdstore usable from init(RESTORE): " +
              (abi.fd_store_at_init ? "yes" : "no"));
    g_restored_dev_pending = stage == criu::kStageRestore;
    g_restore_timings = {};
    g_restored_root_pid = 0;
    if (stage == criu::kStageRestore && !criu::take_from_inventory(kPluginName)) {
      log::info("the image inventory does not list gpuckpt: the checkpoint used no GPU, plugin inactive");
      return 0;
    }
    std::vector<std::unique_ptr<Backend>> backends;
    backends.push_back(make_cuda_backend());
    backends.push_back(make_amd_backend());
    for (auto& backend : backends) {
      int ret = backend->init(stage);
      if (ret != 0) {
        log::error(std::string(backend->name()) + " backend failed to initialise for " + stage_name(stage) +
                   " (" + std::to_string(ret) + "); see the lines above");
        for (auto& started : backends) started->fini(stage, ret);
        return ret;
      }
    }
    if (stage == criu::kStageRestore) {
      if (int ret = bring_back_cpu_pages(); ret != 0) {
        for (auto& started : backends) started->fini(stage, ret);
        return ret;
      }
    }
    dispatcher().set_backends(std::move(backends));
    g_disabled = false;
    return 0;
  });
}

void plugin_exit(int stage, int ret) noexcept {
  Dispatcher::guarded("fini", "plugin", [&]() -> int {
    for (auto& backend : dispatcher().backends()) backend->fini(stage, ret);
    // Only a dump that wrote gpuckpt's state: without it a restore would not run gpuckpt.
    if (stage == criu::kStageDump && ret == 0 && !g_disabled && criu::added_to_inventory(kPluginName)) {
      PluginDumpTimings timings;
      for (const auto& backend : dispatcher().backends()) backend->add_dump_timings(timings);
      move_cpu_pages(timings);
      write_dump_timings(timings);
    }
    if (stage == criu::kStageRestore && ret == 0 && !g_disabled) write_restore_timings(dispatcher().backends());
    dispatcher().clear();
    g_disabled = true;
    g_restored_dev_pending = false;
    log::set_sink(nullptr);   // the sink must not outlive CRIU's dlclose() of this library
    return 0;
  });
}

template <class Call>
int offer(const char* hook, Call&& call) noexcept {
  if (g_disabled) return -ENOTSUP;
  return dispatcher().offer(hook, call);
}

extern "C" {

int hook_dump_ext_file(int fd, int id) {
  return offer("DUMP_EXT_FILE", [&](Backend& b) { return b.dump_ext_file(fd, id); });
}
int hook_restore_ext_file_v1(int id) {
  return offer("RESTORE_EXT_FILE", [&](Backend& b) { return b.restore_ext_file(id, nullptr); });
}
int hook_restore_ext_file_v2(int id, bool* retry_needed) {
  // criu-dev leaves *retry_needed uninitialised and reads it whenever a plugin returns an fd: "no retry" unless
  // a backend asks for one, whatever backend answers.
  if (retry_needed != nullptr) *retry_needed = false;
  return offer("RESTORE_EXT_FILE", [&](Backend& b) { return b.restore_ext_file(id, retry_needed); });
}
int hook_handle_device_vma(int fd, const struct stat* st) {
  return offer("HANDLE_DEVICE_VMA", [&](Backend& b) { return b.handle_device_vma(fd, st); });
}
int hook_update_vma_map(const char* path, std::uint64_t addr, std::uint64_t old_pgoff, std::uint64_t* new_pgoff,
                        int* plugin_fd) {
  return offer("UPDATE_VMA_MAP",
               [&](Backend& b) { return b.update_vma_map(path, addr, old_pgoff, new_pgoff, plugin_fd); });
}
int hook_resume_devices_late(int pid) {
  if (g_restored_root_pid == 0) g_restored_root_pid = pid;
  if (g_restored_dev_pending)
    Dispatcher::guarded("RESUME_DEVICES_LATE", "restored /dev", [&] {
      give_restored_dev_its_gpu_nodes(pid);
      return 0;
    });
  return offer("RESUME_DEVICES_LATE", [&](Backend& b) { return b.resume_devices_late(pid); });
}
int hook_pause_devices(int pid) {
  return offer("PAUSE_DEVICES", [&](Backend& b) { return b.pause_devices(pid); });
}
int hook_checkpoint_devices(int pid) {
  return offer("CHECKPOINT_DEVICES", [&](Backend& b) { return b.checkpoint_devices(pid); });
}
int hook_dump_devices_late(int pid) {
  return offer("DUMP_DEVICES_LATE", [&](Backend& b) { return b.dump_devices_late(pid); });
}
int hook_post_forking() {
  if (g_disabled) return 0;
  int result = 0;
  for (auto& backend : dispatcher().backends()) {
    int ret = Dispatcher::guarded("POST_FORKING", backend->name(), [&] { return backend->post_forking(); });
    if (ret != 0 && ret != -ENOTSUP && result == 0) result = ret;
  }
  return result;
}

int gpuckpt_init(int stage) { return plugin_init(stage); }
void gpuckpt_exit(int stage, int ret) { plugin_exit(stage, ret); }

}  // extern "C"

}  // namespace

criu::PluginDesc make_descriptor(const criu::HostAbi& host) {
  criu::PluginDesc desc{};
  desc.name = kPluginName;
  desc.init = &gpuckpt_init;
  desc.exit = &gpuckpt_exit;
  desc.version = criu::kPluginVersion;
  desc.max_hooks = host.max_hooks();
  auto set = [&](unsigned hook, void* fn) {
    if (hook < desc.max_hooks) desc.hooks[hook] = fn;
  };
  set(criu::kDumpExtFile, reinterpret_cast<void*>(&hook_dump_ext_file));
  set(criu::kRestoreExtFile, host.restore_ext_file_has_retry ? reinterpret_cast<void*>(&hook_restore_ext_file_v2)
                                                             : reinterpret_cast<void*>(&hook_restore_ext_file_v1));
  set(criu::kHandleDeviceVma, reinterpret_cast<void*>(&hook_handle_device_vma));
  set(criu::kUpdateVmaMap, reinterpret_cast<void*>(&hook_update_vma_map));
  set(criu::kResumeDevicesLate, reinterpret_cast<void*>(&hook_resume_devices_late));
  set(criu::kPauseDevices, reinterpret_cast<void*>(&hook_pause_devices));
  set(criu::kCheckpointDevices, reinterpret_cast<void*>(&hook_checkpoint_devices));
  set(criu::kPostForking, reinterpret_cast<void*>(&hook_post_forking));
  set(criu::kDumpDevicesLate, reinterpret_cast<void*>(&hook_dump_devices_late));
  return desc;
}

}  // namespace gpuckpt::plugin

// The one exported symbol. CRIU reads it right after dlopen(), so the constructor below, which runs inside
// dlopen(), fills it in for the CRIU that is loading us.
extern "C" __attribute__((visibility("default"))) gpuckpt::criu::PluginDesc CR_PLUGIN_DESC;
gpuckpt::criu::PluginDesc CR_PLUGIN_DESC{};

namespace {
__attribute__((constructor)) void gpuckpt_plugin_describe_for_host() {
  try {
    gpuckpt::criu::bind_host(gpuckpt::criu::process_symbols());
    CR_PLUGIN_DESC = gpuckpt::plugin::make_descriptor(gpuckpt::criu::host_abi());
  } catch (...) {
    CR_PLUGIN_DESC = gpuckpt::criu::PluginDesc{};   // zero hooks, version 0: CRIU loads and ignores us
    CR_PLUGIN_DESC.name = gpuckpt::plugin::kPluginName;
  }
}
}  // namespace
