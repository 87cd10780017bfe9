// GPU device nodes: which paths under /dev are GPU nodes, their device numbers, and a container's GPU nodes as a
// checkpoint records them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "base/result.h"

namespace gpuckpt {

// A device node the container sees and, when known, the GPU behind it.
struct ContainerGpuDevice {
  std::string container_path;   // "/dev/nvidia0"
  std::uint32_t major = 0;      // as the runtime created it on the source node
  std::uint32_t minor = 0;
  std::string gpu_id;           // GpuDevice::id; empty for shared nodes (/dev/kfd, /dev/nvidiactl) or unknown
};

// Host device path -> (major, minor). Production: stat under the host root (stat_device_numbers).
using DeviceNumberLookup = std::function<Result<std::pair<std::uint32_t, std::uint32_t>>(const std::string&)>;
DeviceNumberLookup stat_device_numbers(std::filesystem::path host_root);

// The device nodes a plan may name: canonical absolute paths in the GPU families /dev/nvidia*,
// /dev/nvidia-caps/*, /dev/kfd, /dev/dri/renderD*, /dev/dri/card* ("/dev/../etc/x", "/dev/nvidia0/.." are not).
bool is_gpu_device_path(std::string_view path);

}  // namespace gpuckpt
