// A stand-in for libdrm_amdgpu.so.1 with an SDMA engine that executes what it is given: the SDMA copy path
// (criu-plugin/amd/sdma_copier.cpp) dlopen()s it in the test executable (found through that executable's run
// path) and runs unchanged: device init, GTT allocations with CPU and GPU mappings, dma-buf import, BO lists,
// command submission, fence waits. Submitted IBs are parsed as the SDMA engine parses them (the kernel's
// sdma_v4_0+ packet formats, read from amdgpu's sdma_v4_0.c and the SDMA packet headers): NOPs (op 0, with the
// header's count of extra dwords) and COPY/LINEAR (op 1, sub-op 0: count, parameter, src lo/hi, dst lo/hi) with
// every address resolved through the VA mappings the caller made; anything else, an address outside a mapping,
// an IB that is not a multiple of 8 dwords or a BO missing from the submission's BO list fails the submission
// with EINVAL, as the engine would fault. A dma-buf fd is imported by mapping the file (the tests use memfds).
// Functions with the gpuckpt_fake_amdgpu_ prefix let the test choose the GPU family and a fence that never
// signals, and read what the engine did.
#include <amdgpu.h>
#include <amdgpu_drm.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

struct amdgpu_device {
  int fd;
};
struct amdgpu_context {
  amdgpu_device* dev;
};
struct amdgpu_bo {
  std::uint8_t* memory;
  std::uint64_t size;
  bool imported;   // mmap of a dma-buf file, else malloc
};
struct amdgpu_bo_list {
  std::set<amdgpu_bo*> bos;
};
struct amdgpu_va {
  std::uint64_t base;
  std::uint64_t size;
};

namespace {

struct Mapping {
  amdgpu_bo* bo;
  std::uint64_t offset;
  std::uint64_t size;
};

struct Engine {
  std::mutex mutex;
  std::uint32_t family = AMDGPU_FAMILY_AI;
  bool fence_never_signals = false;
  std::uint64_t next_va = 1ull << 32;
  std::map<std::uint64_t, Mapping> mappings;   // GPU VA -> BO range
  std::uint64_t submissions = 0;
  std::uint64_t copy_packets = 0;
  std::uint64_t bytes_copied = 0;
  std::uint64_t seq_no = 0;
};

Engine& engine() {
  static Engine e;
  return e;
}

// The bytes at [va, va + size) if one mapping of a BO in `allowed` holds all of them.
std::uint8_t* resolve(Engine& e, const std::set<amdgpu_bo*>& allowed, std::uint64_t va, std::uint64_t size) {
  auto it = e.mappings.upper_bound(va);
  if (it == e.mappings.begin()) return nullptr;
  --it;
  const Mapping& m = it->second;
  if (va + size > it->first + m.size || allowed.count(m.bo) == 0) return nullptr;
  return m.bo->memory + m.offset + (va - it->first);
}

int execute(Engine& e, const std::set<amdgpu_bo*>& allowed, const std::uint32_t* ib, std::uint32_t dwords) {
  if (dwords == 0 || dwords % 8 != 0) return -EINVAL;
  for (std::uint32_t i = 0; i < dwords;) {
    const std::uint32_t header = ib[i];
    const std::uint32_t op = header & 0xff, sub_op = (header >> 8) & 0xff;
    if (op == 0) {   // NOP: bits 16-29 count the dwords that follow the header
      i += 1 + ((header >> 16) & 0x3fff);
      continue;
    }
    if (op != 1 || sub_op != 0 || i + 7 > dwords) return -EINVAL;
    const std::uint64_t count = std::uint64_t(ib[i + 1]) + (e.family >= AMDGPU_FAMILY_AI ? 1 : 0);
    const std::uint64_t src = ib[i + 3] | (std::uint64_t(ib[i + 4]) << 32);
    const std::uint64_t dst = ib[i + 5] | (std::uint64_t(ib[i + 6]) << 32);
    const std::uint64_t limit = e.family >= AMDGPU_FAMILY_AI ? 0x400000 : 0x1fffff;
    if (ib[i + 2] != 0 || count == 0 || count > limit) return -EINVAL;
    std::uint8_t* from = resolve(e, allowed, src, count);
    std::uint8_t* to = resolve(e, allowed, dst, count);
    if (from == nullptr || to == nullptr) return -EINVAL;   // a VM fault on the real engine
    std::memmove(to, from, count);
    ++e.copy_packets;
    e.bytes_copied += count;
    i += 7;
  }
  return 0;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void gpuckpt_fake_amdgpu_set(std::uint32_t family, int fence_never_signals) {
  std::lock_guard lock(engine().mutex);
  engine().family = family;
  engine().fence_never_signals = fence_never_signals != 0;
}

__attribute__((visibility("default"))) void gpuckpt_fake_amdgpu_stats(std::uint64_t* submissions,
                                                                    std::uint64_t* copy_packets,
                                                                    std::uint64_t* bytes_copied) {
  std::lock_guard lock(engine().mutex);
  *submissions = engine().submissions;
  *copy_packets = engine().copy_packets;
  *bytes_copied = engine().bytes_copied;
}

int amdgpu_device_initialize(int fd, uint32_t* major_version, uint32_t* minor_version,
                             amdgpu_device_handle* device_handle) {
  if (fd < 0) return -EBADF;
  *major_version = 3;
  *minor_version = 49;
  *device_handle = new amdgpu_device{fd};
  return 0;
}

int amdgpu_device_deinitialize(amdgpu_device_handle device_handle) {
  delete device_handle;
  return 0;
}

int amdgpu_query_gpu_info(amdgpu_device_handle, struct amdgpu_gpu_info* info) {
  std::memset(info, 0, sizeof *info);
  std::lock_guard lock(engine().mutex);
  info->family_id = engine().family;
  return 0;
}

int amdgpu_bo_alloc(amdgpu_device_handle, struct amdgpu_bo_alloc_request* req, amdgpu_bo_handle* buf_handle) {
  if (req->alloc_size == 0) return -EINVAL;
  void* memory = std::aligned_alloc(4096, (req->alloc_size + 4095) / 4096 * 4096);
  if (memory == nullptr) return -ENOMEM;
  std::memset(memory, 0xa5, req->alloc_size);   // fresh GTT memory is not zeroed for the caller's benefit
  *buf_handle = new amdgpu_bo{static_cast<std::uint8_t*>(memory), req->alloc_size, false};
  return 0;
}

int amdgpu_bo_free(amdgpu_bo_handle buf_handle) {
  if (buf_handle->imported) {
    ::munmap(buf_handle->memory, buf_handle->size);
  } else {
    std::free(buf_handle->memory);
  }
  delete buf_handle;
  return 0;
}

int amdgpu_bo_cpu_map(amdgpu_bo_handle buf_handle, void** cpu) {
  *cpu = buf_handle->memory;
  return 0;
}

int amdgpu_bo_cpu_unmap(amdgpu_bo_handle) { return 0; }

int amdgpu_va_range_alloc(amdgpu_device_handle, enum amdgpu_gpu_va_range, uint64_t size, uint64_t va_base_alignment,
                          uint64_t, uint64_t* va_base_allocated, amdgpu_va_handle* va_range_handle, uint64_t) {
  Engine& e = engine();
  std::lock_guard lock(e.mutex);
  const std::uint64_t align = va_base_alignment ? va_base_alignment : 4096;
  const std::uint64_t base = (e.next_va + align - 1) / align * align;
  e.next_va = base + size + (1ull << 20);   // a gap, so an overrun is no other BO's address
  *va_base_allocated = base;
  *va_range_handle = new amdgpu_va{base, size};
  return 0;
}

int amdgpu_va_range_free(amdgpu_va_handle va_range_handle) {
  delete va_range_handle;
  return 0;
}

int amdgpu_bo_va_op(amdgpu_bo_handle bo, uint64_t offset, uint64_t size, uint64_t addr, uint64_t, uint32_t ops) {
  Engine& e = engine();
  std::lock_guard lock(e.mutex);
  if (ops == AMDGPU_VA_OP_MAP) {
    if (offset + size > (bo->size + 4095) / 4096 * 4096) return -EINVAL;
    e.mappings[addr] = Mapping{bo, offset, size};
    return 0;
  }
  if (ops == AMDGPU_VA_OP_UNMAP) return e.mappings.erase(addr) == 1 ? 0 : -EINVAL;
  return -EINVAL;
}

int amdgpu_bo_import(amdgpu_device_handle, enum amdgpu_bo_handle_type type, uint32_t shared_handle,
                     struct amdgpu_bo_import_result* output) {
  if (type != amdgpu_bo_handle_type_dma_buf_fd) return -EINVAL;
  struct stat st {};
  if (::fstat(static_cast<int>(shared_handle), &st) != 0 || st.st_size <= 0) return -EINVAL;
  void* memory = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                        static_cast<int>(shared_handle), 0);
  if (memory == MAP_FAILED) return -errno;
  output->buf_handle = new amdgpu_bo{static_cast<std::uint8_t*>(memory), static_cast<std::uint64_t>(st.st_size), true};
  output->alloc_size = static_cast<std::uint64_t>(st.st_size);
  return 0;
}

int amdgpu_cs_ctx_create(amdgpu_device_handle dev, amdgpu_context_handle* context) {
  *context = new amdgpu_context{dev};
  return 0;
}

int amdgpu_cs_ctx_free(amdgpu_context_handle context) {
  delete context;
  return 0;
}

int amdgpu_bo_list_create(amdgpu_device_handle, uint32_t number_of_resources, amdgpu_bo_handle* resources, uint8_t*,
                          amdgpu_bo_list_handle* result) {
  auto* list = new amdgpu_bo_list{};
  for (uint32_t i = 0; i < number_of_resources; ++i) list->bos.insert(resources[i]);
  *result = list;
  return 0;
}

int amdgpu_bo_list_destroy(amdgpu_bo_list_handle handle) {
  delete handle;
  return 0;
}

int amdgpu_cs_submit(amdgpu_context_handle, uint64_t, struct amdgpu_cs_request* ibs_request,
                     uint32_t number_of_requests) {
  Engine& e = engine();
  std::lock_guard lock(e.mutex);
  for (uint32_t r = 0; r < number_of_requests; ++r) {
    amdgpu_cs_request& req = ibs_request[r];
    if (req.ip_type != AMDGPU_HW_IP_DMA || req.resources == nullptr || req.number_of_ibs != 1) return -EINVAL;
    const amdgpu_cs_ib_info& ib = req.ibs[0];
    const auto* dwords = reinterpret_cast<const std::uint32_t*>(
        resolve(e, req.resources->bos, ib.ib_mc_address, std::uint64_t(ib.size) * 4));
    if (dwords == nullptr) return -EINVAL;
    if (int err = execute(e, req.resources->bos, dwords, ib.size)) return err;
    ++e.submissions;
    req.seq_no = ++e.seq_no;
  }
  return 0;
}

int amdgpu_cs_query_fence_status(struct amdgpu_cs_fence* fence, uint64_t, uint64_t, uint32_t* expired) {
  std::lock_guard lock(engine().mutex);
  *expired = (!engine().fence_never_signals && fence->fence <= engine().seq_no) ? 1 : 0;
  return 0;
}

}  // extern "C"
