// What an amdgpu render-node file holds beyond KFD's CHECKPOINT, for the dump-time refusal (docs/amd.md,
// "Refused at dump"): the GEM handles of the file, found by asking for each handle in turn, and the memory its
// GPU VM holds, from the DRM usage stats the kernel prints in the file's fdinfo.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "criu-plugin/amd/amd_device.h"

namespace gpuckpt::amd {

// GEM handles come from idr_alloc(&file->object_idr, obj, 1, 0, ...) (drm_gem.c): the lowest free number from 1,
// so a file's highest handle is at most the most handles it ever held at once. Handles 1..kGemProbeHandles are
// asked for with DRM_IOCTL_AMDGPU_GEM_OP / AMDGPU_GEM_OP_GET_GEM_CREATE_INFO, which answers ENOENT for a handle
// that does not exist (amdgpu_gem_op_ioctl: drm_gem_object_lookup) and changes nothing for one that does.
inline constexpr std::uint32_t kGemProbeHandles = 65536;

struct GemObjectInfo {
  std::uint32_t handle = 0;
  std::uint64_t size = 0;
  std::uint64_t domains = 0;   // AMDGPU_GEM_DOMAIN_* the BO prefers
};

struct GemProbe {
  std::uint32_t count = 0;             // handles found
  std::vector<GemObjectInfo> first;    // the first few, for the message
};

// Asks for handles 1..`bound` on `render_fd`. An error other than ENOENT fails the probe (the file's handles
// cannot be told), naming the handle and the errno.
Result<GemProbe> probe_gem_handles(AmdDevice& device, int render_fd, std::uint32_t bound = kGemProbeHandles);

// "handle 1: 2097152 bytes, VRAM; handle 2: ..." for the first objects of a probe.
std::string describe_gem_objects(const GemProbe& probe);

// The DRM usage stats of one file's fdinfo (Documentation/gpu/drm-usage-stats.rst). amdgpu prints, since Linux
// 5.19, drm-memory-vram/gtt/cpu: the BOs of the file's VM by current placement (amdgpu_vm_get_memory walks the
// VM's BO lists: every GEM handle's BO, the VM's page tables, and the KFD BOs of a VM KFD acquired). Newer
// kernels add drm-total-<region>, "all requested buffers" whether or not their backing store exists (the legacy
// key became an alias of drm-resident-<region>): drm-total-* is read where present, else drm-memory-*.
struct DrmFileMemory {
  std::string client_id;     // drm-client-id: one per DRM file
  bool has_memory = false;   // whether any memory key was printed
  std::uint64_t bytes = 0;   // vram + gtt + cpu
};
DrmFileMemory parse_drm_fdinfo(const std::string& text);

// Memory a render file's VM may hold that is neither a GEM handle of the file nor a BO KFD's CHECKPOINT lists,
// each from the kernel source: KFD's per-process BOs below gpuvm_base, which CHECKPOINT skips (CWSR trap handler,
// KFD_CWSR_TBA_TMA_SIZE = 2 pages, and the IB page: 192 KiB with 64 KiB pages), the context save area mapped
// into every VM under MCBP or SR-IOV (AMDGPU_CSA_SIZE, 128 KiB), the seq64 BO of newer kernels (inside its
// 2 MiB VA reserve, AMDGPU_VA_RESERVED_SEQ64_SIZE) and the root page directory: 4 MiB in all, per file.
inline constexpr std::uint64_t kKernelBytesPerRenderFile = 4ull << 20;
// Page tables for mapped BOs: 8-byte PTEs per 4 KiB page are 1/512 of the mapped bytes; twice that is allowed,
// covering partly used tables and directories.
inline constexpr std::uint64_t kPageTableShare = 256;

}  // namespace gpuckpt::amd
