// The GPU model every component shares: what a GPU is, what a node has, and the versioned record of which GPUs
// a checkpoint was taken on. Parsers (inventory.h) produce it, the matcher (matcher.h) consumes it, formats
// (properties_record.h) serialise it. Fields only grow; see docs/formats.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gpuckpt {

enum class GpuVendor { Nvidia, Amd, Other };

struct GpuLink {
  std::string type;            // "xgmi", "pcie", "nvlink" (KFD io_link type names, lower case)
  std::string peer_id;         // GpuDevice::id of the peer GPU in the same inventory; empty for a CPU node
  std::uint32_t peer_node = 0; // KFD node index of the peer (AMD), 0 otherwise
  std::uint32_t weight = 0;
  std::uint32_t min_bandwidth = 0;  // MB/s
  std::uint32_t max_bandwidth = 0;
  bool bidirectional = true;
  std::uint32_t count = 1;     // number of bonded links (NVLink "NV#")
};

struct GpuDevice {
  std::string id;              // stable within a node: NVIDIA "GPU-<uuid>", AMD "kfd-<gpu_id>", DRM "drm-<pci>"
  GpuVendor vendor = GpuVendor::Other;
  std::string name;            // "NVIDIA H200"; AMD marketing name or "gfx90a"
  std::string uuid;            // NVIDIA GPU UUID; AMD unique_id when the kernel exposes it
  std::string pci_address;     // "0000:00:06.0"
  std::uint32_t vendor_id = 0; // PCI ids
  std::uint32_t device_id = 0;
  int numa_node = -1;
  std::uint64_t memory_bytes = 0;     // VRAM / framebuffer
  std::string compute_capability;     // NVIDIA "9.0"; AMD gfx_target_version, e.g. "90010"
  std::string driver_version;         // NVIDIA driver; AMD: KFD ioctl version
  std::string firmware_version;       // NVIDIA VBIOS; AMD fw_version (properties keep sdma_fw_version etc.)
  int render_minor = -1;              // /dev/dri/renderD<minor>
  int device_minor = -1;              // /dev/nvidia<minor>
  std::uint32_t kfd_node = 0;         // AMD: index under topology/nodes
  std::uint32_t gpu_id = 0;           // AMD: KFD gpu_id (what CRIU images reference)
  std::uint64_t hive_id = 0;          // AMD XGMI hive; 0 = none
  std::string mig_mode;               // NVIDIA: "Disabled"/"Enabled"/"" unknown
  std::map<std::string, std::uint64_t> properties;  // every raw numeric property (KFD properties file, ...)
  std::vector<GpuLink> links;
  std::vector<std::string> device_paths;  // host device nodes: /dev/nvidia0, /dev/dri/renderD128, /dev/kfd
};

struct NodeInventory {
  std::string hostname;
  std::vector<GpuDevice> gpus;
  std::map<std::string, std::string> system;   // node-wide facts: KFD platform ids, NVIDIA driver version, ...
};

// The record stored with a checkpoint (JSON annotation and protobuf image): the node's GPUs and which of them
// the container/process used.
struct GpuPropertiesRecord {
  static constexpr int kVersion = 1;
  int version = kVersion;
  NodeInventory node;
  std::vector<std::string> used_gpu_ids;   // GpuDevice::id values; empty = the workload used no GPU
};

const char* to_string(GpuVendor vendor);                    // "nvidia", "amd", "other"
bool vendor_from_string(std::string_view name, GpuVendor& out);  // false for an unknown name

// The GPU in `inventory` whose id, UUID, PCI address, or (AMD) decimal KFD gpu_id equals `key`; nullptr if none.
// Schedulers and users name GPUs in all these ways.
const GpuDevice* find_gpu(const NodeInventory& inventory, std::string_view key);

// "80 GiB", "512 MiB": memory sizes in messages.
std::string format_bytes(std::uint64_t bytes);

}  // namespace gpuckpt
