#include "node/containerd_runtime.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <random>

#include "node/containerd_image_import.h"
#include "archive/checkpoint_image.h"
#include "criu/criu_log.h"
#include "archive/directory_archive.h"
#include "base/json_reader.h"
#include "base/log.h"
#include "restore/restore_plan.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

namespace {

// containerd's CRI plugin names a container in its spec's annotations (the CRI labels kubelet sets may be there
// too, as container labels).
constexpr const char* kCriContainerName = "io.kubernetes.cri.container-name";
constexpr const char* kCriPodName = "io.kubernetes.cri.sandbox-name";
constexpr const char* kCriPodNamespace = "io.kubernetes.cri.sandbox-namespace";
constexpr const char* kCriSandboxId = "io.kubernetes.cri.sandbox-id";
constexpr const char* kK8sContainerName = "io.kubernetes.container.name";
constexpr const char* kK8sPodName = "io.kubernetes.pod.name";
constexpr const char* kK8sPodNamespace = "io.kubernetes.pod.namespace";
constexpr const char* kK8sPodUid = "io.kubernetes.pod.uid";
constexpr const char* kCriPodUid = "io.kubernetes.cri.sandbox-uid";

// The value under the first of `keys` found in the container's labels or its spec's annotations.
std::string cri_name(const ContainerdContainer& c, std::initializer_list<const char*> keys) {
  const auto annotations = c.spec.value("annotations", nlohmann::json::object());
  for (const char* key : keys) {
    if (auto it = c.labels.find(key); it != c.labels.end()) return it->second;
    if (annotations.is_object() && annotations.contains(key) && annotations[key].is_string())
      return annotations[key].get<std::string>();
  }
  return {};
}

std::string now_rfc3339() {
  char buffer[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string random_hex(std::size_t bytes) {
  std::random_device rd;
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) {
    const auto b = rd() & 0xff;
    out += digits[b >> 4];
    out += digits[b & 0xf];
  }
  return out;
}

// The directory a snapshot's writable layer lives in: overlay's upperdir, or a bind mount's source.
Result<fs::path> writable_dir(const std::vector<ContainerdMount>& mounts, const std::string& key) {
  for (const auto& m : mounts) {
    if (m.type == "overlay")
      for (const auto& o : m.options)
        if (o.rfind("upperdir=", 0) == 0) return fs::path(o.substr(9));
    if (m.type == "bind" || m.type == "rbind") {
      bool read_only = false;
      for (const auto& o : m.options) read_only = read_only || o == "ro";
      if (!read_only) return fs::path(m.source);
    }
  }
  return make_error("snapshot " + key + " has no writable layer gpuckpt can read (overlay upperdir or a bind mount)",
                    ENOTSUP);
}

// A restore's work directory (the extracted archive: memory of the processes) beside the archive. One left by an
// agent that stopped mid-restore (another pid) is removed by the next restore in that directory.
constexpr const char* kRestoreWorkPrefix = ".gpuckpt-containerd-restore-";

void remove_stale_work_dirs(const fs::path& dir) {
  std::error_code ec;
  const std::string ours = std::string(kRestoreWorkPrefix) + std::to_string(::getpid()) + "-";
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind(kRestoreWorkPrefix, 0) != 0 || name.rfind(ours, 0) == 0) continue;
    std::error_code rm;
    if (fs::remove_all(entry.path(), rm) > 0)
      log::info("removed " + entry.path().string() + ", left by an interrupted restore");
  }
}

// Under `root` without following any symlink in between: the paths come from an archive.
Result<fs::path> inside(const fs::path& root, const std::string& relative) {
  GPUCKPT_TRY(auto name, normalise_entry_name(relative));
  fs::path p = root;
  const fs::path rel(name);
  for (auto it = rel.begin(); it != rel.end(); ++it) {
    p /= *it;
    std::error_code ec;
    if (std::next(it) != rel.end() && fs::is_symlink(p, ec))
      return make_error("'" + relative + "' passes through a symlink in the restored root filesystem", EINVAL);
  }
  return p;
}

class ContainerdRuntime final : public ContainerRuntime {
 public:
  explicit ContainerdRuntime(ContainerdRuntimeOptions options)
      : options_(std::move(options)), containerd_(options_.containerd) {}

  std::string name() const override { return "containerd"; }

  Result<RuntimeContainer> find(const ContainerRef& ref) override {
    if (!is_valid_container_name(ref.container))
      return make_error("container name '" + ref.container + "' is not valid (letters, digits, '_', '.', '-')");
    GPUCKPT_TRY(auto all, containerd_.containers());
    std::vector<RuntimeContainer> running, other;
    for (const auto& c : all) {
      if (display_name(c) != ref.container && c.id != ref.container) continue;
      if (!ref.pod.empty() && cri_name(c, {kK8sPodName, kCriPodName}) != ref.pod) continue;
      if (!ref.namespace_name.empty() && cri_name(c, {kK8sPodNamespace, kCriPodNamespace}) != ref.namespace_name)
        continue;
      GPUCKPT_TRY(auto rc, with_task(c));
      (rc.state == "running" ? running : other).push_back(std::move(rc));
    }
    const auto& pick = running.empty() ? other : running;
    if (pick.empty())
      return make_error("no container '" + ref.container + "'" + (ref.pod.empty() ? "" : " in pod " + ref.pod) +
                        (ref.namespace_name.empty() ? "" : " (namespace " + ref.namespace_name + ")") +
                        " in containerd namespace " + options_.containerd.namespace_name, ENOENT);
    if (pick.size() > 1)
      return make_error(std::to_string(pick.size()) + " containers are named '" + ref.container +
                        "'; give 'pod' and 'namespace' to choose one", EBUSY);
    return pick.front();
  }

  Result<std::vector<RuntimeContainer>> list() override {
    GPUCKPT_TRY(auto all, containerd_.containers());
    std::vector<RuntimeContainer> out;
    for (const auto& c : all) {
      GPUCKPT_TRY(auto rc, with_task(c));
      if (rc.state == "running") out.push_back(std::move(rc));
    }
    return out;
  }

  Result<void> checkpoint(const RuntimeContainer& target, const fs::path& archive, JobDeadline deadline) override {
    GPUCKPT_TRY(auto container, containerd_.container(target.id));
    const fs::path work = archive.parent_path() / (archive.filename().string() + ".work");
    std::error_code ec;
    fs::remove_all(work, ec);
    if (!fs::create_directories(work / "criu-work", ec) || ec)
      return make_error("cannot create " + work.string() + ": " + ec.message(), EIO);
    fs::permissions(work, fs::perms::owner_all, fs::perm_options::replace, ec);
    auto result = checkpoint_into(container, target, work, archive, deadline);
    fs::remove_all(work, ec);
    return result;
  }

  Result<std::string> load_image(const fs::path& layout, const std::string& tag, JobDeadline deadline) override {
    const std::string name = checkpoint_image_name(tag);
    GPUCKPT_TRY_VOID(import_checkpoint_image(options_.containerd, layout, name, deadline));
    return name;
  }

  Result<RuntimeContainer> restore(const fs::path& archive, const std::string& new_name, JobDeadline deadline) override {
    if (!new_name.empty() && !is_valid_container_name(new_name))
      return make_error("container name '" + new_name + "' is not valid");
    remove_stale_work_dirs(archive.parent_path());
    const fs::path work = archive.parent_path() / (std::string(kRestoreWorkPrefix) + std::to_string(::getpid()) + "-" +
                                                   random_hex(4));
    std::error_code ec;
    if (!fs::create_directories(work / "criu-work", ec) || ec)
      return make_error("cannot create " + work.string() + ": " + ec.message(), EIO);
    fs::permissions(work, fs::perms::owner_all, fs::perm_options::replace, ec);
    auto restored = restore_from(archive, work, new_name, deadline);
    fs::remove_all(work, ec);
    return restored;
  }

 private:
  static std::string display_name(const ContainerdContainer& c) {
    const std::string name = cri_name(c, {kK8sContainerName, kCriContainerName, kLabelContainerName});
    return name.empty() ? c.id : name;
  }

  Result<RuntimeContainer> with_task(const ContainerdContainer& c) {
    RuntimeContainer rc{c.id, display_name(c), "created", 0, cri_name(c, {kK8sPodUid, kCriPodUid})};
    auto task = containerd_.task(c.id);
    if (!task) {
      if (task.error().errno_value == ENOENT) return rc;
      return task.error();
    }
    rc.state = task->status;
    rc.pid = static_cast<int>(task->pid);
    return rc;
  }

  Result<void> checkpoint_into(const ContainerdContainer& c, const RuntimeContainer& target, const fs::path& work,
                               const fs::path& archive, JobDeadline deadline) {
    const auto started = std::chrono::steady_clock::now();
    // The rootfs diff is read before CRIU runs so the snapshot cannot go away under us, and after: files the
    // processes write while being dumped are theirs to restore from memory, not from the diff.
    std::vector<PackEntry> entries;
    std::vector<std::string> whiteouts;
    nlohmann::json section = {{"namespace", options_.containerd.namespace_name},
                              {"snapshotter", c.snapshotter},
                              {"runtime", c.runtime},
                              {"labels", c.labels},
                              {"sandbox", c.sandbox}};
    if (!c.snapshotter.empty() && !c.snapshot_key.empty()) {
      GPUCKPT_TRY(auto parent, containerd_.snapshot_parent(c.snapshotter, c.snapshot_key));
      section["snapshotParent"] = parent;
    }
    GPUCKPT_TRY_VOID(containerd_.checkpoint_task(c.id, (work / "checkpoint").string(), (work / "criu-work").string(),
                                                 /*leave_running=*/true, deadline));
    if (!c.snapshotter.empty() && !c.snapshot_key.empty()) {
      GPUCKPT_TRY(auto mounts, containerd_.snapshot_mounts(c.snapshotter, c.snapshot_key));
      GPUCKPT_TRY(auto upper, writable_dir(mounts, c.snapshot_key));
      GPUCKPT_TRY_VOID(pack_tar({{"", upper, ""}}, work / "rootfs-diff.tar", &whiteouts));
      entries.push_back({"rootfs-diff.tar", work / "rootfs-diff.tar", ""});
      entries.push_back({"deleted.files", "", nlohmann::json(whiteouts).dump()});
    }
    const nlohmann::json config = {{"id", c.id},
                                   {"name", target.name},
                                   {"rootfsImageName", c.image},
                                   {"rootfsImageRef", c.image},
                                   {"runtime", "runc"},
                                   {"createdTime", c.created.empty() ? now_rfc3339() : c.created},
                                   {"checkpointedTime", now_rfc3339()},
                                   {"engine", "containerd"},
                                   {"containerd", section}};
    entries.insert(entries.begin(), {{"config.dump", "", config.dump(2)}, {"spec.dump", "", c.spec.dump()}});
    entries.push_back({"checkpoint", work / "checkpoint", ""});
    GPUCKPT_TRY(auto written, pack_tar(entries, archive));
    log::info("containerd checkpoint of " + target.name + " (" + c.id + "): " + std::to_string(written) +
              " bytes in " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                                    started).count()) + " ms");
    return {};
  }

  // The container a containerd checkpoint extracted at `root` describes (config.dump, spec.dump), named `new_name`
  // (or a new name) and with its spec adapted to it; `parent`: the snapshot its root filesystem's diff goes onto.
  Result<ContainerdContainer> container_of(const fs::path& archive, const fs::path& root, const std::string& new_name,
                                           std::string& parent) {
    GPUCKPT_TRY(auto config, read_json_file(root / "config.dump"));
    GPUCKPT_TRY(auto spec, read_json_file(root / "spec.dump"));
    if (!config || !spec || !config->is_object() || !spec->is_object())
      return make_error(archive.string() +
                        " is not a container checkpoint (config.dump/spec.dump missing or not JSON)");
    JsonFields fields(archive.string() + ": config.dump");
    const auto* section = fields.object(*config, "", "containerd");
    std::string old_id, snapshotter = "overlayfs", runtime = "io.containerd.runc.v2", image;
    if (section) fields.get(*section, "containerd", "snapshotParent", parent);
    if (fields.failed()) return fields.error();
    if (!section || parent.empty())
      return make_error(archive.string() + " was not written by containerd (no containerd snapshot in config.dump): "
                        "restore it with the runtime that wrote it", ENOTSUP);
    fields.get(*config, "", "id", old_id);
    fields.get(*config, "", "rootfsImageRef", image);
    fields.get(*section, "containerd", "snapshotter", snapshotter);
    fields.get(*section, "containerd", "runtime", runtime);
    if (fields.failed()) return fields.error();
    // Restores go through runc's shim (criu_image_path is its option); snapshotters are plain plugin names.
    if (runtime.rfind("io.containerd.runc.", 0) != 0)
      return make_error(archive.string() + ": runtime '" + runtime.substr(0, 64) + "' is not runc's shim", ENOTSUP);
    if (snapshotter.empty() || snapshotter.size() > 64 ||
        snapshotter.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_.") != std::string::npos)
      return make_error(archive.string() + ": snapshotter name is not valid", EINVAL);
    const std::string id = new_name.empty() ? "gpuckpt-restored-" + random_hex(6) : new_name;
    ContainerdContainer c;
    c.id = id;
    c.image = image;
    c.runtime = runtime;
    c.snapshotter = snapshotter;
    c.snapshot_key = id;
    c.labels[kLabelContainerName] = id;
    c.labels[kLabelRestoredFrom] = old_id;
    c.spec = std::move(*spec);
    adapt_spec(c.spec, old_id, id);
    return c;
  }

  Result<RuntimeContainer> restore_from(const fs::path& archive, const fs::path& work, const std::string& new_name,
                                        JobDeadline deadline) {
    ArchiveLimits limits = options_.limits;
    limits.deadline = deadline;
    GPUCKPT_TRY_VOID(extract_archive(archive, work / "archive", limits));
    const fs::path root = work / "archive";
    std::string parent;
    GPUCKPT_TRY(ContainerdContainer c, container_of(archive, root, new_name, parent));
    const std::string& id = c.id;

    GPUCKPT_TRY(auto mounts, containerd_.prepare_snapshot(c.snapshotter, id, parent));
    auto undo_snapshot = [&] { (void)containerd_.remove_snapshot(c.snapshotter, id); };
    auto applied = apply_diff(root, mounts, id);
    if (!applied) {
      undo_snapshot();
      return applied.error();
    }
    auto plan = place_restore_plan(c.spec, root / "checkpoint", id);
    if (!plan) {
      undo_snapshot();
      return plan.error();
    }
    auto created = containerd_.create_container(c);
    if (!created) {
      undo_snapshot();
      return created.error();
    }
    auto undo_container = [&] {
      (void)containerd_.delete_task(id);
      (void)containerd_.delete_container(id);
      undo_snapshot();
    };
    auto task = containerd_.restore_task(id, mounts, (root / "checkpoint").string(),
                                         (work / "criu-work").string(), "", deadline);
    if (!task) {
      undo_container();
      return task.error();
    }
    auto started = containerd_.start_task(id, deadline);   // the shim runs `runc restore` here
    if (!started) {
      const std::string criu_errors = criu_log_reasons(work / "criu-work" / "restore.log");   // gone with the restore
      undo_container();
      return make_error(started.error().message + (criu_errors.empty() ? "" : "; CRIU said: " + criu_errors),
                        started.error().errno_value);
    }
    GPUCKPT_TRY(auto now, containerd_.task(id));
    log::info("containerd restored " + archive.string() + " as " + id + " (pid " + std::to_string(now.pid) + ")");
    return RuntimeContainer{id, id, now.status, static_cast<int>(now.pid)};
  }

  // The restored container is a new one: its own cgroup (the old id replaced). Namespaces it joined by path are
  // joined again only when they were its pod sandbox's and that sandbox still runs here (paths recomputed from the
  // sandbox's current pid, never taken from the archive: a stale or hostile /proc/N/ns path could be anyone's);
  // else fresh ones. A container that shared its pod's PID namespace restores only once its PIDs are free there.
  // OCI hooks from the archive are dropped: they would run on the host, as root.
  void adapt_spec(nlohmann::json& spec, const std::string& old_id, const std::string& id) {
    if (spec.contains("hooks")) spec.erase("hooks");
    auto& linux_section = spec["linux"];
    if (!linux_section.is_object()) return;
    if (linux_section.contains("cgroupsPath") && linux_section["cgroupsPath"].is_string()) {
      std::string path = linux_section["cgroupsPath"].get<std::string>();
      const auto at = old_id.empty() ? std::string::npos : path.find(old_id);
      linux_section["cgroupsPath"] = at == std::string::npos ? "/gpuckpt/" + id : path.replace(at, old_id.size(), id);
    }
    std::uint32_t sandbox_pid = 0;
    const auto annotations = spec.value("annotations", nlohmann::json::object());
    if (annotations.is_object() && annotations.contains(kCriSandboxId) && annotations[kCriSandboxId].is_string())
      if (auto task = containerd_.task(annotations[kCriSandboxId].get<std::string>());
          task && task->status == "running")
        sandbox_pid = task->pid;
    static const std::map<std::string, std::string> ns_files = {
        {"pid", "pid"}, {"ipc", "ipc"}, {"uts", "uts"}, {"network", "net"}, {"mount", "mnt"},
        {"cgroup", "cgroup"}, {"user", "user"}, {"time", "time"}};
    if (!linux_section.contains("namespaces") || !linux_section["namespaces"].is_array()) return;
    for (auto& ns : linux_section["namespaces"]) {
      if (!ns.is_object() || !ns.contains("path")) continue;
      const std::string type = ns.contains("type") && ns["type"].is_string() ? ns["type"].get<std::string>() : "";
      const auto file = ns_files.find(type);
      if (sandbox_pid == 0 || file == ns_files.end())
        ns.erase("path");
      else
        ns["path"] = "/proc/" + std::to_string(sandbox_pid) + "/ns/" + file->second;
    }
  }

  // rootfs-diff.tar into the new snapshot's writable layer; deleted.files become overlay whiteouts there.
  Result<void> apply_diff(const fs::path& root, const std::vector<ContainerdMount>& mounts, const std::string& key) {
    std::error_code ec;
    if (!fs::exists(root / "rootfs-diff.tar", ec)) return {};
    GPUCKPT_TRY(const fs::path layer, writable_dir(mounts, key));
    GPUCKPT_TRY_VOID(apply_rootfs_diff(root / "rootfs-diff.tar", layer, options_.limits));
    GPUCKPT_TRY(auto deleted, read_json_file(root / "deleted.files"));
    if (!deleted || !deleted->is_array()) return {};
    for (const auto& entry : *deleted) {
      if (!entry.is_string()) continue;
      GPUCKPT_TRY(auto path, inside(layer, entry.get<std::string>()));
      fs::create_directories(path.parent_path(), ec);
      if (::mknod(path.c_str(), S_IFCHR | 0000, makedev(0, 0)) != 0 && errno != EEXIST)
        return make_error("cannot mark " + entry.get<std::string>() + " deleted in the restored root filesystem: " +
                          std::strerror(errno), errno);
    }
    return {};
  }

  // The CRIU plugin reads the GPU mapping from the images directory. The spec names the plan only by its id
  // (io.gpuckpt.restore-plan, set by the agent's rewrite); the plan itself comes from the agent's state dir, is
  // checked against its binding (container `id`, the spec's checkpoint id, expiry) and used up there.
  Result<void> place_restore_plan(const nlohmann::json& spec, const fs::path& images, const std::string& id) {
    const auto annotations = spec.value("annotations", nlohmann::json::object());
    if (!annotations.is_object() || !annotations.contains(kAnnotationRestorePlan) ||
        !annotations[kAnnotationRestorePlan].is_string() || options_.state_dir.empty()) {
      std::error_code ec;
      if (fs::remove(images / kPlanFileInImages, ec))   // it came with the archive: only the agent makes plans
        log::warn("removed a restore plan that came inside the archive");
      return {};
    }
    const std::string plan_id = annotations[kAnnotationRestorePlan].get<std::string>();
    auto plan = read_restore_plan(options_.state_dir, plan_id);
    if (!plan) return make_error("restore plan " + plan_id + " named in spec.dump: " + plan.error().message);
    if (!plan.value()) return make_error("restore plan " + plan_id + " named in spec.dump is not in " +
                                         options_.state_dir.string() + " (plans are single use and expire): "
                                         "restore through the agent's API", ENOENT);
    const std::string checkpoint = annotations.contains(kAnnotationCheckpointId) &&
                                           annotations[kAnnotationCheckpointId].is_string()
                                       ? annotations[kAnnotationCheckpointId].get<std::string>()
                                       : std::string();
    GPUCKPT_TRY_VOID(check_plan_binding(*plan.value(), PlanUser{id, checkpoint}, plan_clock_now()));
    GPUCKPT_TRY(auto claimed, remove_restore_plan(options_.state_dir, plan_id));
    if (!claimed) return make_error("restore plan " + plan_id + " was used by another restore", EBUSY);
    GPUCKPT_TRY_VOID(write_file_atomically(images / kPlanFileInImages, to_json(*plan.value()).dump(2)));
    log::info("restore plan " + plan_id + " placed in " + (images / kPlanFileInImages).string());
    return {};
  }

  ContainerdRuntimeOptions options_;
  ContainerdClient containerd_;
};

}  // namespace

std::unique_ptr<ContainerRuntime> make_containerd_runtime(ContainerdRuntimeOptions options) {
  return std::make_unique<ContainerdRuntime>(std::move(options));
}

}  // namespace gpuckpt::node
