// The SDMA copy path through libdrm_amdgpu (system device only). NOT RUN ON AMD HARDWARE: it is compiled and
// kept honest (every libdrm error is reported), but no test exercises it; see docs/amd.md.
#pragma once

#include <cstddef>
#include <memory>

#include "criu-plugin/amd/amd_device.h"

namespace gpuckpt::amd {

// nullptr when libdrm_amdgpu cannot initialise the device behind `render_fd` (not an amdgpu render node,
// no permission, ...); the caller then uses the CPU path.
std::unique_ptr<BoCopier> make_libdrm_sdma_copier(int render_fd, std::size_t buffer_size);

}  // namespace gpuckpt::amd
