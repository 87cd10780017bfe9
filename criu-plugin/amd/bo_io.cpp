#include "criu-plugin/amd/bo_io.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>

#include "base/log.h"
#include "criu-plugin/amd/hex_text.h"

namespace gpuckpt::amd {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

std::uint64_t buffer_size_for(const GpuTransfer& gpu, std::uint64_t cap) {
  std::uint64_t largest = 0;
  for (const auto& bo : gpu.bos) largest = std::max(largest, bo.size);
  return std::max<std::uint64_t>(1, std::min(largest, cap));
}

Result<Buffer> allocate(std::uint64_t size, const GpuTransfer& gpu) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, static_cast<std::size_t>(size)) != 0) {
    return make_error("cannot allocate a " + std::to_string(size) + "-byte staging buffer for GPU " +
                          std::to_string(gpu.gpu_id) + "; lower GPUCKPT_AMD_MAX_BUFFER_SIZE",
                      ENOMEM);
  }
  return Buffer(static_cast<char*>(p));
}

// SDMA where the GPU gives an engine; else the CPU path, which the kernel allows only for BOs it lets the CPU map.
Result<std::unique_ptr<BoCopier>> copier_for(AmdDevice& device, const GpuTransfer& gpu, std::uint64_t buffer_size,
                                             const TransferOptions& options) {
  if (gpu.bos.empty()) return make_cpu_copier(device);
  std::string why_not_sdma;
  if (!options.use_sdma) {
    why_not_sdma = "GPUCKPT_AMD_SDMA=0";
  } else if (gpu.render_fd < 0) {
    why_not_sdma = "the GPU's render node is not open";
  } else {
    auto sdma = device.make_sdma_copier(gpu.render_fd, static_cast<std::size_t>(buffer_size));
    if (sdma) {
      log::info("amd: GPU " + hex(gpu.gpu_id) + ": BO contents move through SDMA");
      return std::move(*sdma);
    }
    why_not_sdma = sdma.error().message;
  }
  for (const auto& bo : gpu.bos) {
    if (bo.cpu_access) continue;
    return make_error("GPU " + hex(gpu.gpu_id) + ": the VRAM BO at " + hex(bo.addr) + " (" + std::to_string(bo.size) +
                          " bytes) has no CPU access (allocated without KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC), so the "
                          "kernel refuses to map it (EPERM) and only SDMA can copy it, but SDMA is unavailable: " +
                          why_not_sdma + ". Nothing was copied; make SDMA available (libdrm_amdgpu on the node, "
                          "GPUCKPT_AMD_SDMA=1)",
                      EPERM);
  }
  log::warn("amd: GPU " + hex(gpu.gpu_id) + ": SDMA unavailable (" + why_not_sdma + "); its " +
            std::to_string(gpu.bos.size()) + " BO(s), all CPU-accessible, move through the CPU path (dmabuf mmap)");
  return make_cpu_copier(device);
}

Result<TransferStats> dump_gpu(BoCopier& copier, const ImageDir& images, const GpuTransfer& gpu,
                               const TransferOptions& options) {
  const std::uint64_t buffer_size = buffer_size_for(gpu, options.max_buffer_size);
  GPUCKPT_TRY(auto buffer, allocate(buffer_size, gpu));
  GPUCKPT_TRY(auto file, images.create(gpu.file_name));
  TransferStats stats;
  GPUCKPT_TRY_VOID(file.write_size_header(content_bytes(gpu)));
  for (const auto& bo : gpu.bos) {
    for (std::uint64_t offset = 0; offset < bo.size;) {
      const auto n = static_cast<std::size_t>(std::min(buffer_size, bo.size - offset));
      GPUCKPT_TRY_VOID(copier.read(bo.dmabuf_fd, offset, buffer.get(), n));
      GPUCKPT_TRY_VOID(file.write_all(buffer.get(), n));
      offset += n;
      stats.bytes += n;
      ++stats.passes;
    }
  }
  GPUCKPT_TRY_VOID(file.close());
  log::debug("amd: GPU " + std::to_string(gpu.gpu_id) + ": " + std::to_string(stats.bytes) + " bytes in " +
             std::to_string(stats.passes) + " passes through " + copier.name());
  return stats;
}

Result<TransferStats> restore_gpu(BoCopier& copier, const ImageDir& images, const GpuTransfer& gpu,
                                  const TransferOptions& options) {
  GPUCKPT_TRY(auto file, images.open(gpu.file_name));
  GPUCKPT_TRY(const std::uint64_t stored, file.read_size_header());
  if (stored != content_bytes(gpu)) {
    return make_error("image " + gpu.file_name + " holds " + std::to_string(stored) +
                      " bytes of BO contents but the checkpoint metadata lists " +
                      std::to_string(content_bytes(gpu)) + "; the image set is inconsistent, take the checkpoint again");
  }
  const std::uint64_t buffer_size = buffer_size_for(gpu, options.max_buffer_size);
  GPUCKPT_TRY(auto buffer, allocate(buffer_size, gpu));
  TransferStats stats;
  for (const auto& bo : gpu.bos) {
    for (std::uint64_t offset = 0; offset < bo.size;) {
      const auto n = static_cast<std::size_t>(std::min(buffer_size, bo.size - offset));
      GPUCKPT_TRY_VOID(file.read_exact(buffer.get(), n));
      GPUCKPT_TRY_VOID(copier.write(bo.dmabuf_fd, offset, buffer.get(), n));
      offset += n;
      stats.bytes += n;
      ++stats.passes;
    }
  }
  return stats;
}

using GpuFn = Result<TransferStats> (*)(BoCopier&, const ImageDir&, const GpuTransfer&, const TransferOptions&);

Result<TransferStats> run_all(GpuFn fn, AmdDevice& device, const ImageDir& images,
                              const std::vector<GpuTransfer>& gpus, const TransferOptions& options) {
  // Every GPU's path is settled before any GPU moves a byte: a refusal leaves nothing half copied.
  std::vector<std::unique_ptr<BoCopier>> copiers;
  for (const auto& gpu : gpus) {
    GPUCKPT_TRY(auto copier, copier_for(device, gpu, buffer_size_for(gpu, options.max_buffer_size), options));
    copiers.push_back(std::move(copier));
  }
  std::vector<Result<TransferStats>> results(gpus.size(), TransferStats{});
  if (options.thread_per_gpu && gpus.size() > 1) {
    std::vector<std::thread> threads;
    threads.reserve(gpus.size());
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = fn(*copiers[i], images, gpus[i], options); });
    }
    for (auto& t : threads) t.join();
  } else {
    for (std::size_t i = 0; i < gpus.size(); ++i) results[i] = fn(*copiers[i], images, gpus[i], options);
  }
  TransferStats total;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    GPUCKPT_TRY_VOID(results[i], "GPU " + std::to_string(gpus[i].gpu_id));
    total.bytes += results[i]->bytes;
    total.passes += results[i]->passes;
  }
  return total;
}

}  // namespace

std::uint64_t content_bytes(const GpuTransfer& gpu) {
  std::uint64_t total = 0;
  for (const auto& bo : gpu.bos) total += bo.size;
  return total;
}

Result<TransferStats> dump_contents(AmdDevice& device, const ImageDir& images, const std::vector<GpuTransfer>& gpus,
                                    const TransferOptions& options) {
  return run_all(&dump_gpu, device, images, gpus, options);
}

Result<TransferStats> restore_contents(AmdDevice& device, const ImageDir& images,
                                       const std::vector<GpuTransfer>& gpus, const TransferOptions& options) {
  return run_all(&restore_gpu, device, images, gpus, options);
}

}  // namespace gpuckpt::amd
