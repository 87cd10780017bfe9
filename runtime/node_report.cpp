#include "runtime/node_report.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "archive/checkpoint_archive.h"
#include "runtime/container_runtime.h"   // run_command
#include "runtime/oci_hooks_rules.h"

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPluginName = "gpuckpt_plugin.so";
constexpr std::uint64_t kGiB = 1ULL << 30;

NodeCheck pass(std::string name, std::string detail) { return {std::move(name), CheckStatus::Pass, std::move(detail), ""}; }
NodeCheck warn(std::string name, std::string detail, std::string fix) {
  return {std::move(name), CheckStatus::Warn, std::move(detail), std::move(fix)};
}
NodeCheck fail(std::string name, std::string detail, std::string fix) {
  return {std::move(name), CheckStatus::Fail, std::move(detail), std::move(fix)};
}

std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
  return text;
}

// The version `PROGRAM --version` prints: the first group of `pattern`.
Result<std::string> version_of(const std::string& program, const std::regex& pattern) {
  GPUCKPT_TRY(const auto run, run_command({program, "--version"}, std::chrono::seconds(10)));
  if (run.exit_code != 0) return make_error("'" + program + " --version' failed: " + run.err.substr(0, 300));
  std::smatch m;
  if (!std::regex_search(run.out, m, pattern)) return make_error("'" + program + " --version' printed no version");
  return m[1].str();
}

// --- CRIU ---------------------------------------------------------------------------------------------------------

class CommandCriuProbe final : public CriuProbe {
 public:
  explicit CommandCriuProbe(std::string criu) : criu_(std::move(criu)) {}

  Result<std::string> version() const override {
    static const std::regex kVersion(R"(Version:\s*([0-9][0-9.]*))");
    return version_of(criu_, kVersion);
  }

  Result<void> loads_plugin(const fs::path& plugin) const override {
    char dir_template[] = "/tmp/gpuckpt-doctor.XXXXXX";
    if (!::mkdtemp(dir_template)) return make_error("cannot create a temporary directory for the CRIU probe");
    const fs::path dir = dir_template;
    std::error_code ec;
    fs::create_directories(dir / "lib", ec);
    fs::create_directories(dir / "img", ec);
    fs::copy_file(plugin, dir / "lib" / kPluginName, ec);
    Result<void> result;
    if (ec) {
      result = make_error("cannot copy " + plugin.string() + ": " + ec.message());
    } else {
      // A PID at pid_max never exists: the dump fails after the plugins were loaded.
      auto run = run_command({criu_, "dump", "-t", "4194304", "-D", (dir / "img").string(), "--libdir",
                              (dir / "lib").string(), "-v4", "-o", "probe.log"},
                             std::chrono::seconds(30));
      HostRoot files("/");
      auto log = files.read_file((dir / "img" / "probe.log").string(), 4 << 20);
      if (!run) result = run.error();
      else if (!log) result = make_error("CRIU wrote no log: " + run->err.substr(0, 300));
      else if (log->find("gpuckpt: plugin loaded for dump") == std::string::npos) {
        std::string why;
        std::size_t start = 0;
        while (start < log->size()) {
          const std::size_t end = std::min(log->find('\n', start), log->size());
          const std::string line = log->substr(start, end - start);
          if (line.find("Error") != std::string::npos && line.find("RLIMIT") == std::string::npos &&
              line.find("infect.c") == std::string::npos && line.find("Dumping FAILED") == std::string::npos)
            why += (why.empty() ? "" : "; ") + line;
          start = end + 1;
        }
        result = make_error("CRIU did not load it: " + (why.empty() ? std::string("no error logged") : why.substr(0, 600)));
      }
    }
    fs::remove_all(dir, ec);
    return result;
  }

 private:
  std::string criu_;
};

int major_version(const std::string& version) { return std::atoi(version.c_str()); }

void check_criu_config(const NodeReportOptions& o, const Result<std::string>& criu_version,
                       std::vector<NodeCheck>& out);

void check_criu(const NodeReportOptions& o, std::vector<NodeCheck>& out) {
  const fs::path plugin = o.files.resolve(o.criu_plugin_dir) / kPluginName;
  const bool plugin_present = fs::is_regular_file(plugin);
  if (!o.criu) {
    out.push_back(warn("criu", "CRIU is not reachable from here (the agent's pod has none)",
                       "run `gpuckpt doctor` on the node; the chart's installer had the node's CRIU load the plugin "
                       "before placing it (kubectl logs POD -c install-host-files)"));
  }
  Result<std::string> version = o.criu ? o.criu->version() : Result<std::string>(make_error("not checked"));
  if (o.criu && !version) {
    out.push_back(fail("criu", "no usable CRIU: " + version.error().message,
                       "install CRIU >= 4.0 where the runtime finds it (runc and crun run `criu` from PATH; "
                       "docs/kubernetes.md)"));
  } else if (o.criu && major_version(*version) < 4) {
    out.push_back(fail("criu", "CRIU " + *version + " is older than 4.0: it has fewer plugin hooks than gpuckpt's plugin "
                               "needs and rejects it",
                       "install CRIU >= 4.0 (Debian trixie, Ubuntu 24.10 and newer ship 4.x)"));
  } else if (o.criu) {
    out.push_back(pass("criu", "CRIU " + *version));
  }
  check_criu_config(o, version, out);

  if (!plugin_present) {
    out.push_back(fail("criu-plugin", "no " + std::string(kPluginName) + " in " + o.criu_plugin_dir,
                       "the chart's installer puts it there (installer.enabled, host.criuPluginDir); see "
                       "`kubectl logs POD -c install-host-files`"));
  } else if (o.criu && version && major_version(*version) >= 4) {
    auto loads = o.criu->loads_plugin(plugin);
    if (loads) out.push_back(pass("criu-plugin", "CRIU " + *version + " loads " + o.criu_plugin_dir + "/" + kPluginName));
    else
      out.push_back(fail("criu-plugin", o.criu_plugin_dir + "/" + kPluginName + ": " + loads.error().message,
                         "while it is there every dump and restore on this node fails: remove it and reinstall "
                         "(the installer verifies before it places the file)"));
  } else {
    out.push_back(pass("criu-plugin", o.criu_plugin_dir + "/" + kPluginName + " is present (not loaded from here)"));
  }

  // CRIU loads every *.so in the directory and asks each plugin in turn.
  auto names = o.files.list_dir(o.criu_plugin_dir);
  if (!names) return;
  std::vector<std::string> gpu_plugins, others, disabled;
  for (const auto& name : *names) {
    if (name == kPluginName) continue;
    if (name == "cuda_plugin.so" || name == "amdgpu_plugin.so") gpu_plugins.push_back(name);
    else if (name.ends_with(".disabled-by-gpuckpt")) disabled.push_back(name);
    else if (name.ends_with(".so")) others.push_back(name);
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (!gpu_plugins.empty()) {
    out.push_back(fail("other-gpu-plugins",
                       "CRIU loads " + join(gpu_plugins) + " beside gpuckpt's plugin: both act on the same GPU processes",
                       "remove it (the distribution's CRIU GPU plugin package), or let the installer move it aside: "
                       "installer.otherGpuPlugins=disable, then restart the gpuckpt pod on this node"));
  } else {
    std::string detail = "no other GPU plugin in " + o.criu_plugin_dir;
    if (!others.empty()) detail += "; other plugins: " + join(others);
    if (!disabled.empty()) detail += "; moved aside by gpuckpt: " + join(disabled);
    out.push_back(pass("other-gpu-plugins", detail));
  }
}

// --- OCI hook and the runtime's hooks.d -----------------------------------------------------------------------------

void check_hook(const NodeReportOptions& o, std::vector<NodeCheck>& out) {
  const std::string entry = o.hooks_dir + "/gpuckpt-hook.json";
  auto text = o.files.read_file(entry, 64 << 10);
  if (!text) {
    out.push_back(fail("oci-hook", "no " + entry, "the chart's installer puts it there (host.hooksDir)"));
  } else {
    const auto json = nlohmann::json::parse(*text, nullptr, false);
    const auto* path = json.is_object() && json.contains("hook") && json["hook"].is_object() &&
                               json["hook"].contains("path") && json["hook"]["path"].is_string()
                           ? &json["hook"]["path"].get_ref<const std::string&>()
                           : nullptr;
    if (!path) out.push_back(fail("oci-hook", entry + " is not a hooks.d entry with hook.path", "reinstall (restart the gpuckpt pod)"));
    else if (!o.files.exists(*path))
      out.push_back(fail("oci-hook", entry + " names " + *path + ", which is missing: runtimes reject the entry",
                         "reinstall (restart the gpuckpt pod); host.installDir must be on the node's root filesystem"));
    else out.push_back(pass("oci-hook", entry + " -> " + *path));
  }

  // Which hooks.d directories the runtime reads.
  const auto runtimes = node_hooks_runtimes(o.system);
  const auto crio = std::find_if(runtimes.begin(), runtimes.end(), [](const HooksRuntime& r) { return r.name == "CRI-O"; });
  if (crio != runtimes.end()) {
    std::string listed;
    for (const auto& d : crio->dirs) listed += (listed.empty() ? "" : ", ") + d;
    if (std::find(crio->dirs.begin(), crio->dirs.end(), o.hooks_dir) != crio->dirs.end())
      out.push_back(pass("runtime-hooks-dir", crio->dirs_source + " includes " + o.hooks_dir));
    else
      out.push_back(fail("runtime-hooks-dir", crio->dirs_source + " is [" + listed + "], without " + o.hooks_dir +
                                                  ": CRI-O never runs the hook",
                         "add " + o.hooks_dir + " to hooks_dir (a drop-in in /etc/crio/crio.conf.d/), or set the "
                         "chart's host.hooksDir to one of them"));
  } else if (o.system.exists("etc/containerd") || o.system.exists("run/containerd/containerd.sock")) {
    out.push_back(warn("runtime-hooks-dir", "containerd: it does not run OCI hooks from hooks.d",
                       "GPU containers are recorded by gpuckpt's NRI plugin instead (docs/kubernetes.md)"));
  } else {
    out.push_back(warn("runtime-hooks-dir", "no CRI-O or containerd configuration visible here",
                       "run `gpuckpt doctor` on the node (the agent's pod does not see /etc)"));
  }
}

// Every hooks.d entry each runtime on the node reads, judged by that runtime's rules: one it rejects stops it from
// starting (CRI-O exits on gpuckpt's `precreate` entry, a podman extension), so a node that works today loses its
// runtime at the next restart.
void check_hooks_entries(const NodeReportOptions& o, std::vector<NodeCheck>& out) {
  const auto runtimes = node_hooks_runtimes(o.system);
  if (runtimes.empty()) {
    out.push_back(pass("hooks-d-entries", "no runtime that reads hooks.d (CRI-O, podman) on this node"));
    return;
  }
  std::vector<std::string> fatal, dropped;
  std::size_t judged = 0;
  for (const auto& runtime : runtimes) {
    for (const auto& dir : runtime.dirs) {
      auto names = o.system.list_dir(dir);
      if (!names) continue;   // a missing directory is fine: the runtime skips (or creates) it
      for (const auto& name : *names) {
        if (!name.ends_with(".json")) continue;   // the runtime reads only *.json
        const std::string entry = dir + "/" + name;
        ++judged;
        auto text = o.system.read_file(entry, 1 << 20);
        auto rejection = text ? judge_hooks_entry(*text, runtime.extension_stages,
                                                  [&](const std::string& path) { return o.system.exists(path); })
                              : std::optional<HooksEntryRejection>(HooksEntryRejection{text.error().message, false});
        if (!rejection) continue;
        const std::string what = entry + " (" + runtime.name + ": " + rejection->reason + ")";
        (rejection->missing_binary ? dropped : fatal).push_back(what);
      }
    }
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : "; ") + x;
    return s;
  };
  std::string readers;
  for (const auto& r : runtimes) readers += (readers.empty() ? "" : ", ") + r.name + " (" + r.evidence + ")";
  if (!fatal.empty()) {
    out.push_back(fail("hooks-d-entries",
                       "a runtime on this node rejects " + join(fatal) +
                           ": it refuses to start while the entry is there (CRI-O exits at start; an entry added "
                           "while it runs is refused then, and stops it at its next restart)",
                       "remove the entry (gpuckpt's precreate entry is for podman only: restart the gpuckpt pod on "
                       "this node and its installer removes it where CRI-O runs; `rm " +
                           o.hooks_dir + "/gpuckpt-hook-precreate.json` by hand), then restart the runtime"));
  } else if (!dropped.empty()) {
    out.push_back(warn("hooks-d-entries", "entries whose hook binary is missing, skipped by the runtime: " + join(dropped),
                       "reinstall the hook they name, or remove the entries"));
  } else {
    out.push_back(pass("hooks-d-entries", std::to_string(judged) + " hooks.d entr" + (judged == 1 ? "y" : "ies") +
                                              " accepted by " + readers));
  }
}

// --- GPU driver ---------------------------------------------------------------------------------------------------

void check_driver(const NodeReportOptions& o, std::vector<NodeCheck>& out) {
  bool found = false;
  if (auto version = o.system.read_file("proc/driver/nvidia/version", 64 << 10)) {
    found = true;
    std::smatch m;
    static const std::regex kModule(R"(Kernel Module(?: for [a-z0-9_]+)?\s+([0-9]+)\.([0-9.]+))");
    if (!std::regex_search(*version, m, kModule)) {
      out.push_back(warn("gpu-driver", "NVIDIA driver of unknown version (/proc/driver/nvidia/version)",
                         "the checkpoint API (cuCheckpointProcess*) needs driver R550 or newer"));
    } else if (std::atoi(m[1].str().c_str()) < 550) {
      out.push_back(fail("gpu-driver", "NVIDIA driver " + m[1].str() + "." + m[2].str() +
                                           " has no process checkpoint API (cuCheckpointProcess*, R550 and newer)",
                         "upgrade the NVIDIA driver to R550 or newer (R580 verified)"));
    } else {
      out.push_back(pass("gpu-driver", "NVIDIA driver " + m[1].str() + "." + m[2].str() +
                                           ": process checkpoint API (cuCheckpointProcess*, R550+)"));
    }
  }
  if (o.system.exists("sys/class/kfd/kfd/topology/nodes") || o.system.exists("dev/kfd")) {
    found = true;
    out.push_back(pass("gpu-driver", "AMD KFD present (amdgpu; CRIU support through its KFD checkpoint ioctls)"));
  }
  if (!found)
    out.push_back(warn("gpu-driver", "no NVIDIA driver (/proc/driver/nvidia) and no AMD KFD (/dev/kfd) here",
                       "load the GPU driver: gpuckpt checkpoints GPU processes through it"));
}

// --- kernel -------------------------------------------------------------------------------------------------------

Result<std::string> gunzip(const std::string& data) {
  std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), archive_read_free);
  archive_read_support_filter_gzip(a.get());
  archive_read_support_format_raw(a.get());
  if (archive_read_open_memory(a.get(), data.data(), data.size()) != ARCHIVE_OK)
    return make_error(std::string("not gzip: ") + archive_message(a.get()));
  archive_entry* entry = nullptr;
  if (archive_read_next_header(a.get(), &entry) != ARCHIVE_OK) return make_error("empty gzip stream");
  std::string text;
  char buffer[65536];
  la_ssize_t n = 0;
  while ((n = archive_read_data(a.get(), buffer, sizeof buffer)) > 0) {
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > (16u << 20)) return make_error("kernel config larger than 16 MiB");
  }
  if (n < 0) return make_error(std::string("corrupt gzip: ") + archive_message(a.get()));
  return text;
}

void check_kernel(const NodeReportOptions& o, std::vector<NodeCheck>& out) {
  std::string config, source;
  if (auto packed = o.system.read_file("proc/config.gz", 4 << 20)) {
    if (auto text = gunzip(*packed)) config = *text, source = "/proc/config.gz";
  }
  if (config.empty()) {
    if (auto release = o.system.read_line("proc/sys/kernel/osrelease")) {
      if (auto text = o.system.read_file("boot/config-" + *release, 16 << 20)) config = *text, source = "/boot/config-" + *release;
    }
  }
  struct Feature {
    const char* name;
    const char* option;
    CheckStatus missing;
    const char* why;
  };
  static const Feature kFeatures[] = {
      {"kernel-checkpoint-restore", "CONFIG_CHECKPOINT_RESTORE", CheckStatus::Fail,
       "CRIU cannot checkpoint anything on this kernel"},
      {"kernel-userfaultfd", "CONFIG_USERFAULTFD", CheckStatus::Warn,
       "no userfaultfd: CRIU's lazy restore (--lazy-pages) is unavailable"},
      {"kernel-soft-dirty", "CONFIG_MEM_SOFT_DIRTY", CheckStatus::Warn,
       "no soft-dirty tracking: no CRIU pre-dump or incremental checkpoints (each checkpoint writes all memory)"},
  };
  for (const auto& f : kFeatures) {
    if (config.empty()) {
      out.push_back(warn(f.name, std::string(f.option) + ": kernel configuration not readable (/proc/config.gz, "
                                                          "/boot/config-RELEASE)",
                         "load the `configs` module (modprobe configs), or check the distribution's kernel config"));
      continue;
    }
    const std::string set = std::string("\n") + f.option + "=y";
    if (("\n" + config).find(set) != std::string::npos) {
      out.push_back(pass(f.name, std::string(f.option) + "=y (" + source + ")"));
    } else {
      NodeCheck c{f.name, f.missing, std::string(f.option) + " is not set (" + source + "): " + f.why,
                  "a kernel built with " + std::string(f.option) + "=y"};
      out.push_back(std::move(c));
    }
  }
}

// --- THP, SELinux, space ------------------------------------------------------------------------------------------

void check_thp(const NodeReportOptions& o, std::vector<NodeCheck>& out) {
  auto line = o.system.read_line("sys/kernel/mm/transparent_hugepage/enabled");
  const std::string fix =
      "echo always > /sys/kernel/mm/transparent_hugepage/enabled (and make it persistent: kernel parameter "
      "transparent_hugepage=always); gpuckpt never changes host settings itself";
  if (!line) {
    out.push_back(warn("thp", "transparent huge pages: mode not readable (/sys/kernel/mm/transparent_hugepage/enabled)", fix));
    return;
  }
  std::smatch m;
  static const std::regex kMode(R"(\[([a-z]+)\])");
  const std::string mode = std::regex_search(*line, m, kMode) ? m[1].str() : *line;
  if (mode == "always") {
    out.push_back(pass("thp", "transparent huge pages: always (the NVIDIA driver's checkpoint and restore run fastest)"));
  } else {
    out.push_back(warn("thp",
                       "transparent huge pages: " + mode +
                           ". The NVIDIA driver checkpoints about 25% faster with `always` (8 GiB on an H100: "
                           "3.2-3.5 s vs 4.3-4.6 s with madvise; restore 1.8-2.0 s vs 2.2 s)",
                       fix));
  }
}

void check_selinux(const NodeReportOptions& o, std::vector<NodeCheck>& out) {
  auto enforce = o.system.read_line("sys/fs/selinux/enforce");
  if (!enforce) out.push_back(pass("selinux", "SELinux not enabled"));
  else if (*enforce == "0") out.push_back(pass("selinux", "SELinux permissive"));
  else
    out.push_back(warn("selinux",
                       "SELinux enforcing: containers of type container_t may not write the CRIU plugin dir, "
                       "hooks.d, /etc/criu or /var/lib/gpuckpt",
                       "keep the chart's securityMode (privileged or spcT: both run the host-facing containers as "
                       "spc_t); installs without the chart need the same (docs/deploy.md#selinux)"));
}

void check_space(const NodeReportOptions& o, std::vector<NodeCheck>& out) {
  const fs::path dir = o.files.resolve(o.archive_dir);
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) {
    out.push_back(warn("archive-space", o.archive_dir + " does not exist (yet)",
                       "the chart creates it (host.archiveDir); it must be on a filesystem with room for checkpoints"));
    return;
  }
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
  const std::string detail = gib(free_bytes) + " free in " + o.archive_dir;
  if (free_bytes < kGiB)
    out.push_back(fail("archive-space", detail, "free space there, or point host.archiveDir at a larger filesystem"));
  else if (o.gpu_memory_bytes && free_bytes < o.gpu_memory_bytes)
    out.push_back(warn("archive-space", detail + ", less than the GPUs' memory (" + gib(o.gpu_memory_bytes) +
                                            "): a checkpoint of a full GPU does not fit",
                       "free space there, or point host.archiveDir at a larger filesystem"));
  else out.push_back(pass("archive-space", detail));
}

// --- the runtimes' CRIU config files ---------------------------------------------------------------------------

// runc, crun, podman, containerd and CRI-O run CRIU in swrk mode, which reads these files. CRIU 4.0 and 4.1.x
// segfault there on an option that takes an argument, `network-lock` among them (fixed in CRIU 4.2, PR #3051): with
// such a line every checkpoint through the runtime fails, GPU or not.
void check_criu_config(const NodeReportOptions& o, const Result<std::string>& criu_version,
                       std::vector<NodeCheck>& out) {
  static const char* const kConfigs[] = {"etc/criu/runc.conf", "etc/criu/crun.conf", "etc/criu/default.conf"};
  static const std::regex kNetworkLock(R"(^\s*-{0,2}network-lock(\s|=|$).*)");
  std::vector<std::string> with_lock;
  for (const char* relative : kConfigs) {
    const auto conf = o.system.read_file(relative, 1 << 20);
    if (!conf) continue;
    std::istringstream lines(*conf);
    for (std::string line; std::getline(lines, line);)
      if (std::regex_match(line, kNetworkLock)) {
        with_lock.push_back(std::string("/") + relative);
        break;
      }
  }
  if (with_lock.empty()) return;
  std::string files;
  for (const auto& f : with_lock) files += (files.empty() ? "" : ", ") + f;
  if (!o.criu || !criu_version) {
    out.push_back(warn("criu-config", files + " sets network-lock; CRIU 4.0 and 4.1.x crash on that line in swrk mode "
                                      "(CRIU's version is not known here)",
                       "run `gpuckpt doctor` on the node; with CRIU < 4.2 remove the network-lock line"));
    return;
  }
  int major = 0, minor = 0;
  if (std::sscanf(criu_version->c_str(), "%d.%d", &major, &minor) == 2 && (major > 4 || (major == 4 && minor >= 2))) {
    out.push_back(pass("criu-config", files + " sets network-lock; CRIU " + *criu_version + " reads it in swrk mode"));
    return;
  }
  out.push_back(fail("criu-config",
                     files + " sets network-lock: CRIU " + *criu_version + " crashes (segfault) reading that line in "
                     "swrk mode, so every checkpoint through runc, crun, podman, containerd or CRI-O fails (fixed in "
                     "CRIU 4.2, PR #3051)",
                     "remove the network-lock line (chart: criuConfig.extraOptions), or upgrade CRIU to >= 4.2"));
}

// --- where a restored container's process lands ---------------------------------------------------------------

// runc before 1.2.0 gives CRIU no cgroup root on cgroup v2 (runc 3438ef30b gives it): CRIU then restores the process
// into a recreated copy of the checkpointed container's cgroup, outside the new container's device filter and
// limits (measured with containerd 2.1.9 and CRI-O 1.36.3, each with runc 1.1.5, on 2x H100: docs/kubernetes.md).
// manage-cgroups=ignore in runc's CRIU config keeps it in the cgroup runc put CRIU in, the new container's (both
// runtimes, measured the same way).
void check_restore_cgroup(const NodeReportOptions& o, std::vector<NodeCheck>& out) {
  if (!o.runc_version || !o.system.exists("sys/fs/cgroup/cgroup.controllers")) return;   // v1 or hybrid: runc maps
  const auto version = o.runc_version();
  if (!version) {
    out.push_back(pass("restore-cgroup", "no runc here (" + version.error().message + ")"));
    return;
  }
  int major = 0, minor = 0;
  if (std::sscanf(version->c_str(), "%d.%d", &major, &minor) == 2 && (major > 1 || (major == 1 && minor >= 2))) {
    out.push_back(pass("restore-cgroup", "runc " + *version + " gives CRIU the restored container's cgroup"));
    return;
  }
  static const std::regex kIgnore(R"(^\s*-{0,2}manage-cgroups(\s*=\s*|\s+)ignore\s*$)");
  const auto conf = o.system.read_file("etc/criu/runc.conf", 1 << 20);
  if (conf) {
    std::istringstream lines(*conf);
    for (std::string line; std::getline(lines, line);)
      if (std::regex_match(line, kIgnore)) {
        out.push_back(pass("restore-cgroup", "runc " + *version + " on cgroup v2 with manage-cgroups=ignore in "
                                             "/etc/criu/runc.conf: a restored process stays in its container's cgroup"));
        return;
      }
  }
  out.push_back(fail("restore-cgroup",
                     "runc " + *version + " on cgroup v2 does not give CRIU the restored container's cgroup: CRIU "
                     "restores the process into a copy of the checkpointed container's cgroup, outside the new "
                     "container's device filter (it can open GPUs its pod was not given) and limits",
                     "add the line manage-cgroups=ignore to /etc/criu/runc.conf (gpuckpt's chart adds it on such nodes when "
                     "the file is its own), or install runc >= 1.2"));
}

}  // namespace

const char* to_string(CheckStatus status) {
  switch (status) {
    case CheckStatus::Pass: return "pass";
    case CheckStatus::Warn: return "warn";
    case CheckStatus::Fail: return "fail";
  }
  return "fail";
}

std::unique_ptr<CriuProbe> make_criu_probe(std::string criu) { return std::make_unique<CommandCriuProbe>(std::move(criu)); }

RuncVersion runc_version_of(std::string runc) {
  return [runc = std::move(runc)]() -> Result<std::string> {
    static const std::regex kVersion(R"(runc version\s+([0-9][0-9.]*))");
    return version_of(runc, kVersion);
  };
}

std::vector<NodeCheck> check_node(const NodeReportOptions& options) {
  std::vector<NodeCheck> out;
  check_criu(options, out);
  check_hook(options, out);
  check_hooks_entries(options, out);
  check_driver(options, out);
  check_kernel(options, out);
  check_thp(options, out);
  check_selinux(options, out);
  check_space(options, out);
  check_restore_cgroup(options, out);
  return out;
}

CheckStatus worst(const std::vector<NodeCheck>& checks) {
  CheckStatus w = CheckStatus::Pass;
  for (const auto& c : checks) w = std::max(w, c.status);
  return w;
}

nlohmann::json to_json(const std::vector<NodeCheck>& checks) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : checks) {
    nlohmann::json item = {{"name", c.name}, {"status", to_string(c.status)}, {"detail", c.detail}};
    if (!c.fix.empty()) item["fix"] = c.fix;
    list.push_back(std::move(item));
  }
  return {{"status", to_string(worst(checks))}, {"checks", list}};
}

}  // namespace gpuckpt
