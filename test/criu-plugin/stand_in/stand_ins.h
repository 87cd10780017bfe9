// The stand-ins of the plugin the e2e tests load into real CRIU on machines without a GPU (stand_in_plugin.cpp),
// named in CRIU's environment:
//   GPUCKPT_TEST_STAGING_VMA=0xADDRESS  a process mapping private anonymous memory there is handled as a CUDA process
//                                       whose driver checkpoint is done (staging_process.cpp is one)
//   GPUCKPT_TEST_NODE_STORE=/PATH       the directory treated as the node-local chunk store
// Each one set is announced once in CRIU's log; a malformed one is an error naming it, and stays off.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/result.h"
#include "criu-plugin/cuda/gpu_memory_path.h"

namespace gpuckpt::cuda::stand_in {

Result<std::optional<std::uint64_t>> staging_vma_from_env();
Result<std::optional<std::string>> node_store_from_env();
// Both, each logged as it is found.
MemoryPathStandIns from_env();

}  // namespace gpuckpt::cuda::stand_in
