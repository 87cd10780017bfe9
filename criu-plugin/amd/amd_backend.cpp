// Hook entry points of the AMD backend. Checkpoint (in the CRIU process): DUMP_EXT_FILE on the target's
// /dev/kfd fd runs PROCESS_INFO -> CHECKPOINT, drains BO contents per GPU and writes the metadata; the queues stay
// paused (on a kept duplicate of that fd) until CRIU has dumped the process's memory — DUMP_DEVICES_LATE where CRIU
// has it, else fini(DUMP), which every CRIU calls after the pages are written and before the tasks run or die —
// and are UNPAUSEd there whether the dump succeeded or not. Userptr BOs and the AQL queues' ring buffers live in
// process memory: a GPU running while CRIU copies it would leave an image inconsistent with the saved VRAM.
// Restore: RESTORE_EXT_FILE (in the restored process) opens KFD and render nodes above the process's fds, maps
// GPUs with the shared matcher, runs RESTORE and refills BOs (here, or in the main CRIU process's POST_FORKING
// worker); UPDATE_VMA_MAP fixes mmap offsets; RESUME_DEVICES_LATE (main process) stops the worker and RESUMEs.
#include "criu-plugin/amd/amd_backend.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "amd_image.pb.h"
#include "base/log.h"
#include "gpu/properties_record.h"
#include "criu-plugin/amd/amd_topology.h"
#include "criu-plugin/amd/bo_io.h"
#include "criu-plugin/amd/hex_text.h"
#include "criu-plugin/amd/hsakmt_shm.h"
#include "criu-plugin/amd/image_dir.h"
#include "criu-plugin/amd/kfd_uapi.h"
#include "criu-plugin/amd/parallel_restore.h"
#include "criu-plugin/amd/render_file_audit.h"
#include "criu-plugin/criu_abi.h"

namespace gpuckpt::amd {
namespace {

constexpr std::uint32_t kImageVersion = 1;
constexpr const char* kKfdPath = "/dev/kfd";

std::string render_path(int minor) { return "/dev/dri/renderD" + std::to_string(minor); }

int fail(const std::string& what, const Error& error) {
  log::error("amd: " + what + ": " + error.message);
  return -(error.errno_value > 0 ? error.errno_value : EIO);
}

// The highest fd number listed under proc/<pid>/fd of `host`, -1 when it cannot be read.
int highest_fd(const HostRoot& host, const std::string& pid) {
  auto entries = host.list_dir("proc/" + pid + "/fd");
  if (!entries) return -1;
  int highest = -1;
  for (const auto& name : *entries) {
    char* end = nullptr;
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end && *end == '\0' && fd >= 0) highest = std::max(highest, static_cast<int>(fd));
  }
  return highest;
}

// A device fd this backend owns; closed through the seam.
class OwnedFd {
 public:
  OwnedFd() = default;
  OwnedFd(AmdDevice* device, int fd) : device_(device), fd_(fd) {}
  OwnedFd(OwnedFd&& o) noexcept : device_(o.device_), fd_(o.fd_) { o.fd_ = -1; }
  OwnedFd& operator=(OwnedFd&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  ~OwnedFd() { reset(); }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0 && device_) device_->close(fd_);
    fd_ = -1;
  }

 private:
  AmdDevice* device_ = nullptr;
  int fd_ = -1;
};

class AmdBackend final : public plugin::Backend {
 public:
  explicit AmdBackend(AmdBackendDeps deps) : deps_(std::move(deps)), device_(*deps_.device) {}
  ~AmdBackend() override { fini(stage_, 0); }

  const char* name() const override { return "amd"; }

  int init(int stage) override {
    stage_ = stage;
    enabled_ = false;
    if (deps_.config) {
      config_ = *deps_.config;
    } else {
      auto config = AmdConfig::from_env();
      if (!config) return fail("configuration", config.error());
      config_ = *config;
    }
    struct stat st {};
    if (int err = device_.stat(kKfdPath, &st); err < 0) {
      log::info(std::string("amd: no ") + kKfdPath + " (" + std::strerror(-err) +
                "): no AMD GPU through KFD here, the AMD backend declines every hook");
      return 0;
    }
    kfd_rdev_ = st.st_rdev;
    auto version = probe_kfd_version();
    if (!version) {
      log::warn("amd: " + version.error().message + "; the AMD backend declines every hook");
      return 0;
    }
    if (!version->supports_criu()) {
      log::error("amd: KFD ioctl version " + version->str() + " is older than " + std::to_string(kKfdMajor) + "." +
                 std::to_string(kKfdMinMinor) +
                 ", which checkpoint/restore needs; AMD GPU checkpointing is disabled on this node. Update the "
                 "kernel (amdgpu/amdkfd from Linux 6.0 or ROCm 5.3 DKMS on) to enable it");
      return 0;
    }
    kfd_version_ = *version;
    config_.log_once();
    if (stage == criu::kStageRestore) setup_restore();
    enabled_ = true;
    log::info("amd: KFD " + kfd_version_.str() + ", AMD backend active");
    return 0;
  }

  int dump_devices_late(int /*pid*/) override {
    if (!enabled_ || paused_.empty()) return -ENOTSUP;
    auto unpaused = unpause_all("DUMP_DEVICES_LATE: CRIU has dumped the memory");
    return unpaused ? 0 : fail("DUMP_DEVICES_LATE", unpaused.error());
  }

  void fini(int /*stage*/, int ret) override {
    if (!paused_.empty()) {
      (void)unpause_all(ret == 0 ? "end of the dump: CRIU has dumped the memory" : "the dump failed");
    }
    if (server_) {
      if (server_->started()) (void)server_->stop();
      server_.reset();
    }
    render_fds_.clear();
    vma_updates_.clear();
    plan_cache_.clear();
    kfd_targets_.clear();
    seized_pids_.clear();
    tree_audited_ = false;
    audited_files_.clear();
    shared_dmabufs_.clear();
    retries_.clear();
    visible_node_.reset();
    enabled_ = false;
  }

  // KFD's work happens in DUMP_EXT_FILE; here the backend only learns the host pids CRIU seizes, because
  // PROCESS_INFO reports the pid in the process's own PID namespace (a container's), not the host's.
  int pause_devices(int pid) override {
    if (enabled_ && stage_ == criu::kStageDump) seized_pids_.push_back(pid);
    return -ENOTSUP;
  }

  int handle_device_vma(int /*fd*/, const struct stat* st) override {
    if (!enabled_ || !st) return -ENOTSUP;
    if (!is_kfd(*st) && !is_amd_render_node(*st)) return -ENOTSUP;
    note_in_inventory();
    return 0;
  }

  int dump_ext_file(int fd, int id) override {
    if (!enabled_) return -ENOTSUP;
    struct stat st {};
    if (int err = device_.fstat(fd, &st); err < 0) return -ENOTSUP;
    if (is_kfd(st) || is_amd_render_node(st)) {
      if (auto ok = audit_tree_render_files(); !ok) return fail("checkpoint", ok.error());
    }
    if (is_kfd(st)) return dump_kfd(fd, static_cast<std::uint32_t>(id));
    if (is_amd_render_node(st)) return dump_render(fd, st, static_cast<std::uint32_t>(id));
    std::uint64_t inode = 0;
    if (device_.dmabuf_inode(fd, &inode) == 0) return dump_dmabuf(inode, static_cast<std::uint32_t>(id));
    return -ENOTSUP;
  }

  int restore_ext_file(int id, bool* retry_needed) override {
    if (retry_needed) *retry_needed = false;
    if (!enabled_) return -ENOTSUP;
    const auto uid = static_cast<std::uint32_t>(id);
    auto images = image_dir();
    if (!images) return -ENOTSUP;
    auto kfd = images->read_framed(kfd_image_name(uid));
    if (kfd) return restore_kfd(*images, uid, *kfd);
    if (kfd.error().errno_value != ENOENT) return fail("restore of " + kfd_image_name(uid), kfd.error());
    auto render = images->read_framed(render_image_name(uid));
    if (render) {
      return bounded_retry(render_image_name(uid), restore_render(*images, uid, *render, retry_needed), retry_needed);
    }
    if (render.error().errno_value != ENOENT) return fail("restore of " + render_image_name(uid), render.error());
    auto dmabuf = images->read_framed(dmabuf_image_name(uid));
    if (dmabuf) {
      return bounded_retry(dmabuf_image_name(uid), restore_dmabuf(uid, *dmabuf, retry_needed), retry_needed);
    }
    if (dmabuf.error().errno_value != ENOENT) return fail("restore of " + dmabuf_image_name(uid), dmabuf.error());
    return -ENOTSUP;
  }

  // CRIU asks again for a file whose hook asked for a retry, with no limit of its own: an image that waits for a
  // KFD image this process never restores (its BO or GPU choice belongs to another process) would spin forever.
  static constexpr unsigned kMaxRetries = 1000;
  int bounded_retry(const std::string& name, int result, bool* retry_needed) {
    if (!retry_needed || !*retry_needed) return result;
    if (++retries_[name] <= kMaxRetries) return result;
    *retry_needed = false;
    return fail("restore of " + name,
                make_error("still waiting after " + std::to_string(kMaxRetries) + " tries for the KFD image it "
                           "depends on, which this process does not restore (a render node or dma-buf shared with "
                           "another process's GPU state cannot be restored; docs/amd.md)", ENOTSUP));
  }

  int update_vma_map(const char* path, std::uint64_t addr, std::uint64_t old_pgoff, std::uint64_t* new_pgoff,
                     int* plugin_fd) override {
    if (!enabled_ || !path) return -ENOTSUP;
    std::string p(path);
    for (std::size_t i; (i = p.find("//")) != std::string::npos;) p.erase(i, 1);
    const bool render = p.rfind("/dev/dri/renderD", 0) == 0;
    if (!render && p != kKfdPath) return -ENOTSUP;
    for (const auto& u : vma_updates_) {
      if (u.addr != addr || u.old_offset != old_pgoff) continue;
      *new_pgoff = u.new_offset;
      *plugin_fd = -1;
      if (render) {
        // CRIU closes the fd it is given after mmap; the kept render fd must stay for later VMAs.
        const int dup = device_.dup_above(u.render_fd, fd_floor_);
        if (dup < 0) return fail("UPDATE_VMA_MAP", make_error("cannot duplicate the render-node fd", -dup));
        *plugin_fd = dup;
      }
      log::debug("amd: VMA " + hex(addr) + " offset " + hex(old_pgoff) +
                 " -> " + hex(u.new_offset));
      return 1;
    }
    log::info("amd: no BO for " + p + " VMA at " + hex(addr) + " offset " + hex(old_pgoff));
    return 0;
  }

  int post_forking() override {
    if (!enabled_ || !server_) return 0;
    auto images = image_dir();
    if (!images) return 0;
    server_->start(device_, *images, transfer_options());
    log::info("amd: parallel BO restore worker started");
    return 0;
  }

  int resume_devices_late(int pid) override {
    if (!enabled_) return -ENOTSUP;
    if (server_ && !worker_stopped_) {
      // A CRIU without POST_FORKING never started the worker: the jobs wait in the socket, run them now.
      if (!server_->started()) {
        if (auto images = image_dir()) server_->start(device_, *images, transfer_options());
      }
      worker_stopped_ = true;
      auto done = server_->stop();
      worker_result_ = done;
      log::info("amd: parallel restore worker stopped after " + std::to_string(server_->jobs_done()) + " job(s)");
    }
    if (!worker_result_) return stop_unresumable(pid, "the parallel BO content restore", worker_result_.error());
    const int raw = device_.open(kKfdPath, O_RDWR);
    if (raw < 0) {
      log::info(std::string("amd: cannot open /dev/kfd to resume pid ") + std::to_string(pid) + ": " +
                std::strerror(-raw));
      return -ENOTSUP;
    }
    OwnedFd kfd(&device_, raw);
    kfd_ioctl_criu_args args{};
    args.pid = static_cast<std::uint32_t>(pid);
    auto resumed = kfd_criu_op(device_, kfd.get(), args, KFD_CRIU_OP_RESUME);
    if (!resumed) {
      if (resumed.error().errno_value == ESRCH) {
        // Not a KFD process (or already gone): some other backend's, or nobody's.
        log::debug("amd: pid " + std::to_string(pid) + " has no KFD process; not ours");
        return -ENOTSUP;
      }
      return stop_unresumable(pid, "KFD RESUME", resumed.error());
    }
    log::info("amd: pid " + std::to_string(pid) + " resumed on its GPUs");
    return 0;
  }

  // CRIU runs RESUME_DEVICES_LATE after the tasks run again and only logs a hook's error: a process whose queues
  // could not be resumed, or whose BO contents were not restored, would go on without its GPU work (evicted
  // queues or garbage memory, no error of its own). It is stopped instead, so the restore fails where the runtime
  // and the user see it (the container exits on SIGKILL).
  int stop_unresumable(int pid, const std::string& what, const Error& error) {
    const std::string reason = what + " of restored pid " + std::to_string(pid) + " failed: " + error.message;
    const int killed = deps_.kill_task ? deps_.kill_task(pid, SIGKILL) : ::kill(pid, SIGKILL);
    log::error("amd: " + reason + "; its GPU queues stay evicted, so the process was " +
               (killed == 0 ? std::string("stopped (SIGKILL) rather than left running without its GPU work")
                            : std::string("to be stopped, but kill failed: ") + std::strerror(errno)) +
               ". The restore failed: see this log, then restore again");
    return -(error.errno_value > 0 ? error.errno_value : EIO);
  }

 private:
  struct VmaUpdate {
    std::uint64_t addr;
    std::uint64_t old_offset;
    std::uint64_t new_offset;
    int render_fd;
  };

  Result<KfdVersion> probe_kfd_version() {
    // KFD accepts ioctls other than CRIU_OP only from the process that opened the fd, so the version is asked
    // on an fd of our own, never on the target's.
    const int raw = device_.open(kKfdPath, O_RDWR);
    if (raw < 0) return make_error(std::string("cannot open /dev/kfd: ") + std::strerror(-raw), -raw);
    OwnedFd fd(&device_, raw);
    return kfd_get_version(device_, fd.get());
  }

  bool is_kfd(const struct stat& st) const {
    return S_ISCHR(st.st_mode) && major(st.st_rdev) == major(kfd_rdev_) && minor(st.st_rdev) == minor(kfd_rdev_);
  }

  bool is_amd_render_node(const struct stat& st) {
    if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != kDrmMajor || minor(st.st_rdev) < kFirstRenderMinor) {
      return false;
    }
    auto node = cached_node();
    return node && find_render_minor(**node, static_cast<int>(minor(st.st_rdev))) != nullptr;
  }

  Result<const NodeInventory*> cached_node() {
    if (!node_) {
      GPUCKPT_TRY(node_, read_amd_node(deps_.host));
    }
    return &*node_;
  }

  // The GPUs of this node the calling (restored) process may open, as its device cgroup allows: the GPUs KFD gives
  // the process, so the only ones a restore may choose and the count RESTORE demands.
  Result<const NodeInventory*> visible_node() {
    if (!visible_node_) {
      GPUCKPT_TRY(const NodeInventory* node, cached_node());
      NodeInventory visible = *node;
      std::erase_if(visible.gpus, [&](const GpuDevice& gpu) {
        const int fd = device_.open(render_path(gpu.render_minor).c_str(), O_RDWR);
        if (fd < 0) return true;
        device_.close(fd);
        return false;
      });
      visible_node_ = std::move(visible);
    }
    return &*visible_node_;
  }

  std::optional<ImageDir> image_dir() {
    const int fd = deps_.image_dir_fd ? deps_.image_dir_fd() : -1;
    if (fd < 0) {
      log::error("amd: CRIU did not tell the image directory; cannot read or write AMD images");
      return std::nullopt;
    }
    return ImageDir(fd);
  }

  void note_in_inventory() {
    if (in_inventory_ || !deps_.add_to_inventory) return;
    if (auto r = deps_.add_to_inventory(); !r) {
      log::warn("amd: cannot record the plugin in the inventory image: " + r.error().message);
      return;
    }
    in_inventory_ = true;
  }

  TransferOptions transfer_options() const {
    TransferOptions options;
    options.max_buffer_size = config_.max_buffer_size;
    options.use_sdma = config_.use_sdma;
    return options;
  }

  // ---- checkpoint ---------------------------------------------------------------------------------------

  bool has_kfd_open(const std::string& pid) const {
    auto fds = deps_.host.list_dir("proc/" + pid + "/fd");
    if (!fds) return false;
    for (const auto& fd : *fds) {
      auto target = deps_.host.read_link("proc/" + pid + "/fd/" + fd);
      if (target && *target == kKfdPath) return true;
    }
    return false;
  }

  // The innermost-namespace pid of a host pid (last field of NSpid in /proc/<pid>/status), 0 if unknown.
  std::uint32_t innermost_pid(int host_pid) const {
    auto status = deps_.host.read_file("proc/" + std::to_string(host_pid) + "/status");
    if (!status) return 0;
    const auto at = status->find("NSpid:");
    if (at == std::string::npos) return 0;
    const auto end = status->find('\n', at);
    const std::string line = status->substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
    const auto last = line.find_last_not_of(" \t");
    if (last == std::string::npos) return 0;
    const auto first = line.find_last_of(" \t", last);
    return static_cast<std::uint32_t>(std::strtoul(line.substr(first == std::string::npos ? 0 : first + 1).c_str(),
                                                   nullptr, 10));
  }

  // The host pid of the process KFD calls `kfd_pid`: a task CRIU seized whose innermost pid it is and which has
  // /dev/kfd open; otherwise the pid itself (CRIU and the process share a PID namespace).
  std::string host_pid_for(std::uint32_t kfd_pid) const {
    for (int pid : seized_pids_) {
      if (innermost_pid(pid) == kfd_pid && has_kfd_open(std::to_string(pid))) return std::to_string(pid);
    }
    return std::to_string(kfd_pid);
  }

  int dump_kfd(int fd, std::uint32_t id) {
    auto images = image_dir();
    if (!images) return -EIO;
    kfd_ioctl_criu_args args{};
    if (auto r = kfd_criu_op(device_, fd, args, KFD_CRIU_OP_PROCESS_INFO); !r) {
      return fail("checkpoint of KFD fd " + std::to_string(fd), r.error());
    }
    // From here the process's queues are evicted: whatever happens, UNPAUSE before returning.
    log::info("amd: process " + std::to_string(args.pid) + ": " + std::to_string(args.num_devices) + " GPUs, " +
              std::to_string(args.num_bos) + " BOs, " + std::to_string(args.num_objects) + " objects, " +
              std::to_string(args.priv_data_size) + " bytes of private data");
    Result<void> dumped = checkpoint_paused(fd, id, *images, args);
    // CRIU closes `fd` after this hook: the queues are unpaused later through a duplicate of it.
    const int kept = dumped ? device_.dup_above(fd, 0) : -1;
    if (!dumped || kept < 0) {
      kfd_ioctl_criu_args unpause{};
      auto unpaused = kfd_criu_op(device_, fd, unpause, KFD_CRIU_OP_UNPAUSE);
      if (!dumped) return fail("checkpoint of process " + std::to_string(args.pid), dumped.error());
      if (!unpaused) return fail("checkpoint of process " + std::to_string(args.pid), unpaused.error());
      return fail("checkpoint of process " + std::to_string(args.pid),
                  make_error("cannot keep its /dev/kfd fd to hold the GPU paused until its memory is dumped", -kept));
    }
    paused_.push_back(PausedProcess{OwnedFd(&device_, kept), args.pid});
    note_in_inventory();
    log::info("amd: process " + std::to_string(args.pid) + " checkpointed (image " + kfd_image_name(id) +
              "); its GPU queues stay paused until CRIU has dumped its memory");
    return 0;
  }

  // UNPAUSE every process dump_kfd left paused; `when` names the point for the log. The first failure is returned
  // after all were tried: a process left with evicted queues must be named.
  Result<void> unpause_all(const char* when) {
    Result<void> result;
    for (auto& p : paused_) {
      kfd_ioctl_criu_args unpause{};
      auto unpaused = kfd_criu_op(device_, p.kfd.get(), unpause, KFD_CRIU_OP_UNPAUSE);
      if (unpaused) {
        log::info("amd: process " + std::to_string(p.pid) + ": GPU queues unpaused (" + when + ")");
      } else {
        log::error("amd: process " + std::to_string(p.pid) + ": UNPAUSE failed (" + when + "): " +
                   unpaused.error().message + "; its GPU queues stay evicted until it is restarted");
        if (result) result = unpaused;
      }
    }
    paused_.clear();
    return result;
  }

  // What CHECKPOINT filled in for one process; the dmabuf fds it installed in this process close with it.
  struct KfdCheckpoint {
    std::vector<kfd_criu_device_bucket> devices;
    std::vector<kfd_criu_bo_bucket> bos;
    std::string priv;
    std::vector<OwnedFd> dmabufs;
  };

  Result<KfdCheckpoint> run_checkpoint_op(int fd, const kfd_ioctl_criu_args& info) {
    KfdCheckpoint out;
    out.devices.resize(info.num_devices);
    out.bos.resize(info.num_bos);
    out.priv.assign(static_cast<std::size_t>(info.priv_data_size), '\0');
    kfd_ioctl_criu_args args = info;
    args.devices = reinterpret_cast<std::uintptr_t>(out.devices.data());
    // KFD refuses a null BO array even when the process has no BOs (criu_checkpoint: EINVAL).
    kfd_criu_bo_bucket no_bos{};
    args.bos = reinterpret_cast<std::uintptr_t>(out.bos.empty() ? &no_bos : out.bos.data());
    args.priv_data = reinterpret_cast<std::uintptr_t>(out.priv.data());
    GPUCKPT_TRY_VOID(kfd_criu_op(device_, fd, args, KFD_CRIU_OP_CHECKPOINT));
    // The dmabuf fds CHECKPOINT installed in this process are ours to close, on every path.
    for (const auto& bo : out.bos) {
      if (bo.dmabuf_fd != kKfdInvalidFd) out.dmabufs.emplace_back(&device_, static_cast<int>(bo.dmabuf_fd));
    }
    return out;
  }

  // The process's GPUs as the image lists them, and one content transfer per GPU (with its render node open for
  // SDMA while the contents move).
  struct CheckpointedGpus {
    std::vector<std::string> used;   // inventory ids, for the node record
    std::vector<OwnedFd> render_fds;
    std::vector<GpuTransfer> transfers;
  };

  Result<CheckpointedGpus> add_devices(pb::KfdImage& image, const std::vector<kfd_criu_device_bucket>& devices,
                                       const NodeInventory& node, std::uint32_t id) {
    CheckpointedGpus out;
    for (const auto& d : devices) {
      const GpuDevice* gpu = find_gpu_id(node, d.actual_gpu_id);
      if (!gpu) {
        return make_error("KFD reports gpu_id " + hex(d.actual_gpu_id) +
                          " but the node's KFD topology has no such GPU; is /sys mounted from the host?", ENODEV);
      }
      auto* dev = image.add_devices();
      dev->set_user_gpu_id(d.user_gpu_id);
      dev->set_actual_gpu_id(d.actual_gpu_id);
      dev->set_render_minor(gpu->render_minor);
      dev->set_inventory_id(gpu->id);
      out.used.push_back(gpu->id);
      GpuTransfer t;
      t.gpu_id = d.user_gpu_id;
      t.file_name = bo_content_image_name(id, d.user_gpu_id);
      if (config_.use_sdma) {
        const int rfd = device_.open(render_path(gpu->render_minor).c_str(), O_RDWR);
        if (rfd >= 0) {
          out.render_fds.emplace_back(&device_, rfd);
          t.render_fd = rfd;
        }
      }
      out.transfers.push_back(std::move(t));
    }
    return out;
  }

  // The dma-buf inodes of the process's BOs (0 where a BO has none) and of every dma-buf fd the process holds.
  struct DmabufInodes {
    std::vector<std::uint64_t> of_bos;              // by BO index
    std::vector<std::uint64_t> held;                // one per dmabuf fd the process holds
    std::map<std::uint64_t, std::uint32_t> fds_on;  // dmabuf inode -> fds the process holds on it
  };

  DmabufInodes dmabuf_inodes(const std::string& host_pid, const std::vector<kfd_criu_bo_bucket>& bos) {
    DmabufInodes out;
    (void)device_.process_dmabuf_inodes(host_pid, &out.held);
    for (auto inode : out.held) ++out.fds_on[inode];
    out.of_bos.assign(bos.size(), 0);
    for (std::size_t i = 0; i < bos.size(); ++i) {
      if (bos[i].dmabuf_fd == kKfdInvalidFd) continue;
      (void)device_.dmabuf_inode(static_cast<int>(bos[i].dmabuf_fd), &out.of_bos[i]);
    }
    return out;
  }

  // Lists every BO in the image and hands the ones with contents to their GPU's transfer.
  Result<void> add_bos(pb::KfdImage& image, const std::vector<kfd_criu_bo_bucket>& bos, const DmabufInodes& inodes,
                       std::vector<GpuTransfer>& transfers) {
    for (std::size_t i = 0; i < bos.size(); ++i) {
      const auto& b = bos[i];
      auto* bo = image.add_bos();
      if (const std::uint64_t inode = inodes.of_bos[i]) {
        bo->set_dmabuf_inode(inode);
        if (auto it = inodes.fds_on.find(inode); it != inodes.fds_on.end()) bo->set_process_dmabuf_fds(it->second);
      }
      bo->set_gpu_id(b.gpu_id);
      bo->set_addr(b.addr);
      bo->set_size(b.size);
      bo->set_offset(b.offset);
      bo->set_alloc_flags(b.alloc_flags);
      const bool contents = (b.alloc_flags & kBoContentFlags) != 0;
      bo->set_has_contents(contents);
      if (!contents) continue;
      if (b.dmabuf_fd == kKfdInvalidFd) {
        return make_error("KFD gave no dmabuf for a VRAM/GTT BO at " + hex(b.addr), EIO);
      }
      auto it = std::find_if(transfers.begin(), transfers.end(), [&](const GpuTransfer& t) { return t.gpu_id == b.gpu_id; });
      if (it == transfers.end()) {
        return make_error("BO at " + hex(b.addr) + " belongs to gpu_id " + hex(b.gpu_id) +
                          " that is not among the process's devices", EIO);
      }
      it->bos.push_back(BoTransfer{static_cast<int>(b.dmabuf_fd), b.size, b.addr, bo_cpu_accessible(b.alloc_flags)});
    }
    return {};
  }

  Result<void> checkpoint_paused(int fd, std::uint32_t id, const ImageDir& images, kfd_ioctl_criu_args& info) {
    GPUCKPT_TRY(const KfdCheckpoint checkpoint, run_checkpoint_op(fd, info));
    GPUCKPT_TRY(const NodeInventory* node, cached_node());
    pb::KfdImage image;
    image.set_version(kImageVersion);
    image.set_pid(info.pid);
    image.set_kfd_major(kfd_version_.major);
    image.set_kfd_minor(kfd_version_.minor);
    GPUCKPT_TRY(CheckpointedGpus gpus, add_devices(image, checkpoint.devices, *node, id));
    const std::string host_pid = host_pid_for(info.pid);
    const DmabufInodes inodes = dmabuf_inodes(host_pid, checkpoint.bos);
    // Before any content moves: the queues have been paused only for PROCESS_INFO and CHECKPOINT so far.
    GPUCKPT_TRY_VOID(check_restorable(info.pid, host_pid, checkpoint.bos, inodes.of_bos, inodes.held));
    GPUCKPT_TRY_VOID(check_render_memory(info.pid, host_pid, checkpoint.bos, info.num_devices));
    GPUCKPT_TRY_VOID(add_bos(image, checkpoint.bos, inodes, gpus.transfers));
    for (const auto& t : gpus.transfers) {
      auto* file = image.add_content_files();
      file->set_gpu_id(t.gpu_id);
      file->set_name(t.file_name);
      file->set_bytes(content_bytes(t));
    }
    image.set_num_objects(info.num_objects);
    image.set_priv_data(checkpoint.priv);
    const HsakmtSharedMem shm = probe_hsakmt_shared_mem(deps_.host);
    image.set_shared_mem_size(shm.size);
    image.set_shared_mem_magic(shm.magic);
    image.set_highest_fd(highest_fd(deps_.host, host_pid));
    image.set_node_record(to_protobuf(make_record(*node, gpus.used)));

    GPUCKPT_TRY(const TransferStats moved, dump_contents(device_, images, gpus.transfers, transfer_options()));
    log::info("amd: " + std::to_string(moved.bytes) + " bytes of BO contents from " +
              std::to_string(gpus.transfers.size()) + " GPU(s) in " + std::to_string(moved.passes) + " passes");
    return images.write_framed(kfd_image_name(id), image.SerializeAsString());
  }

  // "process <KFD pid>", with the host pid where it differs (a container's PID namespace).
  static std::string process_text(std::uint32_t kfd_pid, const std::string& host_pid) {
    return "process " + std::to_string(kfd_pid) +
           (host_pid != std::to_string(kfd_pid) ? " (host pid " + host_pid + ")" : std::string());
  }

  // What KFD's CHECKPOINT does not carry would be missing after a restore with no error of its own, so a process
  // that has any of it is refused here, naming the process, the buffer and why:
  //  - a dma-buf fd that is not the dma-buf of one of its KFD BOs (imported from another process or device, or
  //    exported from a GEM BO of a render node);
  //  - a dma-buf of one of its KFD BOs that another process holds an fd on (a restore would give the two
  //    processes separate memory);
  //  - a CPU mapping of a render node at an offset that is no KFD BO's: a GEM BO allocated through the render node
  //    (libdrm, Mesa) or imported into it, which UPDATE_VMA_MAP could not map again.
  Result<void> check_restorable(std::uint32_t kfd_pid, const std::string& host_pid,
                                const std::vector<kfd_criu_bo_bucket>& bos, const std::vector<std::uint64_t>& bo_inodes,
                                const std::vector<std::uint64_t>& held_inodes) {
    const std::string who = process_text(kfd_pid, host_pid);
    const auto bo_text = [](const kfd_criu_bo_bucket& b) {
      return std::string(b.alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM ? "VRAM" : "GTT") + " BO at " + hex(b.addr) +
             " (" + std::to_string(b.size) + " bytes, gpu_id " + hex(b.gpu_id) + ")";
    };
    for (auto inode : held_inodes) {
      if (std::find(bo_inodes.begin(), bo_inodes.end(), inode) != bo_inodes.end()) continue;
      return make_error(who + " holds a dma-buf fd (inode " + std::to_string(inode) + ") that is not the dma-buf of "
                        "any of its KFD buffer objects: imported from another process or device, or exported from a "
                        "render-node GEM BO. Only dma-bufs of the process's own KFD BOs are restored; it would come "
                        "back without this buffer. Close the fd before checkpointing", ECANCELED);
    }
    std::vector<std::uint64_t> exported;
    for (auto inode : bo_inodes) {
      if (inode) exported.push_back(inode);
    }
    std::vector<AmdDevice::DmabufHolder> holders;
    if (!exported.empty()) {
      if (int err = device_.dmabuf_holders(exported, host_pid, &holders); err < 0) {
        return make_error(who + ": cannot tell whether other processes share its GPU buffers (reading /proc: " +
                          std::strerror(-err) + ")", -err);
      }
    }
    for (const auto& holder : holders) {
      const auto at = std::find(bo_inodes.begin(), bo_inodes.end(), holder.inode);
      return make_error(who + ": its " + bo_text(bos[static_cast<std::size_t>(at - bo_inodes.begin())]) +
                        " is shared as a dma-buf with process " + holder.pid + ", which holds an fd on it; a restore "
                        "would give the two processes separate copies, so dma-bufs shared between processes are "
                        "refused. Checkpoint a tree in which no other process holds its GPU buffers", ECANCELED);
    }
    auto maps = deps_.host.read_file("proc/" + host_pid + "/maps");
    if (!maps) return {};   // no /proc view of the process (its memory is dumped by CRIU all the same)
    std::size_t line_start = 0;
    while (line_start < maps->size()) {
      std::size_t line_end = maps->find('\n', line_start);
      if (line_end == std::string::npos) line_end = maps->size();
      const std::string line = maps->substr(line_start, line_end - line_start);
      line_start = line_end + 1;
      const auto path_at = line.find(" /dev/dri/renderD");
      if (path_at == std::string::npos) continue;
      unsigned long long start = 0, end = 0, offset = 0;
      if (std::sscanf(line.c_str(), "%llx-%llx %*s %llx", &start, &end, &offset) != 3) continue;
      const bool kfd_bo = std::any_of(bos.begin(), bos.end(), [&](const kfd_criu_bo_bucket& b) {
        return offset >= b.offset && offset < b.offset + b.size;
      });
      if (kfd_bo) continue;
      return make_error(who + ": its mapping of " + line.substr(path_at + 1) + " at " + hex(start) + "-" + hex(end) +
                        " (mmap offset " + hex(offset) + ") is a GEM buffer object that is not a KFD BO (allocated "
                        "or imported through the render node: libdrm, Mesa, VA-API). The backend saves only KFD BOs; "
                        "the process would come back without it", ECANCELED);
    }
    return {};
  }

  // The memory of a KFD process's render-node files (their GPU VMs, one of which KFD acquired) against what its
  // KFD BOs account for: more means GEM buffer objects the handle probe of those files could not reach (handles
  // above kGemProbeHandles), which the backend does not save. A BO may be mapped into the VM of every GPU of the
  // process (peer and system memory), so each VRAM/GTT/userptr BO is allowed once per GPU.
  Result<void> check_render_memory(std::uint32_t kfd_pid, const std::string& host_pid,
                                   const std::vector<kfd_criu_bo_bucket>& bos, std::uint32_t num_devices) {
    const std::string who = process_text(kfd_pid, host_pid);
    AmdDevice::ProcessGpuFiles files;
    if (int err = device_.process_gpu_files(host_pid, &files); err < 0) {
      return make_error(who + ": cannot read its render-node files from /proc/" + host_pid + "/fd: " +
                            std::strerror(-err) + "; refusing rather than dumping without what they may hold",
                        -err);
    }
    std::set<std::string> counted;
    std::uint64_t total = 0;
    std::uint64_t file_count = 0;
    std::string listing;
    for (const auto& file : files.render) {
      if (!is_amd_render_minor(file.render_minor)) continue;   // another vendor's node: not KFD's VM
      const DrmFileMemory memory = parse_drm_fdinfo(file.fdinfo);
      if (!memory.client_id.empty() && !counted.insert(memory.client_id).second) continue;   // a second fd on it
      const std::string name = "fd " + std::to_string(file.fd) + " on " + render_path(file.render_minor);
      if (!memory.has_memory) return make_error(who + ": its " + name + no_usage_stats(), ECANCELED);
      total += memory.bytes;
      ++file_count;
      listing += (listing.empty() ? "" : ", ") + name + ": " + std::to_string(memory.bytes);
    }
    std::uint64_t kfd_bytes = 0;
    constexpr std::uint32_t kMappable =
        KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_USERPTR;
    for (const auto& b : bos) kfd_bytes += b.size * ((b.alloc_flags & kMappable) ? std::max(num_devices, 1u) : 1u);
    const std::uint64_t allowed = kfd_bytes + kfd_bytes / kPageTableShare + file_count * kKernelBytesPerRenderFile;
    if (total <= allowed) return {};
    return make_error(who + ": the GPU VMs of its render-node files hold " + std::to_string(total) + " bytes (" +
                          listing + "; DRM usage stats of /proc/" + host_pid + "/fdinfo), " +
                          std::to_string(total - allowed) + " more than its KFD buffer objects (" +
                          std::to_string(kfd_bytes) + " bytes" +
                          (num_devices > 1 ? ", each VRAM/GTT/userptr BO counted once per GPU" : "") +
                          "), their page tables and the kernel's own per-file buffers account for: GEM buffer "
                          "objects beyond the " + std::to_string(kGemProbeHandles) + " handles probed, allocated or "
                          "imported through the render node (Mesa, VA-API, libdrm). The AMD backend saves only KFD "
                          "state; the process would come back without them. Free them before checkpointing",
                      ECANCELED);
  }

  static std::string no_usage_stats() {
    return " shows no DRM memory usage (no drm-memory-* or drm-total-* in its fdinfo; amdgpu prints them from "
           "Linux 5.19), so GEM buffer objects beyond the " + std::to_string(kGemProbeHandles) +
           " handles probed cannot be ruled out; refusing rather than risking a dump without them. Checkpoint on "
           "a kernel whose amdgpu prints them";
  }

  bool is_amd_render_minor(int minor_number) {
    auto node = cached_node();
    return node && find_render_minor(**node, minor_number) != nullptr;
  }

  // The seized process holding the DRM file `client_id`: its host pid, its fd and whether it has /dev/kfd open.
  // Empty pid when none matches.
  struct RenderOwner {
    std::string pid;
    int fd = -1;
    bool has_kfd = false;
  };
  RenderOwner render_owner(const std::string& client_id) {
    if (client_id.empty()) return {};
    for (int pid : seized_pids_) {
      AmdDevice::ProcessGpuFiles files;
      if (device_.process_gpu_files(std::to_string(pid), &files) < 0) continue;
      for (const auto& file : files.render) {
        if (parse_drm_fdinfo(file.fdinfo).client_id == client_id) {
          return RenderOwner{std::to_string(pid), file.fd, files.has_kfd};
        }
      }
    }
    return {};
  }

  // Once per dump, at the first AMD file CRIU hands a hook: every task is frozen and nothing is paused yet. Every
  // AMD render-node file of every seized process is audited through an fd on it taken with pidfd_getfd, so a
  // refusal comes before any KFD PROCESS_INFO evicts a queue, whatever order CRIU dumps the fds in. Where
  // pidfd_getfd is unavailable, each render file is audited in its own DUMP_EXT_FILE instead (still refused, but
  // a /dev/kfd dumped before it has been paused and is unpaused when the failed dump ends).
  Result<void> audit_tree_render_files() {
    if (tree_audited_) return {};
    tree_audited_ = true;
    for (int pid : seized_pids_) {
      AmdDevice::ProcessGpuFiles files;
      if (device_.process_gpu_files(std::to_string(pid), &files) < 0) continue;   // gone, or no /proc view
      for (const auto& file : files.render) {
        if (!is_amd_render_minor(file.render_minor)) continue;
        const DrmFileMemory memory = parse_drm_fdinfo(file.fdinfo);
        if (!memory.client_id.empty() && audited_files_.count(memory.client_id)) continue;
        const int taken = device_.take_process_fd(std::to_string(pid), file.fd);
        if (taken < 0) {
          log::warn("amd: cannot take process " + std::to_string(pid) + "'s fd " + std::to_string(file.fd) + " on " +
                    render_path(file.render_minor) + " (pidfd_getfd: " + std::strerror(-taken) + "); its GEM "
                    "buffer objects are looked for when CRIU dumps that fd, possibly after its GPU queues were "
                    "paused");
          continue;
        }
        OwnedFd fd(&device_, taken);
        const RenderOwner owner{std::to_string(pid), file.fd, files.has_kfd};
        GPUCKPT_TRY_VOID(audit_render_file(fd.get(), file.render_minor, owner, memory));
        if (!memory.client_id.empty()) audited_files_.insert(memory.client_id);
      }
    }
    return {};
  }

  // A render-node file of the dumped tree (the one CRIU received from the target's parasite, or one taken with
  // pidfd_getfd: either way the target's own open file, its GEM handles and VM). Anything in it is refused: the
  // backend saves no GEM state, and KFD's BOs are no GEM handles of this file (KFD keeps their handles in its own
  // DRM client). Handles are probed 1..kGemProbeHandles; beyond that the VM's memory from fdinfo must be explained
  // by the kernel's own per-file buffers, or, in a process with /dev/kfd, by its KFD BOs (checked when its
  // /dev/kfd is dumped).
  Result<void> audit_render_file(int fd, int minor_number, const RenderOwner& owner, const DrmFileMemory& memory) {
    const std::string node = render_path(minor_number);
    const std::string who = owner.pid.empty()
                                ? "the process of the dumped tree holding this file of " + node
                                : "process " + owner.pid + " (its fd " + std::to_string(owner.fd) + " on " + node + ")";
    auto probe = probe_gem_handles(device_, fd);
    if (!probe) {
      return make_error(who + ": cannot tell which GEM buffer objects it holds (" + probe.error().message +
                            "); refusing rather than dumping without them",
                        ECANCELED);
    }
    if (probe->count > 0) {
      return make_error(who + " holds " + std::to_string(probe->count) + " GEM buffer object(s) (" +
                            describe_gem_objects(*probe) + "), allocated or imported through the render node (Mesa "
                            "OpenGL/Vulkan, VA-API, libdrm's amdgpu_bo_alloc), not through KFD. The AMD backend saves "
                            "only KFD state (this kernel interface can neither list nor recreate GEM handles), so the "
                            "process would come back without them. Checkpoint it when it holds no render-node "
                            "buffers, or one that uses the GPU only through ROCm/KFD",
                        ECANCELED);
    }
    if (!memory.has_memory) return make_error(who + no_usage_stats(), ECANCELED);
    if (memory.bytes <= kKernelBytesPerRenderFile || owner.has_kfd) return {};
    return make_error(who + ": its GPU VM holds " + std::to_string(memory.bytes) + " bytes (DRM usage stats in its "
                          "fdinfo) while no GEM handle 1.." + std::to_string(kGemProbeHandles) + " exists and " +
                          (owner.pid.empty() ? std::string("no seized process with /dev/kfd holds the file")
                                             : std::string("the process has no /dev/kfd")) +
                          "; the kernel's own buffers of a render file take at most " +
                          std::to_string(kKernelBytesPerRenderFile) + " bytes. The rest are GEM buffer objects "
                          "beyond the handles probed, which the AMD backend does not save; the process would come "
                          "back without them. Free them before checkpointing",
                      ECANCELED);
  }

  // The render file CRIU hands DUMP_EXT_FILE, unless the tree audit already covered it.
  Result<void> check_render_file(int fd, int minor_number) {
    std::string text;
    const DrmFileMemory memory = device_.drm_fdinfo(fd, &text) == 0 ? parse_drm_fdinfo(text) : DrmFileMemory{};
    if (!memory.client_id.empty() && audited_files_.count(memory.client_id)) return {};
    return audit_render_file(fd, minor_number, render_owner(memory.client_id), memory);
  }

  int dump_render(int fd, const struct stat& st, std::uint32_t id) {
    auto images = image_dir();
    if (!images) return -EIO;
    auto node = cached_node();
    if (!node) return fail("render node", node.error());
    const int minor_number = static_cast<int>(minor(st.st_rdev));
    if (auto ok = check_render_file(fd, minor_number); !ok) {
      return fail("checkpoint of render node renderD" + std::to_string(minor_number), ok.error());
    }
    const GpuDevice* gpu = find_render_minor(**node, minor_number);
    pb::RenderNodeImage image;
    image.set_version(kImageVersion);
    image.set_render_minor(minor_number);
    image.set_gpu_id(gpu ? gpu->gpu_id : 0);
    image.set_inventory_id(gpu ? gpu->id : "");
    image.set_node_record(to_protobuf(make_record(**node, gpu ? std::vector<std::string>{gpu->id}
                                                              : std::vector<std::string>{})));
    if (auto r = images->write_framed(render_image_name(id), image.SerializeAsString()); !r) {
      return fail("render node renderD" + std::to_string(minor_number), r.error());
    }
    note_in_inventory();
    return 0;
  }

  // A dmabuf fd the process holds. Only dma-bufs of the process's own KFD BOs can be restored (the KFD image
  // links them by inode); anything else fails at restore with a message saying so.
  int dump_dmabuf(std::uint64_t inode, std::uint32_t id) {
    auto images = image_dir();
    if (!images) return -EIO;
    pb::DmabufImage image;
    image.set_version(kImageVersion);
    image.set_inode(inode);
    if (auto r = images->write_framed(dmabuf_image_name(id), image.SerializeAsString()); !r) {
      return fail("dmabuf fd", r.error());
    }
    return 0;
  }

  // ---- restore ------------------------------------------------------------------------------------------

  void setup_restore() {
    fd_floor_ = -1;
    worker_result_ = {};
    worker_stopped_ = false;
    bool parallel = config_.parallel_restore;
    if (parallel) {
      // More than one GPU process restores its BOs in parallel anyway, each in its own process.
      auto images = image_dir();
      const std::size_t processes = images ? images->list("gpuckpt-amd-kfd-").size() : 0;
      if (processes > 1) {
        log::info("amd: " + std::to_string(processes) +
                  " GPU processes in this tree: BO contents restore in each process, parallel offload off");
        parallel = false;
      }
    }
    if (parallel) {
      auto server = ParallelRestoreServer::create(deps_.fd_store ? &*deps_.fd_store : nullptr);
      if (server) {
        server_ = std::move(*server);
        log::info(server_->in_fd_store()
                      ? "amd: parallel restore socket kept in CRIU's fdstore for the restored processes"
                      : "amd: parallel restore socket inherited by the restored processes (no fdstore in this CRIU)");
      } else {
        log::warn("amd: " + server.error().message + "; BO contents restore in-process");
      }
    }
  }

  // Opens `path` and moves the fd above every fd the restored process will own (CRIU puts the process's own
  // fds at their checkpointed numbers; ours must not collide with them).
  Result<int> open_above(const std::string& path) {
    const int raw = device_.open(path.c_str(), O_RDWR);
    if (raw < 0) return make_error("cannot open " + path + ": " + std::strerror(-raw), -raw);
    OwnedFd tmp(&device_, raw);
    if (raw >= fd_floor_) return tmp.release();
    const int fd = device_.dup_above(raw, fd_floor_);
    if (fd < 0) return make_error("cannot move the " + path + " fd above " + std::to_string(fd_floor_), -fd);
    return fd;
  }

  void raise_fd_floor(int image_highest_fd) {
    const int self_highest = highest_fd(deps_.host, "self");
    fd_floor_ = std::max({fd_floor_, image_highest_fd + 1, self_highest + 1, 3});
  }

  Result<int> render_fd_for(int minor_number) {
    if (auto it = render_fds_.find(minor_number); it != render_fds_.end()) return it->second.get();
    GPUCKPT_TRY(const int fd, open_above(render_path(minor_number)));
    render_fds_.emplace(minor_number, OwnedFd(&device_, fd));
    return fd;
  }

  // KFD restores a process only onto as many GPUs as it had (RESTORE: num_devices must equal the process's device
  // count, which is every GPU of the topology its device cgroup lets it open). Checked here, naming both counts,
  // rather than as an EINVAL from RESTORE.
  Result<void> check_visible_gpu_count(int image_gpus) {
    GPUCKPT_TRY(const NodeInventory* node, visible_node());
    const auto& visible = node->gpus;
    if (static_cast<int>(visible.size()) == image_gpus) return {};
    std::string list;
    for (const auto& gpu : visible) list += (list.empty() ? "renderD" : ", renderD") + std::to_string(gpu.render_minor);
    return make_error("this process sees " + std::to_string(visible.size()) + " AMD GPU(s) (" +
                          (list.empty() ? std::string("none") : list) + ") and the checkpoint had " +
                          std::to_string(image_gpus) + "; KFD restores a process only onto as many GPUs as it had. "
                          "Give the container exactly " + std::to_string(image_gpus) + " AMD GPU(s)",
                      ENODEV);
  }

  Result<std::map<std::string, GpuTarget>> plan_for(const std::string& record_bytes, const std::string& source) {
    if (auto it = plan_cache_.find(record_bytes); it != plan_cache_.end()) return it->second;
    GPUCKPT_TRY(const auto record, record_from_protobuf(record_bytes, source));
    GPUCKPT_TRY(const NodeInventory* node, visible_node());
    GPUCKPT_TRY(auto plan, plan_restore(record, *node));
    plan_cache_.emplace(record_bytes, plan);
    return plan;
  }

  int restore_kfd(const ImageDir& images, std::uint32_t id, const std::string& bytes) {
    const std::string name = kfd_image_name(id);
    pb::KfdImage image;
    if (!image.ParseFromString(bytes)) {
      return fail("restore", make_error("image " + name + " is not a valid KFD image; it is damaged"));
    }
    if (image.version() != kImageVersion) {
      return fail("restore", make_error("image " + name + " has format version " + std::to_string(image.version()) +
                                         ", this plugin reads version " + std::to_string(kImageVersion)));
    }
    if (auto visible = check_visible_gpu_count(image.devices_size()); !visible) {
      return fail("restore of " + name, visible.error());
    }
    raise_fd_floor(image.highest_fd());
    auto kfd_fd = open_above(kKfdPath);
    if (!kfd_fd) return fail("restore", kfd_fd.error());
    OwnedFd kfd(&device_, *kfd_fd);
    if (auto restored = restore_process(images, id, image, kfd.get()); !restored) {
      return fail("restore of " + name, restored.error());
    }
    log::info("amd: process " + std::to_string(image.pid()) + " restored from " + name);
    return kfd.release();
  }

  // RESTORE of the process on `kfd` (a fresh /dev/kfd fd of the restored process), then its BO contents and
  // libhsakmt's shared memory.
  Result<void> restore_process(const ImageDir& images, std::uint32_t id, const pb::KfdImage& image, int kfd) {
    const std::string name = kfd_image_name(id);
    GPUCKPT_TRY(const RestoreDevices targets, restore_devices(image, name));
    std::vector<kfd_criu_bo_bucket> bos = bo_buckets(image);
    GPUCKPT_TRY_VOID(run_restore_op(kfd, image, targets.devices, bos));
    std::vector<OwnedFd> dmabufs;
    for (auto& b : bos) {
      if (b.dmabuf_fd != kKfdInvalidFd) dmabufs.emplace_back(&device_, static_cast<int>(b.dmabuf_fd));
    }
    GPUCKPT_TRY_VOID(keep_shared_dmabufs(image, bos));
    RestoreJob job;
    job.image_id = id;
    GPUCKPT_TRY(const std::vector<GpuTransfer> transfers, content_transfers(image, bos, targets.by_user_id, job));
    GPUCKPT_TRY_VOID(check_content_files(image, name, transfers));
    GPUCKPT_TRY_VOID(restore_bo_contents(images, name, transfers, std::move(job)));
    return restore_hsakmt_shared_mem(deps_.host, HsakmtSharedMem{image.shared_mem_size(), image.shared_mem_magic()});
  }

  // The image's GPUs mapped onto this node's: the device buckets RESTORE takes (with the target render fds) and
  // the target of each checkpointed user gpu_id.
  struct RestoreDevices {
    std::vector<kfd_criu_device_bucket> devices;
    std::map<std::uint32_t, GpuTarget> by_user_id;
  };

  Result<RestoreDevices> restore_devices(const pb::KfdImage& image, const std::string& name) {
    GPUCKPT_TRY(const auto plan, plan_for(image.node_record(), name));
    RestoreDevices out;
    for (const auto& d : image.devices()) {
      auto it = plan.find(d.inventory_id());
      if (it == plan.end()) return make_error("no target GPU for " + d.inventory_id(), ENODEV);
      GPUCKPT_TRY(const int render, render_fd_for(it->second.render_minor));
      kfd_criu_device_bucket bucket{};
      bucket.user_gpu_id = d.user_gpu_id();
      bucket.actual_gpu_id = it->second.gpu_id;
      bucket.drm_fd = static_cast<std::uint32_t>(render);
      out.devices.push_back(bucket);
      out.by_user_id[d.user_gpu_id()] = it->second;
      kfd_targets_[d.inventory_id()] = it->second;
    }
    return out;
  }

  static std::vector<kfd_criu_bo_bucket> bo_buckets(const pb::KfdImage& image) {
    std::vector<kfd_criu_bo_bucket> bos;
    for (const auto& b : image.bos()) {
      kfd_criu_bo_bucket bucket{};
      bucket.gpu_id = b.gpu_id();
      bucket.addr = b.addr();
      bucket.size = b.size();
      bucket.offset = b.offset();
      bucket.alloc_flags = b.alloc_flags();
      bos.push_back(bucket);
    }
    return bos;
  }

  // KFD's RESTORE; it fills in each BO's dmabuf fd and restored mmap offset.
  Result<void> run_restore_op(int kfd, const pb::KfdImage& image, const std::vector<kfd_criu_device_bucket>& devices,
                              std::vector<kfd_criu_bo_bucket>& bos) {
    std::string priv = image.priv_data();
    kfd_ioctl_criu_args args{};
    args.devices = reinterpret_cast<std::uintptr_t>(devices.data());
    kfd_criu_bo_bucket no_bos{};
    args.bos = reinterpret_cast<std::uintptr_t>(bos.empty() ? &no_bos : bos.data());
    args.priv_data = reinterpret_cast<std::uintptr_t>(priv.data());
    args.priv_data_size = priv.size();
    args.num_devices = static_cast<std::uint32_t>(devices.size());
    args.num_bos = static_cast<std::uint32_t>(bos.size());
    args.num_objects = image.num_objects();
    auto r = kfd_criu_op(device_, kfd, args, KFD_CRIU_OP_RESTORE);
    if (r) return {};
    if (bos.empty() && r.error().errno_value == EINVAL) {
      // criu_restore refused num_bos == 0 until the kernel's fix ("Allow restore of processes with no BOs").
      return make_error(r.error().message + ": the checkpointed process had no GPU buffer objects, and this "
                        "node's KFD refuses RESTORE without any (older kernels reject num_bos == 0); restore "
                        "on a node whose amdkfd accepts it, or checkpoint the process once it has allocated "
                        "GPU memory",
                        EINVAL);
    }
    return make_error(r.error().message + " (the process must be fresh, and see it as many GPUs as it had at "
                      "checkpoint: " + std::to_string(devices.size()) + ")",
                      r.error().errno_value);
  }

  // dma-bufs the process held fds on: keep one fd each (above the floor) until their images are restored.
  Result<void> keep_shared_dmabufs(const pb::KfdImage& image, const std::vector<kfd_criu_bo_bucket>& bos) {
    for (std::size_t i = 0; i < bos.size(); ++i) {
      const auto& saved = image.bos(static_cast<int>(i));
      if (saved.process_dmabuf_fds() == 0 || bos[i].dmabuf_fd == kKfdInvalidFd) continue;
      const int kept = device_.dup_above(static_cast<int>(bos[i].dmabuf_fd), fd_floor_);
      if (kept < 0) return make_error("cannot keep a dmabuf fd", -kept);
      shared_dmabufs_[saved.dmabuf_inode()] = SharedDmabuf{OwnedFd(&device_, kept), saved.process_dmabuf_fds()};
    }
    return {};
  }

  // One content transfer per GPU of the image (onto its target render node, also named in `job` for the parallel
  // worker), holding the restored BOs with contents; the VMA offsets of mapped BOs are noted for UPDATE_VMA_MAP.
  Result<std::vector<GpuTransfer>> content_transfers(const pb::KfdImage& image,
                                                     const std::vector<kfd_criu_bo_bucket>& bos,
                                                     const std::map<std::uint32_t, GpuTarget>& by_user_id,
                                                     RestoreJob& job) {
    std::vector<GpuTransfer> transfers;
    for (const auto& d : image.devices()) {
      GpuTransfer t;
      t.gpu_id = d.user_gpu_id();
      t.file_name = bo_content_image_name(job.image_id, d.user_gpu_id());
      const GpuTarget& target = by_user_id.at(d.user_gpu_id());
      t.render_fd = render_fds_.at(target.render_minor).get();
      transfers.push_back(std::move(t));
      job.render_minors.push_back(target.render_minor);
    }
    for (const auto& b : bos) {
      auto target = by_user_id.find(b.gpu_id);
      if (target == by_user_id.end()) {
        return make_error("a BO belongs to gpu_id " + hex(b.gpu_id) +
                          ", which is not among the image's devices; the image is damaged");
      }
      if (b.alloc_flags & kBoMappedFlags) {
        vma_updates_.push_back(
            VmaUpdate{b.addr, b.offset, b.restored_offset, render_fds_.at(target->second.render_minor).get()});
      }
      if (!(b.alloc_flags & kBoContentFlags)) continue;
      if (b.dmabuf_fd == kKfdInvalidFd) return make_error("KFD gave no dmabuf for a restored VRAM/GTT BO", EIO);
      auto it = std::find_if(transfers.begin(), transfers.end(), [&](const GpuTransfer& t) { return t.gpu_id == b.gpu_id; });
      if (it == transfers.end()) return make_error("BO on unknown gpu_id " + hex(b.gpu_id));
      it->bos.push_back(BoTransfer{static_cast<int>(b.dmabuf_fd), b.size, b.addr, bo_cpu_accessible(b.alloc_flags)});
    }
    return transfers;
  }

  static Result<void> check_content_files(const pb::KfdImage& image, const std::string& name,
                                          const std::vector<GpuTransfer>& transfers) {
    for (const auto& file : image.content_files()) {
      auto it = std::find_if(transfers.begin(), transfers.end(), [&](const GpuTransfer& t) { return t.gpu_id == file.gpu_id(); });
      if (it == transfers.end() || content_bytes(*it) != file.bytes()) {
        return make_error("image " + name + " lists " + std::to_string(file.bytes()) + " content bytes for GPU " +
                          hex(file.gpu_id()) + " that its BO list does not add up to; the image is damaged");
      }
    }
    return {};
  }

  // Hands the contents to the parallel restore worker where there is one, else restores them here.
  Result<void> restore_bo_contents(const ImageDir& images, const std::string& name,
                                   const std::vector<GpuTransfer>& transfers, RestoreJob job) {
    if (server_) {
      job.gpus = transfers;
      auto sent = server_->send_job(job);
      if (sent) {
        log::info("amd: BO contents of " + name + " handed to the parallel restore worker");
        return {};
      }
      log::warn("amd: " + sent.error().message + "; restoring BO contents in-process");
    }
    GPUCKPT_TRY(const TransferStats moved, restore_contents(device_, images, transfers, transfer_options()));
    log::info("amd: " + std::to_string(moved.bytes) + " bytes of BO contents restored in " +
              std::to_string(moved.passes) + " passes");
    return {};
  }

  // Whether a KFD image in the directory lists `inventory_id` among its devices.
  static bool kfd_image_uses(const ImageDir& images, const std::string& inventory_id) {
    for (const auto& file : images.list("gpuckpt-amd-kfd-")) {
      auto bytes = images.read_framed(file);
      pb::KfdImage kfd;
      if (!bytes || !kfd.ParseFromString(*bytes)) continue;
      for (const auto& d : kfd.devices()) {
        if (d.inventory_id() == inventory_id) return true;
      }
    }
    return false;
  }

  int restore_render(const ImageDir& images, std::uint32_t id, const std::string& bytes, bool* retry_needed) {
    const std::string name = render_image_name(id);
    pb::RenderNodeImage image;
    if (!image.ParseFromString(bytes) || image.version() != kImageVersion) {
      return fail("restore", make_error("image " + name + " is damaged or of an unknown version"));
    }
    int minor_number = image.render_minor();
    if (!image.inventory_id().empty()) {
      if (auto it = kfd_targets_.find(image.inventory_id()); it != kfd_targets_.end()) {
        // The process's KFD image chose the GPUs: its render nodes follow that choice.
        minor_number = it->second.render_minor;
      } else if (retry_needed && kfd_image_uses(images, image.inventory_id())) {
        // That KFD image is not restored yet; deciding alone could pick another GPU than it will.
        *retry_needed = true;
        return 0;
      } else {
        // A render node without KFD: this image's own record decides.
        auto plan = plan_for(image.node_record(), name);
        if (!plan) return fail("restore of " + name, plan.error());
        auto target = plan->find(image.inventory_id());
        if (target == plan->end()) {
          return fail("restore of " + name, make_error("no target GPU for " + image.inventory_id(), ENODEV));
        }
        minor_number = target->second.render_minor;
      }
    }
    raise_fd_floor(-1);
    auto kept = render_fd_for(minor_number);
    if (!kept) return fail("restore of " + name, kept.error());
    // CRIU installs (and later closes) what we return; the kept fd stays ours for UPDATE_VMA_MAP.
    const int fd = device_.dup_above(*kept, fd_floor_);
    if (fd < 0) return fail("restore of " + name, make_error("cannot duplicate the render-node fd", -fd));
    return fd;
  }

  int restore_dmabuf(std::uint32_t id, const std::string& bytes, bool* retry_needed) {
    const std::string name = dmabuf_image_name(id);
    pb::DmabufImage image;
    if (!image.ParseFromString(bytes) || image.version() != kImageVersion) {
      return fail("restore", make_error("image " + name + " is damaged or of an unknown version"));
    }
    auto it = shared_dmabufs_.find(image.inode());
    if (it == shared_dmabufs_.end()) {
      if (retry_needed) {
        // Its BO comes back with the process's KFD image, which CRIU has not restored yet.
        *retry_needed = true;
        return 0;
      }
      return fail("restore of " + name,
                  make_error("the dmabuf's buffer object is not among this process's restored KFD BOs (a dma-buf "
                             "from another process or device cannot be restored yet; see docs/amd.md)", ENOTSUP));
    }
    // The last reference hands our kept fd to CRIU; earlier ones get duplicates.
    if (--it->second.references == 0) {
      const int fd = it->second.fd.release();
      shared_dmabufs_.erase(it);
      return fd;
    }
    const int fd = device_.dup_above(it->second.fd.get(), fd_floor_);
    if (fd < 0) return fail("restore of " + name, make_error("cannot duplicate the dmabuf fd", -fd));
    return fd;
  }

  struct SharedDmabuf {
    OwnedFd fd;
    std::uint32_t references;
  };

  AmdBackendDeps deps_;
  AmdDevice& device_;
  AmdConfig config_;
  int stage_ = criu::kStageDump;
  bool enabled_ = false;
  bool in_inventory_ = false;
  dev_t kfd_rdev_ = 0;
  KfdVersion kfd_version_;
  std::optional<NodeInventory> node_;
  std::optional<NodeInventory> visible_node_;   // node_'s GPUs the restored process may open
  std::vector<int> seized_pids_;   // PAUSE_DEVICES, host pids
  bool tree_audited_ = false;               // audit_tree_render_files ran in this dump
  std::set<std::string> audited_files_;     // drm-client-ids of render files found holding nothing of ours
  struct PausedProcess {
    OwnedFd kfd;         // a duplicate of the /dev/kfd fd CRIU handed DUMP_EXT_FILE
    std::uint32_t pid;   // KFD's pid of the process, for the log
  };
  std::vector<PausedProcess> paused_;   // checkpointed, queues paused until the memory is dumped
  std::map<std::string, unsigned> retries_;   // RESTORE_EXT_FILE retries asked for, by image name

  // Restored-process side (RESTORE_EXT_FILE, UPDATE_VMA_MAP).
  int fd_floor_ = -1;
  std::map<int, OwnedFd> render_fds_;   // by render minor on this node
  std::vector<VmaUpdate> vma_updates_;
  std::map<std::uint64_t, SharedDmabuf> shared_dmabufs_;   // by dma-buf inode at checkpoint
  std::map<std::string, std::map<std::string, GpuTarget>> plan_cache_;   // by stored record
  std::map<std::string, GpuTarget> kfd_targets_;   // the KFD images' choices, by source inventory id

  // Main CRIU process side (POST_FORKING, RESUME_DEVICES_LATE).
  std::unique_ptr<ParallelRestoreServer> server_;
  Result<void> worker_result_;
  bool worker_stopped_ = false;
};

}  // namespace

std::unique_ptr<plugin::Backend> make_amd_backend(AmdBackendDeps deps) {
  return std::make_unique<AmdBackend>(std::move(deps));
}

}  // namespace gpuckpt::amd
