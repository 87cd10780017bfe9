// NVIDIA GPU UUIDs: the text form nvidia-smi and /proc/driver/nvidia print ("GPU-6f1b2c3d-...") and the 16
// bytes the driver's checkpoint API takes (CUuuid).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace gpuckpt::cuda {

using Uuid = std::array<std::uint8_t, 16>;

// Accepts "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (the prefix and dashes optional, hex in either case).
// `source` names the input in the error ("mapping file /img/gpuckpt-gpu-map.json pair 2 source_uuid").
Result<Uuid> parse_uuid(std::string_view text, std::string_view source);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lower case.
std::string format_uuid(const Uuid& uuid);

}  // namespace gpuckpt::cuda
