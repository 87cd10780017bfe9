// SDMA linear copies between a BO (imported from its dmabuf fd) and a GTT staging buffer the CPU can map; the
// command buffers come from sdma_packets.h.
#include "criu-plugin/amd/sdma_copier.h"

#include <amdgpu.h>
#include <dlfcn.h>
#include <amdgpu_drm.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "criu-plugin/amd/sdma_packets.h"

namespace gpuckpt::amd {
namespace {

constexpr std::uint64_t kFenceTimeoutNs = 10ull * 1000 * 1000 * 1000;

// libdrm_amdgpu is opened at run time: the one plugin .so also loads on nodes without it (NVIDIA nodes).
#define GPUCKPT_LIBDRM_AMDGPU_FUNCTIONS(X)                                                                    \
  X(amdgpu_device_initialize) X(amdgpu_device_deinitialize) X(amdgpu_query_gpu_info) X(amdgpu_bo_alloc)      \
  X(amdgpu_bo_free) X(amdgpu_bo_cpu_map) X(amdgpu_bo_cpu_unmap) X(amdgpu_va_range_alloc)                     \
  X(amdgpu_va_range_free) X(amdgpu_bo_va_op) X(amdgpu_bo_import) X(amdgpu_cs_ctx_create) X(amdgpu_cs_ctx_free) \
  X(amdgpu_bo_list_create) X(amdgpu_bo_list_destroy) X(amdgpu_cs_submit) X(amdgpu_cs_query_fence_status)

struct Libdrm {
#define GPUCKPT_DECLARE(name) decltype(&::name) name = nullptr;
  GPUCKPT_LIBDRM_AMDGPU_FUNCTIONS(GPUCKPT_DECLARE)
#undef GPUCKPT_DECLARE
  std::string error;
};

const Libdrm& libdrm() {
  static const Libdrm lib = [] {
    Libdrm l;
    void* handle = ::dlopen("libdrm_amdgpu.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      l.error = std::string("libdrm_amdgpu.so.1 not loadable: ") + ::dlerror();
      return l;
    }
#define GPUCKPT_RESOLVE(name)                                                      \
    l.name = reinterpret_cast<decltype(&::name)>(::dlsym(handle, #name));          \
    if (!l.name && l.error.empty()) l.error = "libdrm_amdgpu.so.1 lacks " #name;
    GPUCKPT_LIBDRM_AMDGPU_FUNCTIONS(GPUCKPT_RESOLVE)
#undef GPUCKPT_RESOLVE
    return l;
  }();
  return lib;
}

Error drm_error(const std::string& what, int ret) {
  return make_error("SDMA: " + what + " failed: " + std::strerror(ret < 0 ? -ret : ret), ret < 0 ? -ret : EIO);
}

// A BO with a GPU virtual address in this device's VM (and optionally a CPU mapping).
struct MappedBo {
  amdgpu_bo_handle bo = nullptr;
  amdgpu_va_handle va = nullptr;
  std::uint64_t gpu_addr = 0;
  std::uint64_t size = 0;
  void* cpu = nullptr;
};

class LibdrmSdmaCopier final : public BoCopier {
 public:
  ~LibdrmSdmaCopier() override {
    for (auto& [fd, bo] : imported_) release(bo);
    release(staging_);
    release(ib_);
    if (ctx_) drm_.amdgpu_cs_ctx_free(ctx_);
    if (dev_) drm_.amdgpu_device_deinitialize(dev_);
  }

  Result<void> init(int render_fd, std::size_t buffer_size) {
    if (!drm_.error.empty()) return make_error("SDMA: " + drm_.error, ENOSYS);
    std::uint32_t major = 0, minor = 0;
    if (int r = drm_.amdgpu_device_initialize(render_fd, &major, &minor, &dev_)) return drm_error("device init", r);
    amdgpu_gpu_info info{};
    if (int r = drm_.amdgpu_query_gpu_info(dev_, &info)) return drm_error("gpu info query", r);
    count_minus_one_ = info.family_id >= AMDGPU_FAMILY_AI;
    GPUCKPT_TRY_VOID(alloc_mapped(buffer_size, AMDGPU_GEM_DOMAIN_GTT, &staging_));
    const std::uint64_t ib_bytes = std::max<std::uint64_t>(4096, sdma_linear_copy_ib_dwords(buffer_size) * 4);
    GPUCKPT_TRY_VOID(alloc_mapped(ib_bytes, AMDGPU_GEM_DOMAIN_GTT, &ib_));
    if (int r = drm_.amdgpu_cs_ctx_create(dev_, &ctx_)) return drm_error("context create", r);
    return {};
  }

  const char* name() const override { return "sdma"; }

  Result<void> read(int dmabuf_fd, std::uint64_t offset, void* dst, std::size_t count) override {
    GPUCKPT_TRY(MappedBo* bo, import(dmabuf_fd));
    GPUCKPT_TRY_VOID(copy(bo->gpu_addr + offset, staging_.gpu_addr, count, bo->bo));
    std::memcpy(dst, staging_.cpu, count);
    return {};
  }

  Result<void> write(int dmabuf_fd, std::uint64_t offset, const void* src, std::size_t count) override {
    GPUCKPT_TRY(MappedBo* bo, import(dmabuf_fd));
    std::memcpy(staging_.cpu, src, count);
    return copy(staging_.gpu_addr, bo->gpu_addr + offset, count, bo->bo);
  }

 private:
  Result<void> alloc_mapped(std::uint64_t size, std::uint32_t domain, MappedBo* out) {
    amdgpu_bo_alloc_request req{};
    req.alloc_size = size;
    req.phys_alignment = 4096;
    req.preferred_heap = domain;
    if (int r = drm_.amdgpu_bo_alloc(dev_, &req, &out->bo)) return drm_error("staging allocation", r);
    out->size = size;
    GPUCKPT_TRY_VOID(map_va(out));
    if (int r = drm_.amdgpu_bo_cpu_map(out->bo, &out->cpu)) return drm_error("staging CPU map", r);
    return {};
  }

  Result<void> map_va(MappedBo* bo) {
    if (int r = drm_.amdgpu_va_range_alloc(dev_, amdgpu_gpu_va_range_general, bo->size, 4096, 0, &bo->gpu_addr, &bo->va,
                                      0)) {
      return drm_error("VA range allocation", r);
    }
    if (int r = drm_.amdgpu_bo_va_op(bo->bo, 0, bo->size, bo->gpu_addr, 0, AMDGPU_VA_OP_MAP)) {
      return drm_error("GPU map", r);
    }
    return {};
  }

  void release(MappedBo& bo) {
    if (!bo.bo) return;
    if (bo.cpu) drm_.amdgpu_bo_cpu_unmap(bo.bo);
    if (bo.va) {
      drm_.amdgpu_bo_va_op(bo.bo, 0, bo.size, bo.gpu_addr, 0, AMDGPU_VA_OP_UNMAP);
      drm_.amdgpu_va_range_free(bo.va);
    }
    drm_.amdgpu_bo_free(bo.bo);
    bo = MappedBo{};
  }

  Result<MappedBo*> import(int dmabuf_fd) {
    if (auto it = imported_.find(dmabuf_fd); it != imported_.end()) return &it->second;
    amdgpu_bo_import_result res{};
    if (int r = drm_.amdgpu_bo_import(dev_, amdgpu_bo_handle_type_dma_buf_fd, static_cast<std::uint32_t>(dmabuf_fd),
                                 &res)) {
      return drm_error("dmabuf import", r);
    }
    MappedBo bo;
    bo.bo = res.buf_handle;
    bo.size = res.alloc_size;
    if (auto r = map_va(&bo); !r) {
      release(bo);
      return r.error();
    }
    return &imported_.emplace(dmabuf_fd, bo).first->second;
  }

  Result<void> copy(std::uint64_t src, std::uint64_t dst, std::uint64_t count, amdgpu_bo_handle target) {
    const std::vector<std::uint32_t> packets = sdma_linear_copy_ib(src, dst, count, count_minus_one_);
    std::memcpy(ib_.cpu, packets.data(), packets.size() * sizeof(std::uint32_t));
    const auto dwords = static_cast<std::uint32_t>(packets.size());
    amdgpu_bo_handle resources[3] = {target, staging_.bo, ib_.bo};
    amdgpu_bo_list_handle list = nullptr;
    if (int r = drm_.amdgpu_bo_list_create(dev_, 3, resources, nullptr, &list)) return drm_error("BO list", r);
    amdgpu_cs_ib_info ib_info{};
    ib_info.ib_mc_address = ib_.gpu_addr;
    ib_info.size = dwords;
    amdgpu_cs_request req{};
    req.ip_type = AMDGPU_HW_IP_DMA;
    req.resources = list;
    req.number_of_ibs = 1;
    req.ibs = &ib_info;
    int r = drm_.amdgpu_cs_submit(ctx_, 0, &req, 1);
    drm_.amdgpu_bo_list_destroy(list);
    if (r) return drm_error("command submission", r);
    amdgpu_cs_fence fence{};
    fence.context = ctx_;
    fence.ip_type = AMDGPU_HW_IP_DMA;
    fence.fence = req.seq_no;
    std::uint32_t expired = 0;
    if ((r = drm_.amdgpu_cs_query_fence_status(&fence, kFenceTimeoutNs, 0, &expired))) return drm_error("fence wait", r);
    if (!expired) return make_error("SDMA: copy did not finish within 10 s", ETIMEDOUT);
    return {};
  }

  const Libdrm& drm_ = libdrm();
  amdgpu_device_handle dev_ = nullptr;
  amdgpu_context_handle ctx_ = nullptr;
  bool count_minus_one_ = true;
  MappedBo staging_;
  MappedBo ib_;
  std::map<int, MappedBo> imported_;
};

}  // namespace

Result<std::unique_ptr<BoCopier>> make_libdrm_sdma_copier(int render_fd, std::size_t buffer_size) {
  auto copier = std::make_unique<LibdrmSdmaCopier>();
  GPUCKPT_TRY_VOID(copier->init(render_fd, buffer_size));
  return std::unique_ptr<BoCopier>(std::move(copier));
}

}  // namespace gpuckpt::amd
