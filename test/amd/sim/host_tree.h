// A host tree as the amdgpu/amdkfd driver lays it out in sysfs (KFD topology, DRM render nodes, PCI devices),
// written under a temporary root for the shared inventory to read. Property names and values follow a
// gfx90a (MI210-class) node as the kernel prints it; gpu_ids and render minors are the test's choice.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "test/amd/sim/sim_kfd.h"

namespace gpuckpt::amd::sim {

struct HostTreeOptions {
  std::uint64_t vram_bytes = 64ull << 30;
  std::uint32_t device_id = 0x740f;   // MI210
  std::uint32_t fw_version = 78;
};

void write_kfd_host_tree(const std::filesystem::path& root, const std::vector<SimGpu>& gpus,
                         const HostTreeOptions& options = {});
// proc/<pid>/fd/<n> entries (symlinks to /dev/null) for the fd-numbering rule.
void write_proc_fds(const std::filesystem::path& root, const std::string& pid, const std::vector<int>& fds);
// proc/<pid>/maps as the kernel prints it; `lines` are its lines without the trailing newline.
void write_proc_maps(const std::filesystem::path& root, const std::string& pid, const std::vector<std::string>& lines);

}  // namespace gpuckpt::amd::sim
