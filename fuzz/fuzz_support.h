// What the harnesses share: a scratch directory per fuzzing process, small limits, a fixed node and plan.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "archive/checkpoint_archive.h"
#include "archive/restore_archive.h"
#include "restore/restore_plan.h"
#include "test/support/gpu_builders.h"

namespace gpuckpt::fuzz {

// /dev/shm/gpuckpt-fuzz-<pid> (or under /tmp): in memory, because the code under test fsyncs what it writes and
// on a disk that would set the pace. libFuzzer leaves without running exit handlers, so each process removes the
// directories of processes that are gone instead.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm" : "/tmp";
    const std::string prefix = "gpuckpt-fuzz-";
    for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove_all(entry, ec);
    }
    const auto made = base / (prefix + std::to_string(::getpid()));
    std::filesystem::create_directories(made, ec);
    if (ec) ::abort();
    return made;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view data) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Small enough that a harness spends its time parsing, not copying.
inline ArchiveLimits small_limits() {
  ArchiveLimits limits;
  limits.max_archive_bytes = 4 << 20;
  limits.max_entry_bytes = 4 << 20;
  limits.max_total_bytes = 16 << 20;
  limits.max_entries = 4096;
  limits.max_metadata_bytes = 1 << 20;
  limits.max_nested_bytes = 4 << 20;
  return limits;
}

// The chunk import_fuzz's store holds before each import (make_import_seeds puts it into a checkpoint too, so the
// import finds it present): 4 KiB that do not compress, stored raw.
inline std::vector<std::byte> present_chunk() {
  std::vector<std::byte> out(4096);
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x >> 56);
  }
  return out;
}

inline NodeInventory two_gpus() {
  NodeInventory node;
  node.hostname = "fuzz";
  for (int i = 0; i < 2; ++i) {
    node.gpus.push_back(test::nvidia_gpu("GPU-" + std::to_string(i), "NVIDIA H200", 141));
    node.gpus.back().device_minor = i;
    node.gpus.back().device_paths = {"/dev/nvidia" + std::to_string(i), "/dev/nvidiactl"};
  }
  return node;
}

inline RestorePlan fixed_plan() {
  RestorePlan plan;
  plan.id = "rp-0123456789abcdef0123456789abcdef";
  plan.checkpoint_id = "ck-fuzz";
  plan.assignments = {{"GPU-0", "GPU-1"}};
  plan.devices = {{"/dev/nvidia0", "/dev/nvidia1", "GPU-0", "GPU-1", ""}};
  plan.env = {{"NVIDIA_VISIBLE_DEVICES", "1"}};
  return plan;
}

inline DeviceNumberLookup fixed_numbers() {
  return [](const std::string& path) -> Result<std::pair<std::uint32_t, std::uint32_t>> {
    if (path == "/dev/nvidia0") return std::make_pair(195u, 0u);
    if (path == "/dev/nvidia1") return std::make_pair(195u, 1u);
    return make_error("no " + path);
  };
}

}  // namespace gpuckpt::fuzz
