// "0x..." text of a number, for the AMD backend's messages (gpu_ids, addresses, mmap offsets).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace gpuckpt::amd {

inline std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace gpuckpt::amd
