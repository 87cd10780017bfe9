#include "test/amd/sim/sim_kfd.h"

#include <fcntl.h>
#include <amdgpu_drm.h>
#include <dirent.h>
#include <linux/kfd_ioctl.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace gpuckpt::amd::sim {
namespace {

// The simulation's private-data layout. KFD's is opaque to user space; only its size and the object_type
// word at the start of every object are part of the contract (kfd_chardev.c, criu_restore_objects).
constexpr std::uint32_t kPrivVersion = 0x5eed0001;
constexpr std::uint64_t kProcessPriv = 8;    // version, xnack
constexpr std::uint64_t kDevicePriv = 8;     // reserved
constexpr std::uint64_t kBoPriv = 16;        // idr_handle, pad, user_addr
constexpr std::uint64_t kQueuePriv = 24;     // object_type 0, gpu_id, queue id, ring size
constexpr std::uint64_t kEventPriv = 8;      // object_type 1, event id
constexpr std::uint32_t kObjectQueue = 0;
constexpr std::uint32_t kObjectEvent = 1;
constexpr std::uint32_t kObjectSvmRange = 2;
constexpr std::uint64_t kSvmPrivHeader = 24;   // object_type 2, attribute count, start, size; then 8 per attribute
constexpr std::uint32_t kInvalidFd = 0xffffffffu;
constexpr std::uint64_t kMmapTypeDoorbell = 0x3ull << 62;   // kfd_priv.h KFD_MMAP_TYPE_*
constexpr std::uint64_t kMmapTypeMmio = 0x0ull << 62;
constexpr std::uint64_t kPageSize = 4096;

template <class T>
void put(std::uint8_t* base, std::uint64_t& offset, T value) {
  std::memcpy(base + offset, &value, sizeof value);
  offset += sizeof value;
}

template <class T>
T get(const std::uint8_t* base, std::uint64_t& offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof value);
  offset += sizeof value;
  return value;
}

std::uint8_t pattern_byte(std::uint32_t seed, std::uint64_t i) {
  std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(seed) << 17);
  x ^= x >> 29;
  return static_cast<std::uint8_t>(x);
}

}  // namespace

SimKfd::SimKfd(std::vector<SimGpu> gpus, std::uint32_t kfd_major, std::uint32_t kfd_minor)
    : gpus_(std::move(gpus)), kfd_major_(kfd_major), kfd_minor_(kfd_minor) {}

// The SDMA engine: copies between a BO and host memory whatever the BO's CPU access, as the GPU's DMA engine does.
class SimSdmaCopier final : public BoCopier {
 public:
  explicit SimSdmaCopier(SimKfd& kfd) : kfd_(kfd) {}
  const char* name() const override { return "sdma"; }
  Result<void> read(int dmabuf_fd, std::uint64_t offset, void* dst, std::size_t count) override {
    int mem = -1;
    bool cpu_access = false;
    if (int err = kfd_.dmabuf_target(dmabuf_fd, offset, count, &mem, &cpu_access)) return failed("read", -err);
    if (::pread(mem, dst, count, static_cast<off_t>(offset)) != static_cast<ssize_t>(count)) return failed("read", EIO);
    moved(count);
    return {};
  }
  Result<void> write(int dmabuf_fd, std::uint64_t offset, const void* src, std::size_t count) override {
    int mem = -1;
    bool cpu_access = false;
    if (int err = kfd_.dmabuf_target(dmabuf_fd, offset, count, &mem, &cpu_access)) return failed("write", -err);
    if (::pwrite(mem, src, count, static_cast<off_t>(offset)) != static_cast<ssize_t>(count)) return failed("write", EIO);
    moved(count);
    return {};
  }

 private:
  static Error failed(const char* what, int err) {
    return make_error(std::string("simulated SDMA ") + what + " failed: " + std::strerror(err), err);
  }
  void moved(std::size_t count) {
    kfd_.count_transfer(count);
    kfd_.sdma_bytes_ += count;
  }

  SimKfd& kfd_;
};

SimKfd::~SimKfd() {
  for (auto& [pid, p] : processes_) {
    for (auto& bo : p.bos) {
      if (bo.mem_fd >= 0) ::close(bo.mem_fd);
    }
  }
}

void SimKfd::fail_next(std::uint32_t op, int errno_value) {
  std::lock_guard lock(mutex_);
  fail_next_[op] = errno_value;
}

void SimKfd::seize(int pid, int tracer) {
  std::lock_guard lock(mutex_);
  tracer_[pid] = tracer;
}

void SimKfd::set_capable(int pid, bool capable) {
  std::lock_guard lock(mutex_);
  capable_[pid] = capable;
}

void SimKfd::set_sdma_available(bool available, std::string reason) {
  std::lock_guard lock(mutex_);
  sdma_available_ = available;
  sdma_missing_reason_ = std::move(reason);
}

int SimKfd::injected_failure(std::uint32_t op) {
  auto it = fail_next_.find(op);
  if (it == fail_next_.end()) return 0;
  const int err = it->second;
  fail_next_.erase(it);
  return -err;
}

void SimKfd::set_visible_gpus(int pid, std::vector<std::uint32_t> gpu_ids) {
  std::lock_guard lock(mutex_);
  visible_[pid] = std::move(gpu_ids);
}

const SimGpu* SimKfd::gpu_by_id(std::uint32_t gpu_id) const {
  for (const auto& g : gpus_) {
    if (g.gpu_id == gpu_id) return &g;
  }
  return nullptr;
}

const SimGpu* SimKfd::gpu_by_minor(int minor) const {
  for (const auto& g : gpus_) {
    if (g.render_minor == minor) return &g;
  }
  return nullptr;
}

int SimKfd::new_file(const SimFile& file, const char* name) {
  const int fd = ::memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -errno;
  struct stat st {};
  ::fstat(fd, &st);
  files_[st.st_ino] = file;
  return fd;
}

const SimKfd::SimFile* SimKfd::lookup(int fd) const {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return nullptr;
  auto it = files_.find(st.st_ino);
  return it == files_.end() ? nullptr : &it->second;
}

SimKfd::SimFile* SimKfd::lookup(int fd) {
  return const_cast<SimFile*>(static_cast<const SimKfd*>(this)->lookup(fd));
}

SimProcess* SimKfd::find_process(int pid) {
  auto it = processes_.find(pid);
  return it == processes_.end() ? nullptr : &it->second;
}

SimProcess& SimKfd::process_for_open(int pid) {
  if (SimProcess* p = find_process(pid)) return *p;
  SimProcess p;
  p.pid = pid;
  auto vis = visible_.find(pid);
  for (const auto& g : gpus_) {
    if (vis != visible_.end() && std::find(vis->second.begin(), vis->second.end(), g.gpu_id) == vis->second.end()) {
      continue;
    }
    p.pdds.push_back(SimPdd{g.gpu_id, g.gpu_id, false});
  }
  return processes_.emplace(pid, std::move(p)).first->second;
}

SimBo SimKfd::make_bo(std::uint32_t user_gpu_id, std::uint64_t va, std::uint64_t size, std::uint32_t flags,
                      std::uint32_t idr_handle, std::uint64_t user_addr) {
  SimBo bo;
  bo.user_addr = (flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR) ? user_addr : 0;
  bo.va = va;
  bo.size = size;
  bo.flags = flags;
  bo.user_gpu_id = user_gpu_id;
  bo.idr_handle = idr_handle;
  if (flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL) {
    bo.mmap_offset = kMmapTypeDoorbell | (static_cast<std::uint64_t>(user_gpu_id) << 46);
  } else if (flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP) {
    bo.mmap_offset = kMmapTypeMmio | (static_cast<std::uint64_t>(user_gpu_id) << 46);
  } else {
    bo.mmap_offset = next_mmap_offset_;
    next_mmap_offset_ += (size + 0xfff) & ~0xfffull;
  }
  if (flags & (KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_GTT)) {
    char name[64];
    std::snprintf(name, sizeof name, "sim-bo:%x:%llx", flags, static_cast<unsigned long long>(size));
    bo.mem_fd = ::memfd_create(name, MFD_CLOEXEC);
    if (bo.mem_fd < 0 || ::ftruncate(bo.mem_fd, static_cast<off_t>(size)) != 0) {
      throw std::runtime_error("sim: cannot create BO memory");
    }
  }
  return bo;
}

// A dma-buf of a BO is its memory file: every export shares its inode, as the BO's cached dma-buf does.
int SimKfd::export_dmabuf(const SimBo& bo) {
  const int fd = ::fcntl(bo.mem_fd, F_DUPFD_CLOEXEC, 0);
  return fd < 0 ? -errno : fd;
}

bool SimKfd::parse_bo_name(int fd, std::uint32_t* flags, std::uint64_t* size) {
  char link[128];
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = '\0';
  unsigned long long bytes = 0;
  unsigned int bo_flags = 0;
  if (std::sscanf(link, "/memfd:sim-bo:%x:%llx", &bo_flags, &bytes) != 2) return false;
  *flags = bo_flags;
  *size = bytes;
  return true;
}

// ---- application side -------------------------------------------------------------------------------------

int SimKfd::app_open_kfd(int pid) {
  const int saved = calling_pid_;
  calling_pid_ = pid;
  const int fd = open("/dev/kfd", O_RDWR);
  calling_pid_ = saved;
  return fd;
}

int SimKfd::app_open_render(int pid, int render_minor) {
  const int saved = calling_pid_;
  calling_pid_ = pid;
  const std::string path = "/dev/dri/renderD" + std::to_string(render_minor);
  const int fd = open(path.c_str(), O_RDWR);
  calling_pid_ = saved;
  std::lock_guard lock(mutex_);
  if (SimProcess* p = find_process(pid)) {
    for (auto& pdd : p->pdds) {
      const SimGpu* g = gpu_by_id(pdd.actual_gpu_id);
      if (g && g->render_minor == render_minor) {
        pdd.vm_bound = true;
        struct stat st {};
        if (pdd.drm_file == 0 && fd >= 0 && ::fstat(fd, &st) == 0) pdd.drm_file = st.st_ino;
      }
    }
  }
  return fd;
}

void SimKfd::app_alloc_bo(int pid, std::uint32_t gpu_id, std::uint64_t va, std::uint64_t size, std::uint32_t flags,
                          std::uint64_t user_addr) {
  std::lock_guard lock(mutex_);
  SimProcess* p = find_process(pid);
  if (!p) throw std::logic_error("sim: process has not opened /dev/kfd");
  const bool known = std::any_of(p->pdds.begin(), p->pdds.end(), [&](const SimPdd& d) { return d.user_gpu_id == gpu_id; });
  if (!known) throw std::logic_error("sim: BO on a GPU the process does not see");
  p->bos.push_back(make_bo(gpu_id, va, size, flags, static_cast<std::uint32_t>(p->bos.size() + 1), user_addr));
}

void SimKfd::app_fill_bo(int pid, std::uint64_t va, std::uint32_t seed) {
  std::lock_guard lock(mutex_);
  SimProcess* p = find_process(pid);
  for (auto& bo : p->bos) {
    if (bo.va != va) continue;
    std::vector<std::uint8_t> data(bo.size);
    for (std::uint64_t i = 0; i < bo.size; ++i) data[i] = pattern_byte(seed, i);
    if (::pwrite(bo.mem_fd, data.data(), data.size(), 0) != static_cast<ssize_t>(data.size())) {
      throw std::runtime_error("sim: fill failed");
    }
  }
}

std::vector<std::uint8_t> SimKfd::app_read_bo(int pid, std::uint64_t va) {
  std::lock_guard lock(mutex_);
  SimProcess* p = find_process(pid);
  if (!p) return {};
  for (auto& bo : p->bos) {
    if (bo.va != va || bo.mem_fd < 0) continue;
    std::vector<std::uint8_t> data(bo.size);
    if (::pread(bo.mem_fd, data.data(), data.size(), 0) != static_cast<ssize_t>(data.size())) return {};
    return data;
  }
  return {};
}

int SimKfd::app_export_dmabuf(int pid, std::uint64_t va) {
  std::lock_guard lock(mutex_);
  SimProcess* p = find_process(pid);
  for (const auto& bo : p->bos) {
    if (bo.va == va && bo.mem_fd >= 0) {
      const int fd = export_dmabuf(bo);
      app_dmabufs_[pid].push_back(fd);
      return fd;
    }
  }
  throw std::logic_error("sim: no VRAM/GTT BO at that VA");
}

int SimKfd::app_share_dmabuf(int owner_pid, std::uint64_t va, int holder_pid) {
  std::lock_guard lock(mutex_);
  SimProcess* p = find_process(owner_pid);
  for (const auto& bo : p->bos) {
    if (bo.va == va && bo.mem_fd >= 0) {
      const int fd = export_dmabuf(bo);
      app_dmabufs_[holder_pid].push_back(fd);
      return fd;
    }
  }
  throw std::logic_error("sim: no VRAM/GTT BO at that VA");
}

void SimKfd::app_create_queue(int pid, std::uint32_t gpu_id) {
  std::lock_guard lock(mutex_);
  find_process(pid)->queues.push_back(gpu_id);
}

void SimKfd::app_set_svm_range(int pid, const SimSvmRange& range) {
  std::lock_guard lock(mutex_);
  find_process(pid)->svm_ranges.push_back(range);
}

std::uint32_t SimKfd::app_gem_create(int pid, int render_fd, std::uint64_t size, std::uint64_t domains) {
  const int saved = calling_pid_;
  calling_pid_ = pid;
  drm_amdgpu_gem_create args{};
  args.in.bo_size = size;
  args.in.alignment = 4096;
  args.in.domains = domains;
  const int err = ioctl(render_fd, DRM_IOCTL_AMDGPU_GEM_CREATE, &args);
  calling_pid_ = saved;
  if (err != 0) throw std::logic_error("sim: GEM_CREATE failed");
  return args.out.handle;
}

void SimKfd::app_gem_close(int pid, int render_fd, std::uint32_t handle) {
  const int saved = calling_pid_;
  calling_pid_ = pid;
  drm_gem_close args{};
  args.handle = handle;
  const int err = ioctl(render_fd, DRM_IOCTL_GEM_CLOSE, &args);
  calling_pid_ = saved;
  if (err != 0) throw std::logic_error("sim: GEM_CLOSE of a handle the file does not have");
}

void SimKfd::app_create_events(int pid, std::uint32_t count) {
  std::lock_guard lock(mutex_);
  find_process(pid)->events += count;
}

SimCheckpoint SimKfd::checkpoint_for_test(int kfd_fd) {
  {
    std::lock_guard lock(mutex_);
    if (const SimFile* f = lookup(kfd_fd)) tracer_[f->owner_pid] = calling_pid_;   // CRIU seizes first
  }
  SimCheckpoint c;
  c.args.op = KFD_CRIU_OP_PROCESS_INFO;
  if ((c.result = ioctl(kfd_fd, AMDKFD_IOC_CRIU_OP, &c.args)) != 0) return c;
  c.devices.resize(c.args.num_devices);
  c.bos.resize(c.args.num_bos);
  c.priv.resize(c.args.priv_data_size);
  c.args.devices = reinterpret_cast<std::uintptr_t>(c.devices.data());
  c.args.bos = reinterpret_cast<std::uintptr_t>(c.bos.data());
  c.args.priv_data = reinterpret_cast<std::uintptr_t>(c.priv.data());
  c.args.op = KFD_CRIU_OP_CHECKPOINT;
  c.result = ioctl(kfd_fd, AMDKFD_IOC_CRIU_OP, &c.args);
  return c;
}

void SimKfd::kill(int pid) {
  std::lock_guard lock(mutex_);
  if (SimProcess* p = find_process(pid)) {
    for (auto& bo : p->bos) {
      if (bo.mem_fd >= 0) ::close(bo.mem_fd);
    }
    processes_.erase(pid);
  }
  tracer_.erase(pid);
  for (int fd : app_dmabufs_[pid]) ::close(fd);
  app_dmabufs_.erase(pid);
}

bool SimKfd::app_mmap_allowed(int pid, int fd, std::uint64_t offset) const {
  std::lock_guard lock(mutex_);
  const SimFile* file = lookup(fd);
  struct stat st {};
  if (file == nullptr || file->kind != Kind::Render || ::fstat(fd, &st) != 0) return false;
  auto it = processes_.find(pid);
  if (it == processes_.end()) return false;
  const SimProcess& p = it->second;
  for (const SimBo& bo : p.bos) {
    if (bo.mmap_offset != offset) continue;
    for (const SimPdd& pdd : p.pdds) {
      const SimGpu* gpu = gpu_by_id(pdd.actual_gpu_id);
      if (pdd.user_gpu_id == bo.user_gpu_id && gpu && gpu->render_minor == file->render_minor)
        return pdd.drm_file == st.st_ino;
    }
  }
  return false;
}

bool SimKfd::has_process(int pid) const {
  std::lock_guard lock(mutex_);
  return processes_.count(pid) != 0;
}

SimProcess SimKfd::process(int pid) const {
  std::lock_guard lock(mutex_);
  auto it = processes_.find(pid);
  return it == processes_.end() ? SimProcess{} : it->second;
}

// ---- the seam ---------------------------------------------------------------------------------------------

int SimKfd::open(const char* path, int /*flags*/) {
  std::lock_guard lock(mutex_);
  const std::string p(path);
  if (p == "/dev/kfd") {
    if (gpus_.empty()) return -ENOENT;
    process_for_open(calling_pid_);
    return new_file(SimFile{Kind::Kfd, calling_pid_, -1, {}, {}, 1}, "sim-kfd");
  }
  const std::string prefix = "/dev/dri/renderD";
  if (p.rfind(prefix, 0) == 0) {
    const int minor = std::atoi(p.c_str() + prefix.size());
    const SimGpu* gpu = gpu_by_minor(minor);
    if (!gpu) return -ENOENT;
    // The device cgroup: a render node of a GPU the process was not given cannot be opened.
    if (auto vis = visible_.find(calling_pid_);
        vis != visible_.end() && std::find(vis->second.begin(), vis->second.end(), gpu->gpu_id) == vis->second.end()) {
      return -EPERM;
    }
    return new_file(SimFile{Kind::Render, calling_pid_, minor, {}, {}, 1}, "sim-render");
  }
  return -ENOENT;
}

int SimKfd::close(int fd) { return ::close(fd) < 0 ? -errno : 0; }

int SimKfd::stat(const char* path, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  const std::string p(path);
  if (p == "/dev/kfd" && !gpus_.empty()) {
    st->st_mode = S_IFCHR | 0666;
    st->st_rdev = makedev(kKfdMajorNumber, 0);
    return 0;
  }
  const std::string prefix = "/dev/dri/renderD";
  if (p.rfind(prefix, 0) == 0 && gpu_by_minor(std::atoi(p.c_str() + prefix.size()))) {
    st->st_mode = S_IFCHR | 0666;
    st->st_rdev = makedev(226, static_cast<unsigned>(std::atoi(p.c_str() + prefix.size())));
    return 0;
  }
  return -ENOENT;
}

int SimKfd::fstat(int fd, struct stat* st) {
  if (::fstat(fd, st) != 0) return -errno;
  std::lock_guard lock(mutex_);
  const SimFile* f = lookup(fd);
  if (!f) return 0;
  if (f->kind == Kind::Kfd) {
    st->st_mode = S_IFCHR | 0666;
    st->st_rdev = makedev(kKfdMajorNumber, 0);
  } else if (f->kind == Kind::Render) {
    st->st_mode = S_IFCHR | 0666;
    st->st_rdev = makedev(226, static_cast<unsigned>(f->render_minor));
  }
  return 0;
}

int SimKfd::dup_above(int fd, int min_fd) {
  const int ret = ::fcntl(fd, F_DUPFD_CLOEXEC, min_fd);
  return ret < 0 ? -errno : ret;
}

int SimKfd::ioctl(int fd, unsigned long request, void* arg) {
  std::lock_guard lock(mutex_);
  const SimFile* f = lookup(fd);
  if (f && f->kind == Kind::Render) return drm_ioctl(*lookup(fd), request, arg);
  if (!f || f->kind != Kind::Kfd) return -ENOTTY;
  if (request == AMDKFD_IOC_GET_VERSION) {
    if (f->owner_pid != calling_pid_) return -EBADF;   // only the process that opened /dev/kfd
    auto* args = static_cast<kfd_ioctl_get_version_args*>(arg);
    args->major_version = kfd_major_;
    args->minor_version = kfd_minor_;
    return 0;
  }
  if (request == AMDKFD_IOC_CRIU_OP) {
    if (kfd_major_ != 1 || kfd_minor_ < 7) return -ENOTTY;   // no CRIU ioctls before 1.7
    // kfd_ioctl: another process's fd only for its ptrace parent, then the capability check.
    if (f->owner_pid != calling_pid_) {
      auto tracer = tracer_.find(f->owner_pid);
      if (tracer == tracer_.end() || tracer->second != calling_pid_) return -EBADF;
    }
    if (auto cap = capable_.find(calling_pid_); cap != capable_.end() && !cap->second) return -EACCES;
    auto& args = *static_cast<kfd_ioctl_criu_args*>(arg);
    if (int err = injected_failure(args.op)) return err;
    return criu_op(*f, args);
  }
  return -ENOTTY;
}

// DRM ioctls of a render-node file: no caller check (a render node's ioctls are allowed to whoever holds the file,
// DRM_RENDER_ALLOW), one GEM handle table per open file.
int SimKfd::drm_ioctl(SimFile& file, unsigned long request, void* arg) {
  if (request == DRM_IOCTL_AMDGPU_GEM_CREATE) {
    auto& args = *static_cast<drm_amdgpu_gem_create*>(arg);
    if (args.in.bo_size == 0) return -EINVAL;
    // idr_alloc(&object_idr, obj, 1, 0, ...): the lowest free handle from 1.
    std::uint32_t handle = file.gem_next;
    if (!file.gem_holes.empty()) {
      handle = *file.gem_holes.begin();
      file.gem_holes.erase(file.gem_holes.begin());
    } else {
      ++file.gem_next;
    }
    file.gem[handle] = SimGem{args.in.bo_size, args.in.alignment, args.in.domains, args.in.domain_flags};
    args.out.handle = handle;
    args.out._pad = 0;
    return 0;
  }
  if (request == DRM_IOCTL_GEM_CLOSE) {
    auto& args = *static_cast<drm_gem_close*>(arg);
    if (!file.gem.erase(args.handle)) return -EINVAL;   // drm_gem_handle_delete: no such handle
    file.gem_holes.insert(args.handle);
    return 0;
  }
  if (request == DRM_IOCTL_AMDGPU_GEM_OP) {
    auto& args = *static_cast<drm_amdgpu_gem_op*>(arg);
    auto it = file.gem.find(args.handle);
    if (it == file.gem.end()) return -ENOENT;   // drm_gem_object_lookup found nothing
    if (args.op != AMDGPU_GEM_OP_GET_GEM_CREATE_INFO) return -EINVAL;
    drm_amdgpu_gem_create_in info{};
    info.bo_size = it->second.size;
    info.alignment = it->second.alignment;
    info.domains = it->second.domains;
    info.domain_flags = it->second.flags;
    std::memcpy(reinterpret_cast<void*>(static_cast<std::uintptr_t>(args.value)), &info, sizeof info);
    return 0;
  }
  return -ENOTTY;
}

std::string SimKfd::render_fdinfo(ino_t ino) const {
  constexpr std::uint64_t kPageTable = 4096;        // one page table per 2 MiB of mapped VA
  constexpr std::uint64_t kKfdReserved = 3 * 4096;  // CWSR TBA/TMA (2 pages) and the IB page, below gpuvm_base
  const auto it = files_.find(ino);
  std::uint64_t vram = kPageTable;   // the VM's root page directory
  std::uint64_t gtt = 0;
  for (const auto& [handle, gem] : it->second.gem) ((gem.domains & AMDGPU_GEM_DOMAIN_VRAM) ? vram : gtt) += gem.size;
  for (const auto& [pid, p] : processes_) {
    for (const auto& pdd : p.pdds) {
      if (pdd.drm_file != ino) continue;
      gtt += kKfdReserved;
      for (const auto& bo : p.bos) {
        if (bo.user_gpu_id != pdd.user_gpu_id) continue;
        ((bo.flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM) ? vram : gtt) += bo.size;
        vram += kPageTable * ((bo.size + (2u << 20) - 1) / (2u << 20));
      }
    }
  }
  std::string text = "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t" + std::to_string(ino) +
                     "\ndrm-driver:\tamdgpu\ndrm-client-id:\t" + std::to_string(ino) + "\n";
  const auto kib = [](std::uint64_t bytes) { return std::to_string(bytes / 1024) + " KiB\n"; };
  switch (fdinfo_keys_.load()) {
    case FdinfoKeys::Legacy:
      text += "drm-memory-vram:\t" + kib(vram) + "drm-memory-gtt: \t" + kib(gtt) + "drm-memory-cpu: \t" + kib(0);
      break;
    case FdinfoKeys::Total:
      text += "drm-total-vram:\t" + kib(vram) + "drm-total-gtt:\t" + kib(gtt) + "drm-total-cpu:\t" + kib(0);
      break;
    case FdinfoKeys::None:
      break;
  }
  return text;
}

int SimKfd::drm_fdinfo(int fd, std::string* text) {
  std::lock_guard lock(mutex_);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -errno;
  auto it = files_.find(st.st_ino);
  if (it == files_.end() || it->second.kind != Kind::Render) {
    *text = "pos:\t0\nflags:\t02000002\n";
    return 0;
  }
  *text = render_fdinfo(st.st_ino);
  return 0;
}

// The app's files are fds of this (the test's) process, told apart by the simulated file's owner.
int SimKfd::process_gpu_files(const std::string& host_pid, ProcessGpuFiles* files) {
  std::lock_guard lock(mutex_);
  const int pid = std::atoi(host_pid.c_str());
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -errno;
  std::vector<ino_t> seen;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    struct stat st {};
    if (::fstat(fd, &st) != 0) continue;
    auto it = files_.find(st.st_ino);
    if (it == files_.end() || it->second.owner_pid != pid) continue;
    if (std::find(seen.begin(), seen.end(), st.st_ino) != seen.end()) continue;
    seen.push_back(st.st_ino);
    if (it->second.kind == Kind::Kfd) {
      files->has_kfd = true;
    } else {
      files->render.push_back(RenderFile{fd, it->second.render_minor, render_fdinfo(st.st_ino)});
    }
  }
  ::closedir(dir);
  std::sort(files->render.begin(), files->render.end(),
            [](const RenderFile& a, const RenderFile& b) { return a.fd < b.fd; });
  return 0;
}

// The app's fds are this process's: pidfd_getfd's duplicate of one is a dup of it, if that process holds it.
int SimKfd::take_process_fd(const std::string& host_pid, int target_fd) {
  if (!pidfd_getfd_) return -ENOSYS;
  std::lock_guard lock(mutex_);
  const SimFile* file = lookup(target_fd);
  if (!file || file->owner_pid != std::atoi(host_pid.c_str())) return -EBADF;
  const int fd = ::fcntl(target_fd, F_DUPFD_CLOEXEC, 0);
  return fd < 0 ? -errno : fd;
}

int SimKfd::criu_op(const SimFile& file, kfd_ioctl_criu_args& args) {
  if (args.op == KFD_CRIU_OP_RESUME) return resume(args);
  SimProcess* p = find_process(file.owner_pid);
  if (!p) return -ESRCH;
  switch (args.op) {
    case KFD_CRIU_OP_PROCESS_INFO: return process_info(*p, args);
    case KFD_CRIU_OP_CHECKPOINT: return checkpoint(*p, args);
    case KFD_CRIU_OP_UNPAUSE:
      if (!p->queues_paused) return -EINVAL;
      p->queues_paused = false;
      return 0;
    case KFD_CRIU_OP_RESTORE:
      if (file.owner_pid != calling_pid_) return -EINVAL;   // RESTORE is done by the restored process itself
      return restore(*p, args);
  }
  return -EINVAL;
}

std::uint64_t SimKfd::svm_priv_size(const SimProcess& p) {
  std::uint64_t size = 0;
  for (const auto& range : p.svm_ranges) size += kSvmPrivHeader + 8 * range.attrs.size();
  return size;
}

std::uint64_t SimKfd::priv_size(const SimProcess& p) const {
  return kProcessPriv + kDevicePriv * p.pdds.size() + kBoPriv * p.bos.size() + kQueuePriv * p.queues.size() +
         kEventPriv * p.events + svm_priv_size(p);
}

int SimKfd::process_info(SimProcess& p, kfd_ioctl_criu_args& args) {
  if (p.pdds.empty()) return -ENODEV;
  p.queues_paused = true;
  args.pid = static_cast<std::uint32_t>(p.pid);
  args.num_devices = static_cast<std::uint32_t>(p.pdds.size());
  args.num_bos = static_cast<std::uint32_t>(p.bos.size());
  args.num_objects = static_cast<std::uint32_t>(p.queues.size() + p.svm_ranges.size()) + p.events;
  args.priv_data_size = priv_size(p);
  return 0;
}

int SimKfd::checkpoint(SimProcess& p, kfd_ioctl_criu_args& args) {
  // criu_checkpoint refuses null arrays even when a count is 0.
  if (!args.devices || !args.bos || !args.priv_data) return -EINVAL;
  if (p.pdds.empty()) return -ENODEV;
  if (!p.queues_paused) return -EINVAL;   // PROCESS_INFO must come first
  if (args.num_devices != p.pdds.size() || args.num_bos != p.bos.size() ||
      args.num_objects != p.queues.size() + p.events + p.svm_ranges.size() || args.priv_data_size != priv_size(p)) {
    return -EINVAL;
  }
  auto* devices = reinterpret_cast<kfd_criu_device_bucket*>(args.devices);
  auto* bos = reinterpret_cast<kfd_criu_bo_bucket*>(args.bos);
  auto* priv = reinterpret_cast<std::uint8_t*>(args.priv_data);
  std::uint64_t off = 0;
  put<std::uint32_t>(priv, off, kPrivVersion);
  put<std::uint32_t>(priv, off, p.xnack);
  for (std::size_t i = 0; i < p.pdds.size(); ++i) {
    devices[i] = kfd_criu_device_bucket{p.pdds[i].user_gpu_id, p.pdds[i].actual_gpu_id, 0, 0};
    put<std::uint64_t>(priv, off, 0);
  }
  const std::uint64_t bo_priv = off;
  off += kBoPriv * p.bos.size();
  for (std::uint32_t gpu : p.queues) {
    put<std::uint32_t>(priv, off, kObjectQueue);
    put<std::uint32_t>(priv, off, gpu);
    put<std::uint64_t>(priv, off, 0x1000);
    put<std::uint64_t>(priv, off, 0x10000);
  }
  for (std::uint32_t e = 0; e < p.events; ++e) {
    put<std::uint32_t>(priv, off, kObjectEvent);
    put<std::uint32_t>(priv, off, e);
  }
  for (const auto& range : p.svm_ranges) {
    put<std::uint32_t>(priv, off, kObjectSvmRange);
    put<std::uint32_t>(priv, off, static_cast<std::uint32_t>(range.attrs.size()));
    put<std::uint64_t>(priv, off, range.start);
    put<std::uint64_t>(priv, off, range.size);
    for (auto attr : range.attrs) put<std::uint64_t>(priv, off, attr);
  }
  off = bo_priv;
  // BOs last, as the kernel does: installing dmabuf fds is the one step that cannot be undone.
  for (std::size_t i = 0; i < p.bos.size(); ++i) {
    const SimBo& bo = p.bos[i];
    kfd_criu_bo_bucket b{};
    b.addr = bo.va;
    b.size = bo.size;
    b.offset = bo.mmap_offset;
    b.gpu_id = bo.user_gpu_id;
    b.alloc_flags = bo.flags;
    b.dmabuf_fd = kInvalidFd;
    if (bo.mem_fd >= 0) {
      const int fd = export_dmabuf(bo);
      if (fd < 0) return fd;
      b.dmabuf_fd = static_cast<std::uint32_t>(fd);
    }
    bos[i] = b;
    put<std::uint32_t>(priv, off, bo.idr_handle);
    put<std::uint32_t>(priv, off, 0);
    put<std::uint64_t>(priv, off, bo.user_addr);
  }
  return 0;
}

int SimKfd::restore(SimProcess& p, kfd_ioctl_criu_args& args) {
  if ((args.num_bos > 0 && !args.bos) || !args.devices || !args.priv_data || !args.priv_data_size ||
      !args.num_devices || (args.num_bos == 0 && !restore_accepts_no_bos_)) {
    return -EINVAL;
  }
  const bool fresh = p.bos.empty() && !p.restored &&
                     std::none_of(p.pdds.begin(), p.pdds.end(), [](const SimPdd& d) { return d.vm_bound; });
  if (!fresh) return -EINVAL;   // RESTORE only into a process that has done nothing with KFD yet
  const auto* priv = reinterpret_cast<const std::uint8_t*>(args.priv_data);
  const std::uint64_t max = args.priv_data_size;
  std::uint64_t off = 0;
  if (off + kProcessPriv > max) return -EINVAL;
  if (get<std::uint32_t>(priv, off) != kPrivVersion) return -EINVAL;
  const std::uint32_t xnack = get<std::uint32_t>(priv, off);

  if (args.num_devices != p.pdds.size()) return -EINVAL;
  if (off + kDevicePriv * args.num_devices > max) return -EINVAL;
  const auto* devices = reinterpret_cast<const kfd_criu_device_bucket*>(args.devices);
  std::vector<SimPdd> pdds = p.pdds;
  for (std::uint32_t i = 0; i < args.num_devices; ++i) {
    const auto& d = devices[i];
    if (!d.user_gpu_id) return -EINVAL;
    const SimGpu* gpu = gpu_by_id(d.actual_gpu_id);
    if (!gpu) return -EINVAL;
    auto pdd = std::find_if(pdds.begin(), pdds.end(), [&](const SimPdd& x) { return x.actual_gpu_id == d.actual_gpu_id; });
    if (pdd == pdds.end()) return -EINVAL;
    const SimFile* drm = lookup(static_cast<int>(d.drm_fd));
    if (!drm || drm->kind != Kind::Render) return -EINVAL;
    if (drm->render_minor != gpu->render_minor) return -EINVAL;   // a VM from another GPU's render node
    if (pdd->vm_bound) return -EINVAL;
    struct stat st {};
    if (::fstat(static_cast<int>(d.drm_fd), &st) != 0) return -EBADF;
    pdd->user_gpu_id = d.user_gpu_id;
    pdd->vm_bound = true;
    pdd->drm_file = st.st_ino;
  }
  off += kDevicePriv * args.num_devices;

  if (off + kBoPriv * args.num_bos > max) return -EINVAL;
  auto* bos = reinterpret_cast<kfd_criu_bo_bucket*>(args.bos);
  std::vector<SimBo> new_bos;
  for (std::uint32_t i = 0; i < args.num_bos; ++i) {
    kfd_criu_bo_bucket& b = bos[i];
    const std::uint32_t idr = get<std::uint32_t>(priv, off);
    off += 4;
    const std::uint64_t user_addr = get<std::uint64_t>(priv, off);
    auto pdd = std::find_if(pdds.begin(), pdds.end(), [&](const SimPdd& x) { return x.user_gpu_id == b.gpu_id; });
    if (pdd == pdds.end()) {
      for (auto& bo : new_bos) ::close(bo.mem_fd);
      return -ENODEV;
    }
    if ((b.alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL) && b.size != doorbell_size()) return -EINVAL;
    if ((b.alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP) && b.size != kPageSize) return -EINVAL;
    SimBo bo = make_bo(b.gpu_id, b.addr, b.size, b.alloc_flags, idr, user_addr);
    if (b.alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL) {
      bo.mmap_offset = kMmapTypeDoorbell | (static_cast<std::uint64_t>(pdd->actual_gpu_id) << 46);
    } else if (b.alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP) {
      bo.mmap_offset = kMmapTypeMmio | (static_cast<std::uint64_t>(pdd->actual_gpu_id) << 46);
    }
    b.restored_offset = bo.mmap_offset;
    b.dmabuf_fd = kInvalidFd;
    if (bo.mem_fd >= 0) {
      const int fd = export_dmabuf(bo);
      if (fd < 0) return fd;
      b.dmabuf_fd = static_cast<std::uint32_t>(fd);
    }
    new_bos.push_back(bo);
  }

  std::vector<std::uint32_t> queues;
  std::uint32_t events = 0;
  std::vector<SimSvmRange> svm;
  for (std::uint32_t i = 0; i < args.num_objects; ++i) {
    if (off + 4 > max) return -EINVAL;
    std::uint64_t peek = off;
    const std::uint32_t type = get<std::uint32_t>(priv, peek);
    if (type == kObjectQueue) {
      if (off + kQueuePriv > max) return -EINVAL;
      off += 4;
      queues.push_back(get<std::uint32_t>(priv, off));
      off += 16;
    } else if (type == kObjectEvent) {
      if (off + kEventPriv > max) return -EINVAL;
      off += kEventPriv;
      ++events;
    } else if (type == kObjectSvmRange) {
      if (off + kSvmPrivHeader > max) return -EINVAL;
      off += 4;
      const std::uint32_t nattr = get<std::uint32_t>(priv, off);
      SimSvmRange range;
      range.start = get<std::uint64_t>(priv, off);
      range.size = get<std::uint64_t>(priv, off);
      if (off + 8ull * nattr > max) return -EINVAL;
      for (std::uint32_t a = 0; a < nattr; ++a) range.attrs.push_back(get<std::uint64_t>(priv, off));
      svm.push_back(std::move(range));
    } else {
      return -EINVAL;
    }
  }
  if (off != max) return -EINVAL;

  p.xnack = xnack;
  p.pdds = std::move(pdds);
  for (auto& bo : new_bos) p.bos.push_back(bo);
  p.queues = std::move(queues);
  p.events = events;
  p.svm_pending = std::move(svm);
  p.restored = true;
  p.running = false;
  return 0;
}

int SimKfd::resume(kfd_ioctl_criu_args& args) {
  SimProcess* p = find_process(static_cast<int>(args.pid));
  if (!p) return -ESRCH;
  for (auto& range : p->svm_pending) p->svm_ranges.push_back(std::move(range));
  p->svm_pending.clear();
  p->running = true;
  p->queues_paused = false;
  return 0;
}

// A dma-buf carries its BO into any process it reaches (SCM_RIGHTS, fork), as the kernel's does: the BO's memory
// is the dma-buf's file itself and its flags and size are in the file's name, so a process whose simulation never
// saw the BO (the main CRIU process, sent the fds by the restored child) reaches it all the same.
int SimKfd::dmabuf_target(int fd, std::uint64_t offset, std::size_t count, int* mem_fd, bool* cpu_access) {
  std::uint32_t flags = 0;
  std::uint64_t size = 0;
  if (!parse_bo_name(fd, &flags, &size)) return -EINVAL;
  if (offset + count > size) return -EINVAL;
  *mem_fd = fd;
  *cpu_access = !(flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM) || (flags & KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC);
  return 0;
}

int SimKfd::dmabuf_inode(int fd, std::uint64_t* inode) {
  std::uint32_t flags = 0;
  std::uint64_t size = 0;
  if (!parse_bo_name(fd, &flags, &size)) return -ENOTSUP;
  struct stat st {};
  ::fstat(fd, &st);
  *inode = st.st_ino;
  return 0;
}

int SimKfd::process_dmabuf_inodes(const std::string& host_pid, std::vector<std::uint64_t>* inodes) {
  std::lock_guard lock(mutex_);
  auto it = app_dmabufs_.find(std::atoi(host_pid.c_str()));
  if (it == app_dmabufs_.end()) return 0;
  for (int fd : it->second) {
    struct stat st {};
    if (::fstat(fd, &st) == 0) inodes->push_back(st.st_ino);
  }
  return 0;
}

void SimKfd::count_transfer(std::size_t count) {
  std::size_t seen = largest_transfer_;
  while (count > seen && !largest_transfer_.compare_exchange_weak(seen, count)) {
  }
  bytes_moved_ += count;
}

int SimKfd::bo_read(int dmabuf_fd, std::uint64_t offset, void* dst, std::size_t count) {
  int mem = -1;
  bool cpu_access = false;
  if (int err = dmabuf_target(dmabuf_fd, offset, count, &mem, &cpu_access)) return err;
  if (!cpu_access) return -EPERM;   // amdgpu_gem_object_mmap: NO_CPU_ACCESS
  if (::pread(mem, dst, count, static_cast<off_t>(offset)) != static_cast<ssize_t>(count)) return -EIO;
  count_transfer(count);
  return 0;
}

int SimKfd::bo_write(int dmabuf_fd, std::uint64_t offset, const void* src, std::size_t count) {
  int mem = -1;
  bool cpu_access = false;
  if (int err = dmabuf_target(dmabuf_fd, offset, count, &mem, &cpu_access)) return err;
  if (!cpu_access) return -EPERM;
  if (::pwrite(mem, src, count, static_cast<off_t>(offset)) != static_cast<ssize_t>(count)) return -EIO;
  count_transfer(count);
  return 0;
}

Result<std::unique_ptr<BoCopier>> SimKfd::make_sdma_copier(int render_fd, std::size_t /*buffer_size*/) {
  std::lock_guard lock(mutex_);
  const SimFile* f = lookup(render_fd);
  if (!f || f->kind != Kind::Render) return make_error("SDMA: not an amdgpu render node", ENODEV);
  if (!sdma_available_) return make_error("SDMA: " + sdma_missing_reason_, ENOSYS);
  return std::unique_ptr<BoCopier>(std::make_unique<SimSdmaCopier>(*this));
}

int SimKfd::dmabuf_holders(const std::vector<std::uint64_t>& inodes, const std::string& except_pid,
                           std::vector<DmabufHolder>* holders) {
  std::lock_guard lock(mutex_);
  for (const auto& [pid, fds] : app_dmabufs_) {
    if (std::to_string(pid) == except_pid || pid == calling_pid_) continue;
    std::vector<std::uint64_t> seen;
    for (int fd : fds) {
      struct stat st {};
      if (::fstat(fd, &st) != 0 || std::find(seen.begin(), seen.end(), st.st_ino) != seen.end()) continue;
      seen.push_back(st.st_ino);
      if (std::find(inodes.begin(), inodes.end(), st.st_ino) != inodes.end()) {
        holders->push_back({std::to_string(pid), st.st_ino});
      }
    }
  }
  return 0;
}

}  // namespace gpuckpt::amd::sim
