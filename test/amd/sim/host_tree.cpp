#include "test/amd/sim/host_tree.h"

#include <cstdio>
#include <fstream>
#include <string>

namespace gpuckpt::amd::sim {
namespace fs = std::filesystem;
namespace {

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::string pci_address(std::size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0000:%02zx:00.0", 0x03 + index * 0x10);
  return buf;
}

}  // namespace

void write_kfd_host_tree(const fs::path& root, const std::vector<SimGpu>& gpus, const HostTreeOptions& options) {
  const fs::path topo = root / "sys/class/kfd/kfd/topology";
  write(topo / "generation_id", "1\n");
  write(topo / "system_properties", "platform_oem 0\nplatform_id 0\nplatform_rev 0\n");
  write(root / "dev/kfd", "");
  // Node 0: the CPU.
  write(topo / "nodes/0/gpu_id", "0\n");
  write(topo / "nodes/0/name", "\n");
  write(topo / "nodes/0/properties",
        "cpu_cores_count 16\nsimd_count 0\nmem_banks_count 1\ncaches_count 0\nio_links_count " +
            std::to_string(gpus.size()) + "\np2p_links_count 0\ncpu_core_id_base 0\nsimd_id_base 0\n"
            "max_waves_per_simd 0\nlds_size_in_kb 0\ngds_size_in_kb 0\nnum_gws 0\nwave_front_size 0\narray_count 0\n"
            "simd_arrays_per_engine 0\ncu_per_simd_array 0\nsimd_per_cu 0\nmax_slots_scratch_cu 0\n"
            "gfx_target_version 0\nvendor_id 0\ndevice_id 0\nlocation_id 0\ndomain 0\ndrm_render_minor 0\n"
            "hive_id 0\nnum_sdma_engines 0\nnum_sdma_xgmi_engines 0\nnum_sdma_queues_per_engine 0\n"
            "num_cp_queues 0\nmax_engine_clk_ccompute 3000\n");
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const SimGpu& g = gpus[i];
    const fs::path node = topo / "nodes" / std::to_string(i + 1);
    const std::string pci = pci_address(i);
    const unsigned location = static_cast<unsigned>((0x03 + i * 0x10) << 8);
    write(node / "gpu_id", std::to_string(g.gpu_id) + "\n");
    write(node / "name", "aldebaran\n");
    write(node / "properties",
          "cpu_cores_count 0\nsimd_count 416\nmem_banks_count 1\ncaches_count 273\nio_links_count 1\n"
          "p2p_links_count 0\ncpu_core_id_base 0\nsimd_id_base 2147487744\nmax_waves_per_simd 8\n"
          "lds_size_in_kb 64\ngds_size_in_kb 0\nnum_gws 64\nwave_front_size 64\narray_count 8\n"
          "simd_arrays_per_engine 1\ncu_per_simd_array 13\nsimd_per_cu 4\nmax_slots_scratch_cu 32\n"
          "gfx_target_version 90010\nvendor_id 4098\ndevice_id " + std::to_string(options.device_id) +
          "\nlocation_id " + std::to_string(location) + "\ndomain 0\ndrm_render_minor " +
          std::to_string(g.render_minor) + "\nhive_id 0\nnum_sdma_engines 2\nnum_sdma_xgmi_engines 3\n"
          "num_sdma_queues_per_engine 8\nnum_cp_queues 24\nmax_engine_clk_fcompute 1700\nlocal_mem_size 0\n"
          "fw_version " + std::to_string(options.fw_version) + "\ncapability 746029696\ndebug_prop 1495\n"
          "sdma_fw_version 8\nunique_id " + std::to_string(0x1000 + g.gpu_id) + "\nnum_xcc 1\n"
          "max_engine_clk_ccompute 3000\n");
    write(node / "mem_banks/0/properties",
          "heap_type 1\nsize_in_bytes " + std::to_string(options.vram_bytes) + "\nflags 0\nwidth 4096\nmem_clk_max 1600\n");
    write(node / "io_links/0/properties",
          "type 2\nversion_major 0\nversion_minor 0\nnode_from " + std::to_string(i + 1) +
              "\nnode_to 0\nweight 20\nmin_latency 0\nmax_latency 0\nmin_bandwidth 312\nmax_bandwidth 64000\n"
              "recommended_transfer_size 0\nflags 3\n");
    write(topo / "nodes/0/io_links" / std::to_string(i) / "properties",
          "type 2\nversion_major 0\nversion_minor 0\nnode_from 0\nnode_to " + std::to_string(i + 1) +
              "\nweight 20\nmin_latency 0\nmax_latency 0\nmin_bandwidth 312\nmax_bandwidth 64000\n"
              "recommended_transfer_size 0\nflags 3\n");
    const fs::path pci_dir = root / "sys/devices/pci0000:00" / pci;
    write(pci_dir / "vendor", "0x1002\n");
    char device[16];
    std::snprintf(device, sizeof device, "0x%04x\n", options.device_id);
    write(pci_dir / "device", device);
    write(pci_dir / "numa_node", "0\n");
    const std::string render = "renderD" + std::to_string(g.render_minor);
    fs::create_directories(pci_dir / "drm" / render);
    fs::create_directories(root / "sys/class/drm" / render);
    fs::create_symlink("../../../devices/pci0000:00/" + pci, root / "sys/class/drm" / render / "device");
    write(root / "sys/class/drm" / render / "dev", "226:" + std::to_string(g.render_minor) + "\n");
    write(root / "dev/dri" / render, "");
  }
}

void write_proc_fds(const fs::path& root, const std::string& pid, const std::vector<int>& fds) {
  const fs::path dir = root / "proc" / pid / "fd";
  fs::create_directories(dir);
  for (int fd : fds) fs::create_symlink("/dev/null", dir / std::to_string(fd));
}

void write_proc_maps(const fs::path& root, const std::string& pid, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  fs::create_directories(root / "proc" / pid);
  write(root / "proc" / pid / "maps", text);
}

}  // namespace gpuckpt::amd::sim
