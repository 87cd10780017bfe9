// Tunables of the AMD backend, read from the environment CRIU runs in. Each is logged once as
// "param: NAME:VALUE".
#pragma once

#include <cstdint>
#include <string_view>

#include "base/result.h"

namespace gpuckpt::amd {

struct AmdConfig {
  // Upper bound of the staging buffer each per-GPU thread uses to move BO contents. A BO larger than this is
  // moved in several passes. GPUCKPT_AMD_MAX_BUFFER_SIZE, bytes with an optional K/M/G suffix.
  std::uint64_t max_buffer_size = 256ull << 20;
  // Restore BO contents in the main CRIU process (POST_FORKING worker) while CRIU restores memory.
  // GPUCKPT_AMD_PARALLEL_RESTORE=0 turns it off; it is also off for trees with more than one GPU process.
  bool parallel_restore = true;
  // Copy through SDMA (libdrm_amdgpu) where the device offers it; otherwise the CPU path.
  // GPUCKPT_AMD_SDMA=0 forces the CPU path.
  bool use_sdma = true;

  // Reads the environment; an unparsable value is an error naming the variable and the expected form.
  static Result<AmdConfig> from_env();
  // Logs every tunable as "param: NAME:VALUE", once per process.
  void log_once() const;
};

// "4096", "64K", "512M", "2G" (also lower case k/m/g); `name` is used in the error message.
Result<std::uint64_t> parse_size(std::string_view text, std::string_view name);
Result<bool> parse_bool(std::string_view text, std::string_view name);

}  // namespace gpuckpt::amd
