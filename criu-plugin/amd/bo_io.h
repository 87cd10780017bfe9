// Moving buffer-object contents between GPUs and image files: one content file per GPU (8-byte size header,
// then the BOs' bytes in metadata order), one thread per GPU, each through a staging buffer bounded by
// max_buffer_size so a BO larger than the buffer (or than RAM) moves in several passes.
// The copy path is chosen per GPU before any byte moves: SDMA where the device gives an engine; otherwise the
// CPU path (dmabuf mmap), logged as a warning with the reason, and only when every BO of that GPU is one the
// kernel lets the CPU map — a VRAM BO without CPU access fails the whole transfer up front, naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "criu-plugin/amd/amd_device.h"
#include "criu-plugin/amd/image_dir.h"

namespace gpuckpt::amd {

struct BoTransfer {
  int dmabuf_fd = -1;
  std::uint64_t size = 0;
  std::uint64_t addr = 0;        // GPU VA, for messages
  bool cpu_access = true;        // the kernel lets the CPU mmap it (kfd_uapi.h bo_cpu_accessible)
};

struct GpuTransfer {
  std::uint32_t gpu_id = 0;      // user gpu_id (names the content file)
  int render_fd = -1;            // the GPU's render node, for the SDMA path; -1: CPU path only
  std::string file_name;
  std::vector<BoTransfer> bos;
};

struct TransferOptions {
  std::uint64_t max_buffer_size = 256ull << 20;
  bool use_sdma = true;
  bool thread_per_gpu = true;    // false: every GPU in turn on the calling thread (benchmark baseline)
};

struct TransferStats {
  std::uint64_t bytes = 0;
  std::uint64_t passes = 0;      // copies through the staging buffer, over all GPUs
};

std::uint64_t content_bytes(const GpuTransfer& gpu);

Result<TransferStats> dump_contents(AmdDevice& device, const ImageDir& images, const std::vector<GpuTransfer>& gpus,
                                    const TransferOptions& options);
// Checks each file's size header against the BOs it must fill before writing anything to the GPU.
Result<TransferStats> restore_contents(AmdDevice& device, const ImageDir& images,
                                       const std::vector<GpuTransfer>& gpus, const TransferOptions& options);

}  // namespace gpuckpt::amd
