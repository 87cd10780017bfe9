// NVML behind a small interface: the driver library (dlopen "libnvidia-ml.so.1", no link-time dependency) and
// its one fake, a replay of a recorded snapshot (test/fixtures/*/nvml-snapshot.json, written by
// test/fixtures/tools/capture_nvidia_host.py on a real node). Both yield the same NvmlSnapshot.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace gpuckpt {

struct NvmlPeer {
  std::string pci_bus_id;    // normalised "0000:00:06.0"
  std::uint32_t links = 0;   // active NVLinks towards it (through NVSwitch: links of the less-connected side)
};

struct NvmlDevice {
  std::uint32_t index = 0;
  std::string name;
  std::string uuid;
  std::string pci_bus_id;    // normalised "0000:00:06.0" (NVML prints an 8-digit domain)
  std::uint64_t memory_total_bytes = 0;
  std::string compute_capability;  // "9.0"
  std::string mig_mode;            // "Enabled", "Disabled", "" (not supported)
  int minor_number = -1;
  std::string vbios_version;
  int numa_node = -1;
  std::vector<NvmlPeer> nvlink_peers;
};

struct NvmlSnapshot {
  static constexpr int kVersion = 1;
  std::string driver_version;
  int cuda_driver_version = 0;   // 13000 = CUDA 13.0
  std::vector<NvmlDevice> devices;
};

class NvmlSource {
 public:
  virtual ~NvmlSource() = default;
  // ENOENT when there is no NVML here (no driver library): callers treat that as "no NVIDIA data", not a failure.
  virtual Result<NvmlSnapshot> snapshot() const = 0;
};

std::unique_ptr<NvmlSource> make_driver_nvml();
std::unique_ptr<NvmlSource> make_nvml_replay(std::filesystem::path snapshot_file);

nlohmann::json to_json(const NvmlSnapshot& snapshot);
Result<NvmlSnapshot> nvml_snapshot_from_json(const nlohmann::json& json, std::string_view source);

// "00000000:00:06.0" / "0000:00:06.0" / upper case -> "0000:00:06.0"; unchanged when it is not a bus id.
std::string normalize_pci_bus_id(std::string_view bus_id);

}  // namespace gpuckpt
