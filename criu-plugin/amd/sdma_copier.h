// The SDMA copy path through libdrm_amdgpu (system device only). NOT RUN ON AMD HARDWARE: every libdrm error is
// reported, and test/amd/sdma_copier_test.cpp runs it against a libdrm_amdgpu stand-in whose engine executes the
// packets (test/amd/sim/fake_libdrm_amdgpu.cpp); see docs/amd.md.
#pragma once

#include <cstddef>
#include <memory>

#include "criu-plugin/amd/amd_device.h"

namespace gpuckpt::amd {

// The reason when libdrm_amdgpu cannot initialise the device behind `render_fd` (not loadable, not an amdgpu
// render node, no permission, ...); the caller decides whether the CPU path may be used instead.
Result<std::unique_ptr<BoCopier>> make_libdrm_sdma_copier(int render_fd, std::size_t buffer_size);

}  // namespace gpuckpt::amd
