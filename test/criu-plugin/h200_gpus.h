// NVIDIA H200s as the node inventory describes them, and four GPU UUIDs, for the CUDA backend's tests: one model,
// so the matcher may place any of them on any other.
#pragma once

#include <string>

#include "gpu/gpu_model.h"

namespace gpuckpt::test {

inline const std::string kGpuA = "GPU-3df50d36-548a-08c1-7cd5-41ff6e7b3cad";
inline const std::string kGpuB = "GPU-cd626b4e-8c05-6521-8a3e-41d9ae0beccd";
inline const std::string kGpuC = "GPU-11712ee8-83b5-9c26-a94f-628cbf33212d";
inline const std::string kGpuD = "GPU-f6500d35-939e-034a-0ef8-b6d248daf52c";

inline GpuDevice h200(const std::string& uuid, int minor) {
  GpuDevice g;
  g.id = uuid;
  g.uuid = uuid;
  g.vendor = GpuVendor::Nvidia;
  g.name = "NVIDIA H200";
  g.vendor_id = 0x10de;
  g.device_id = 0x2335;
  g.memory_bytes = 150ULL << 30;
  g.compute_capability = "9.0";
  g.driver_version = "580.159.04";
  g.firmware_version = "96.00.a5.00.1a";
  g.device_minor = minor;
  return g;
}

}  // namespace gpuckpt::test
