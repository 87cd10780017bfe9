// What the gpuckpt-nri tests share: a simulated node of two NVIDIA GPUs (/dev/nvidia0 and /dev/nvidia1, device
// numbers 195:0 and 195:1) and the CreateContainer requests runtimes really sent, saved under test/fixtures/.
#pragma once

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "gpu/gpu_model.h"
#include "base/result.h"
#include "nri-plugin/nri_plugin.h"
#include "test/support/gpu_builders.h"

namespace gpuckpt::nri::test_fixture {

inline NodeInventory two_nvidia_gpus(const std::string& model, std::uint64_t memory_gib) {
  NodeInventory inv;
  inv.hostname = "node-a";
  for (int i = 0; i < 2; ++i) {
    GpuDevice g = test::nvidia_gpu("GPU-" + std::to_string(i), model, memory_gib);
    g.device_minor = i;
    g.device_paths = {"/dev/nvidia" + std::to_string(i)};
    inv.gpus.push_back(g);
  }
  return inv;
}

// The device numbers of the two GPUs' nodes; anything else is not a device here.
inline Result<std::pair<std::uint32_t, std::uint32_t>> gpu_device_numbers(const std::string& path) {
  if (path == "/dev/nvidia0") return std::make_pair(195u, 0u);
  if (path == "/dev/nvidia1") return std::make_pair(195u, 1u);
  return make_error("no device " + path);
}

// The raw bytes of test/fixtures/<runtime_dir>/<file> (empty when missing) and the request they hold.
inline std::string capture_bytes(const std::string& runtime_dir, const std::string& file) {
  std::ifstream in(std::filesystem::path(GPUCKPT_TEST_FIXTURES) / runtime_dir / file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline api::CreateContainerRequest captured_request(const std::string& runtime_dir, const std::string& file) {
  const std::string bytes = capture_bytes(runtime_dir, file);
  REQUIRE_FALSE(bytes.empty());
  api::CreateContainerRequest request;
  REQUIRE(request.ParseFromString(bytes));
  return request;
}

}  // namespace gpuckpt::nri::test_fixture
