// Small builders for GPU models in tests: scenario tables read as "two MI250X GCDs in one hive", not as
// forty field assignments.
#pragma once

#include <string>
#include <vector>

#include "gpu/gpu_model.h"

namespace gpuckpt::test {

inline constexpr std::uint64_t kGiB = 1024ull * 1024 * 1024;

inline GpuDevice amd_gpu(std::string id, std::uint32_t device_id, std::uint64_t vram_gib, int numa = 0,
                         std::uint64_t hive = 0, std::uint64_t fw = 100) {
  GpuDevice g;
  g.id = std::move(id);
  g.vendor = GpuVendor::Amd;
  g.name = "gfx90a";
  g.vendor_id = 0x1002;
  g.device_id = device_id;
  g.memory_bytes = vram_gib * kGiB;
  g.numa_node = numa;
  g.hive_id = hive;
  g.properties = {{"simd_count", 440}, {"gfx_target_version", 90010}, {"fw_version", fw}, {"sdma_fw_version", 8}};
  return g;
}

inline GpuDevice nvidia_gpu(std::string id, std::string name, std::uint64_t mem_gib, int numa = 0,
                            std::string driver = "580.159.04") {
  GpuDevice g;
  g.id = std::move(id);
  g.uuid = g.id;
  g.vendor = GpuVendor::Nvidia;
  g.name = std::move(name);
  g.compute_capability = "9.0";
  g.memory_bytes = mem_gib * kGiB;
  g.numa_node = numa;
  g.driver_version = std::move(driver);
  return g;
}

// Links a and b both ways (bidirectional) or a -> b only.
inline void link(std::vector<GpuDevice>& gpus, std::size_t a, std::size_t b, const std::string& type,
                 bool bidirectional = true, std::uint32_t count = 1) {
  GpuLink forward;
  forward.type = type;
  forward.peer_id = gpus[b].id;
  forward.bidirectional = bidirectional;
  forward.count = count;
  gpus[a].links.push_back(forward);
  if (bidirectional) {
    GpuLink back = forward;
    back.peer_id = gpus[a].id;
    gpus[b].links.push_back(back);
  }
}

inline void link_all(std::vector<GpuDevice>& gpus, const std::vector<std::size_t>& members, const std::string& type,
                     std::uint32_t count = 1) {
  for (std::size_t i = 0; i < members.size(); ++i)
    for (std::size_t j = i + 1; j < members.size(); ++j) link(gpus, members[i], members[j], type, true, count);
}

inline GpuPropertiesRecord record_of(std::vector<GpuDevice> gpus, std::vector<std::string> used) {
  GpuPropertiesRecord r;
  r.node.hostname = "source";
  r.node.gpus = std::move(gpus);
  r.used_gpu_ids = std::move(used);
  return r;
}

}  // namespace gpuckpt::test
