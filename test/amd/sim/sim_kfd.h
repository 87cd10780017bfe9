// The one fake of the AMD hardware seam: a simulated KFD/DRM device that keeps the kernel's CRIU protocol
// (drivers/gpu/drm/amd/amdkfd/kfd_chardev.c, criu_* functions) as documented in linux/kfd_ioctl.h:
//  - a process opening /dev/kfd gets one process-device (pdd) per GPU it can see;
//  - CRIU_OP on another process's /dev/kfd fd only from that process's ptrace parent (-EBADF otherwise), and
//    only from a caller with CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN (-EACCES), checked in that order;
//  - PROCESS_INFO evicts ("pauses") the queues and reports devices, BOs, objects and the private-data size;
//    a failing PROCESS_INFO leaves the queues running;
//  - CHECKPOINT is refused (-EINVAL) unless the process is paused, every count and size matches and no array is
//    null (even with no BOs); it installs a dmabuf fd in the caller for every VRAM/GTT BO; userptr BOs keep their
//    CPU address in the private data (their pages are the process's memory, which CRIU dumps), doorbell and
//    MMIO-remap BOs have no contents and mmap offsets that name their type and GPU;
//  - UNPAUSE is refused unless paused;
//  - RESTORE acts on the calling process, which must be fresh (no BOs, no VM bound to a render node), must see
//    as many GPUs as the image lists, and must pass, per device, an existing actual gpu_id and an fd of that
//    GPU's render node; num_bos == 0 is refused (-EINVAL) as kernels before "Allow restore of processes with no
//    BOs" do, unless told otherwise; a doorbell BO must be one doorbell slice, an MMIO-remap BO one page; the
//    private data must be consumed exactly; new BOs get new mmap offsets (restored_offset) and new dmabuf fds;
//    the queues stay evicted until RESUME;
//  - SVM ranges are objects of the private data (type 2: start, size, attributes); RESTORE keeps them aside and
//    RESUME applies them, as kfd_criu_restore_svm / kfd_criu_resume_svm do; their pages are process memory;
//  - RESUME finds the process by pid (-ESRCH when there is none);
//  - any CRIU op can be made to fail once with a chosen errno (ENOMEM, EBUSY, EIO, ... as the kernel's can);
//  - ioctls other than CRIU_OP only from the process that opened the fd (-EBADF otherwise);
//  - the CPU may map (bo_read/bo_write) only CPU-accessible BOs: a VRAM BO allocated without
//    KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC is NO_CPU_ACCESS in amdgpu, whose mmap is refused (-EPERM);
//  - an SDMA engine per GPU copies any BO (turned off to model a node without libdrm_amdgpu);
//  - a BO's mmap offset is granted to one open render-node file, the one whose VM holds the BO (DRM's
//    per-file drm_vma_node_allow): another open of the same node may not map it (-EACCES in the kernel);
//  - every open render-node file has its own GEM handle table (drm_file's object_idr): DRM_IOCTL_AMDGPU_GEM_CREATE
//    takes the lowest free handle from 1 (idr_alloc(.., 1, 0, ..)), DRM_IOCTL_GEM_CLOSE frees one (-EINVAL when
//    there is none, drm_gem_handle_delete), DRM_IOCTL_AMDGPU_GEM_OP / GET_GEM_CREATE_INFO answers size, alignment,
//    domains and flags (-ENOENT for no such handle, amdgpu_gem_op_ioctl); any process holding the file may call
//    them. KFD's BOs are no handles of the process's file (the kernel keeps them in KFD's own DRM client);
//  - each render-node file's fdinfo carries drm-client-id and the memory of its GPU VM as amdgpu prints it
//    (amdgpu_show_fdinfo: drm-memory-vram/gtt/cpu in KiB, by placement; newer kernels' drm-total-*, or nothing as
//    before Linux 5.19): its GEM BOs, a root page directory, and for the file whose VM KFD acquired, the process's
//    KFD BOs of that GPU, their page tables and KFD's reserved CWSR/IB pages. A BO mapped to a peer GPU's VM is
//    not modelled.
// File descriptors are real (memfd), so fd numbers, dup, SCM_RIGHTS passing, fork and pread/pwrite of BO memory
// behave as on a real system; the simulation recognises /dev/kfd and render-node files by inode, and a dma-buf
// by its file alone (so one sent to another process works there). KFD process state lives in the simulating
// process: after fork(2), a child's RESTORE is not seen by the parent's simulation (its RESUME answers ESRCH).
#pragma once

#include <linux/kfd_ioctl.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "criu-plugin/amd/amd_device.h"

namespace gpuckpt::amd::sim {

struct SimGpu {
  std::uint32_t gpu_id = 0;
  int render_minor = 128;
};

struct SimBo {
  std::uint64_t va = 0;
  std::uint64_t size = 0;
  std::uint32_t flags = 0;
  std::uint32_t user_gpu_id = 0;
  std::uint64_t mmap_offset = 0;
  std::uint32_t idr_handle = 0;
  std::uint64_t user_addr = 0;   // USERPTR: the CPU address of its pages
  int mem_fd = -1;            // the BO's memory (VRAM/GTT only)
};

struct SimPdd {
  std::uint32_t actual_gpu_id = 0;
  std::uint32_t user_gpu_id = 0;
  bool vm_bound = false;      // a render node's VM was given to KFD (by use, or by RESTORE)
  ino_t drm_file = 0;         // the open render-node file whose VM it is: KFD BOs are GEM objects of that file
};

// An SVM range (AMDKFD_IOC_SVM SET_ATTR): its pages are process memory; KFD keeps only its attributes.
struct SimSvmRange {
  std::uint64_t start = 0;
  std::uint64_t size = 0;
  std::vector<std::uint64_t> attrs;   // kfd_ioctl_svm_attribute {type, value} packed as type << 32 | value
  bool operator==(const SimSvmRange&) const = default;
};

struct SimProcess {
  int pid = 0;
  std::vector<SimPdd> pdds;
  std::vector<SimBo> bos;
  std::vector<std::uint32_t> queues;   // user gpu_id of each queue
  std::uint32_t events = 0;
  std::vector<SimSvmRange> svm_ranges;       // in effect
  std::vector<SimSvmRange> svm_pending;      // RESTOREd, applied at RESUME (kfd_criu_resume_svm)
  std::uint32_t xnack = 0;
  bool queues_paused = false;          // PROCESS_INFO .. UNPAUSE
  bool restored = false;               // RESTORE done
  bool running = true;                 // false from RESTORE until RESUME
};

// What CRIU gets from PROCESS_INFO + CHECKPOINT (for tests and the benchmark that need dmabuf fds).
struct SimCheckpoint {
  int result = 0;                      // 0 or the -errno of the failing op
  kfd_ioctl_criu_args args{};
  std::vector<kfd_criu_device_bucket> devices;
  std::vector<kfd_criu_bo_bucket> bos;
  std::string priv;
};

class SimKfd final : public AmdDevice {
 public:
  explicit SimKfd(std::vector<SimGpu> gpus, std::uint32_t kfd_major = 1, std::uint32_t kfd_minor = 11);
  ~SimKfd() override;

  // Which process makes the next calls (CRIU's own pid, or the restored process during RESTORE_EXT_FILE).
  void set_calling_pid(int pid) { calling_pid_ = pid; }
  // GPUs a process is given (its device cgroup): the ones it sees when it opens /dev/kfd and whose render nodes it
  // may open (others: EPERM); default: all.
  void set_visible_gpus(int pid, std::vector<std::uint32_t> gpu_ids);
  // The next CRIU `op` (KFD_CRIU_OP_*) fails with -errno, after the permission checks, as the kernel's can
  // (ENOMEM from VRAM exhaustion at RESTORE, EBUSY/ENOMEM evicting queues, EIO, ...).
  void fail_next(std::uint32_t op, int errno_value);
  // CRIU seizes `pid` (becomes its ptrace parent): CRIU ops on its /dev/kfd fds are then allowed to `tracer`.
  void seize(int pid, int tracer);
  // Whether `pid` has CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN (default: yes).
  void set_capable(int pid, bool capable);
  // Kernels with "Allow restore of processes with no BOs" accept RESTORE with num_bos == 0.
  void set_restore_accepts_no_bos(bool accepts) { restore_accepts_no_bos_ = accepts; }
  // Whether the GPUs have a usable SDMA engine (libdrm_amdgpu present); `reason` is what make_sdma_copier says.
  void set_sdma_available(bool available, std::string reason = "libdrm_amdgpu.so.1 not loadable");
  // Whether pidfd_getfd works (Linux 5.6+, not blocked by seccomp); off, take_process_fd answers -ENOSYS.
  void set_pidfd_getfd(bool works) { pidfd_getfd_ = works; }
  // Which DRM memory keys render-node fdinfo prints: Linux 5.19+ amdgpu (drm-memory-*), only the newer
  // drm-total-*, or none (older kernels).
  enum class FdinfoKeys { Legacy, Total, None };
  void set_fdinfo_keys(FdinfoKeys keys) { fdinfo_keys_ = keys; }

  // What an application does through libhsakmt, run as `pid`.
  int app_open_kfd(int pid);
  int app_open_render(int pid, int render_minor);
  // `user_addr`: the CPU address a USERPTR BO's pages live at.
  void app_alloc_bo(int pid, std::uint32_t gpu_id, std::uint64_t va, std::uint64_t size, std::uint32_t flags,
                    std::uint64_t user_addr = 0);
  void app_fill_bo(int pid, std::uint64_t va, std::uint32_t seed);
  std::vector<std::uint8_t> app_read_bo(int pid, std::uint64_t va);
  // Export a BO as a dma-buf fd the process keeps (hsaKmtExportDMABufHandle / PRIME): a BO has one dma-buf,
  // so every export of it shares one inode.
  int app_export_dmabuf(int pid, std::uint64_t va);
  // Another process gets an fd on that dma-buf (passed over a socket, or imported to a device through it).
  int app_share_dmabuf(int owner_pid, std::uint64_t va, int holder_pid);
  void app_create_queue(int pid, std::uint32_t gpu_id);
  void app_create_events(int pid, std::uint32_t count);
  void app_set_svm_range(int pid, const SimSvmRange& range);
  // What Mesa/libdrm do through a render-node fd, as `pid`: DRM_IOCTL_AMDGPU_GEM_CREATE (returns the handle)
  // and DRM_IOCTL_GEM_CLOSE.
  std::uint32_t app_gem_create(int pid, int render_fd, std::uint64_t size, std::uint64_t domains);
  void app_gem_close(int pid, int render_fd, std::uint32_t handle);
  // PROCESS_INFO then CHECKPOINT on `kfd_fd` as the current caller, which seizes the fd's process first as CRIU
  // does; the queues stay paused.
  SimCheckpoint checkpoint_for_test(int kfd_fd);
  // Whether `pid` may mmap its BO at mmap offset `offset` through render-node fd `fd` (see the rules above).
  bool app_mmap_allowed(int pid, int fd, std::uint64_t offset) const;
  // The process exits (CRIU kills it after the dump): its KFD state is gone.
  void kill(int pid);

  // Observations for tests.
  bool has_process(int pid) const;
  SimProcess process(int pid) const;
  std::size_t largest_bo_transfer() const { return largest_transfer_; }
  std::uint64_t bo_bytes_moved() const { return bytes_moved_; }
  std::uint64_t sdma_bytes_moved() const { return sdma_bytes_; }
  static std::uint64_t doorbell_size() { return 8192; }

  // AmdDevice
  int open(const char* path, int flags) override;
  int close(int fd) override;
  int stat(const char* path, struct stat* st) override;
  int fstat(int fd, struct stat* st) override;
  int ioctl(int fd, unsigned long request, void* arg) override;
  int dup_above(int fd, int min_fd) override;
  int dmabuf_inode(int fd, std::uint64_t* inode) override;
  int drm_fdinfo(int fd, std::string* text) override;
  int process_gpu_files(const std::string& host_pid, ProcessGpuFiles* files) override;
  int take_process_fd(const std::string& host_pid, int target_fd) override;
  int process_dmabuf_inodes(const std::string& host_pid, std::vector<std::uint64_t>* inodes) override;
  int dmabuf_holders(const std::vector<std::uint64_t>& inodes, const std::string& except_pid,
                     std::vector<DmabufHolder>* holders) override;
  int bo_read(int dmabuf_fd, std::uint64_t offset, void* dst, std::size_t count) override;
  int bo_write(int dmabuf_fd, std::uint64_t offset, const void* src, std::size_t count) override;
  Result<std::unique_ptr<BoCopier>> make_sdma_copier(int render_fd, std::size_t buffer_size) override;

  static constexpr unsigned kKfdMajorNumber = 511;   // /dev/kfd's char major is dynamic; this one is ours

 private:
  enum class Kind { Kfd, Render };
  struct SimGem {
    std::uint64_t size = 0;
    std::uint64_t alignment = 0;
    std::uint64_t domains = 0;
    std::uint64_t flags = 0;
  };
  struct SimFile {
    Kind kind;
    int owner_pid = 0;
    int render_minor = -1;
    std::map<std::uint32_t, SimGem> gem;   // the file's GEM handle table
    std::set<std::uint32_t> gem_holes;     // freed handles below gem_next: idr hands out the lowest free one
    std::uint32_t gem_next = 1;
  };

  int new_file(const SimFile& file, const char* name);
  const SimFile* lookup(int fd) const;       // mutex held
  SimFile* lookup(int fd);                   // mutex held
  SimProcess* find_process(int pid);         // mutex held
  SimProcess& process_for_open(int pid);     // mutex held
  const SimGpu* gpu_by_id(std::uint32_t gpu_id) const;
  const SimGpu* gpu_by_minor(int minor) const;
  SimBo make_bo(std::uint32_t user_gpu_id, std::uint64_t va, std::uint64_t size, std::uint32_t flags,
                std::uint32_t idr_handle, std::uint64_t user_addr);
  static int export_dmabuf(const SimBo& bo);
  std::uint64_t priv_size(const SimProcess& p) const;
  static std::uint64_t svm_priv_size(const SimProcess& p);

  int criu_op(const SimFile& file, kfd_ioctl_criu_args& args);
  int drm_ioctl(SimFile& file, unsigned long request, void* arg);
  std::string render_fdinfo(ino_t file) const;   // mutex held
  int process_info(SimProcess& p, kfd_ioctl_criu_args& args);
  int checkpoint(SimProcess& p, kfd_ioctl_criu_args& args);
  int restore(SimProcess& p, kfd_ioctl_criu_args& args);
  int resume(kfd_ioctl_criu_args& args);
  int dmabuf_target(int fd, std::uint64_t offset, std::size_t count, int* mem_fd, bool* cpu_access);
  static bool parse_bo_name(int fd, std::uint32_t* flags, std::uint64_t* size);
  int injected_failure(std::uint32_t op);   // mutex held
  void count_transfer(std::size_t count);
  friend class SimSdmaCopier;

  std::vector<SimGpu> gpus_;
  std::uint32_t kfd_major_;
  std::uint32_t kfd_minor_;
  std::map<std::uint32_t, int> fail_next_;      // op -> errno
  std::map<int, int> tracer_;                    // pid -> its ptrace parent
  std::map<int, bool> capable_;
  bool restore_accepts_no_bos_ = false;
  bool sdma_available_ = true;
  std::atomic<FdinfoKeys> fdinfo_keys_{FdinfoKeys::Legacy};
  std::atomic<bool> pidfd_getfd_{true};
  std::string sdma_missing_reason_;
  std::atomic<int> calling_pid_{1};
  mutable std::mutex mutex_;
  std::map<ino_t, SimFile> files_;
  std::map<int, SimProcess> processes_;
  std::map<int, std::vector<std::uint32_t>> visible_;
  std::map<int, std::vector<int>> app_dmabufs_;   // fds each process holds from app_export_dmabuf
  std::uint64_t next_mmap_offset_ = 0x100000000ull;
  std::atomic<std::size_t> largest_transfer_{0};
  std::atomic<std::uint64_t> bytes_moved_{0};
  std::atomic<std::uint64_t> sdma_bytes_{0};
};

}  // namespace gpuckpt::amd::sim
